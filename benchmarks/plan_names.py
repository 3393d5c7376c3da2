"""Speed of a plan read from a snapshot file, by how the file lists its VMs and how they are named.

``plan_generate.py`` names VMs in the order of their hosts (vm-00001 to vm-00025 on the first
host, ...), which real clusters rarely do. This benchmark makes three snapshot files of the
same generated case (25 VMs a host, seed 1):

* ``aligned``: the generated names, VMs listed by name (which is also host by host);
* ``random, by host``: the same VMs with their names dealt at random (``--seed``; the rules'
  name lists renamed to match, so the plan solves the same problem), listed host by host, as
  the observer of earlier versions wrote them;
* ``random, by name``: the same, listed in (name, host) order, as the observer writes them now.

Each file is read in a fresh process (``Snapshot.model_validate_json``, as ``plan --snapshot``
reads it, so memory is laid out in the order of the list), planned once to warm up, then
``--repeat`` times; the median CPU seconds of those is shown, for ``--rounds`` rounds
alternating the three files. The plans of the two random files must be the same byte for byte.

Run: ``.venv/bin/python benchmarks/plan_names.py --hosts 5000 --rounds 2``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from own_process import measured

FILES = {
    "aligned": "aligned.json",
    "random, by host": "random-by-host.json",
    "random, by name": "random-by-name.json",
}


def _write(hosts: int, seed: int, where: str) -> dict[str, object]:
    """The three snapshot files in ``where``, and each one's desired state, history and time
    (pickled)."""
    folder = Path(where)
    from plan_generate import GenParams, generate

    case = generate(GenParams(hosts, 25.0, 1))
    vms = list(case.snapshot.vms)
    names: list[str] = [vm.name for vm in vms]
    dealt = names[:]
    random.Random(seed).shuffle(dealt)
    renamed = dict(zip(names, dealt, strict=True))
    others = [vm.model_copy(update={"name": renamed[vm.name]}) for vm in vms]
    rules = [
        r.model_copy(
            update={"vms": r.vms.model_copy(update={"names": [renamed[n] for n in r.vms.names]})}
        )
        if r.vms.names is not None
        else r
        for r in case.desired.rules.spec.rules
    ]
    spec = case.desired.rules.spec.model_copy(update={"rules": rules})
    desired = case.desired.model_copy(
        update={"rules": case.desired.rules.model_copy(update={"spec": spec})}
    )
    listed = {
        "aligned": (sorted(vms, key=lambda v: (v.name, v.host)), case.desired),
        "random, by host": (sorted(others, key=lambda v: (v.host, v.name)), desired),
        "random, by name": (sorted(others, key=lambda v: (v.name, v.host)), desired),
    }
    for label, (order, wanted) in listed.items():
        snapshot = case.snapshot.model_copy(update={"vms": order})
        path = folder / FILES[label]
        path.write_text(snapshot.model_dump_json(by_alias=True))
        inputs = (wanted, case.history, case.now)
        path.with_suffix(".pickle").write_bytes(pickle.dumps(inputs, pickle.HIGHEST_PROTOCOL))
    return {"vms": len(vms)}


def _measure(where: str, repeat: int) -> dict[str, object]:
    path = Path(where)
    from reconciler.core.planner import plan
    from reconciler.model.snapshot import Snapshot

    desired, history, now = pickle.loads(path.with_suffix(".pickle").read_bytes())
    snapshot = Snapshot.model_validate_json(path.read_bytes())
    result = plan(desired, snapshot, history, now=now)
    cpus = []
    for _ in range(repeat):
        started = time.process_time()
        result = plan(desired, snapshot, history, now=now)
        cpus.append(time.process_time() - started)
    text = result.model_dump_json()
    return {
        "cpu": statistics.median(cpus),
        "moves": len(result.moves) + len(result.deferred),
        "sha256": hashlib.sha256(text.encode()).hexdigest()[:16],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=7, help="how the names are dealt")
    ap.add_argument("--repeat", type=int, default=3, help="plans timed in each process")
    ap.add_argument("--rounds", type=int, default=2, help="alternated processes per file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        measured("plan_names", f"_write({args.hosts}, {args.seed}, {tmp!r})")
        cpus: dict[str, list[float]] = {label: [] for label in FILES}
        plans: dict[str, set[object]] = {label: set() for label in FILES}
        for k in range(args.rounds):
            for label, name in FILES.items():
                found = measured("plan_names", f"_measure({str(folder / name)!r}, {args.repeat})")
                cpus[label].append(float(str(found["cpu"])))
                plans[label].add(found["sha256"])
                print(f"round {k + 1} {label:16} {json.dumps(found)}", flush=True)
    for label, values in cpus.items():
        shown = " ".join(f"{v:.3f}" for v in values)
        print(f"{label:16} CPU s a plan: {shown}   median {statistics.median(values):.3f}")
    same = (
        plans["random, by host"] == plans["random, by name"] and len(plans["random, by host"]) == 1
    )
    print("random-name plans the same byte for byte either way:", same)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
