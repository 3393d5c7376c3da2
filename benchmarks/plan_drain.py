"""Speed of a plan that drains many hosts at once: every VM of ``--drain`` hosts of a generated
cluster (``plan_generate.py``, 25 VMs a host) needs a new host, chosen among all the others.

The hosts put in maintenance are every (hosts / drain)-th one in name order. Each run is a
fresh ``plan()`` on the same input, built outside the timed region; CPU seconds, the median
of ``--repeat`` runs. With ``--before DIR`` (an earlier version's package, e.g. ``git archive
BASE reconciler | tar -x -C DIR``), the same is timed for that version in a process of its
own, alternating with this one, and both plans must be the same byte for byte.

Run: ``.venv/bin/python benchmarks/plan_drain.py --hosts 5000 --drain 100``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

from own_process import measured


def _measure(hosts: int, drain: int, repeat: int) -> dict[str, object]:
    from plan_generate import GenParams, generate

    from reconciler.core.planner import plan

    case = generate(GenParams(hosts, 25.0, 1))
    spec = case.desired.cluster.spec
    step = max(1, len(spec.hosts) // drain)
    drained = [
        h.model_copy(update={"maintenance": True}) if i % step == 0 else h
        for i, h in enumerate(sorted(spec.hosts, key=lambda h: h.name))
    ]
    cluster = case.desired.cluster.model_copy(
        update={"spec": spec.model_copy(update={"hosts": drained})}
    )
    desired = case.desired.model_copy(update={"cluster": cluster})
    cpus: list[float] = []
    text = ""
    for _ in range(repeat):
        started = time.process_time()
        result = plan(desired, case.snapshot, case.history, now=case.now)
        cpus.append(time.process_time() - started)
        text = result.model_dump_json()
    moves = [*result.moves, *result.deferred]
    return {
        "cpu": statistics.median(cpus),
        "drained": sum(1 for h in drained if h.maintenance),
        "maintenance_moves": sum(1 for m in moves if m.reason.value == "Maintenance"),
        "moves": len(moves),
        "unsatisfiable": len(result.unsatisfiable),
        "sha256": hashlib.sha256(text.encode()).hexdigest()[:16],
    }


def _run(package: Path | None, hosts: int, drain: int, repeat: int) -> dict[str, object]:
    """One measurement in a process of its own, importing ``reconciler`` from ``package``."""
    return measured("plan_drain", f"_measure({hosts}, {drain}, {repeat})", package)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=5000)
    ap.add_argument("--drain", type=int, default=100, help="hosts put in maintenance")
    ap.add_argument("--repeat", type=int, default=1, help="plans timed in each process")
    ap.add_argument("--rounds", type=int, default=1, help="alternated processes per version")
    ap.add_argument("--before", type=Path, help="an earlier version's package folder")
    args = ap.parse_args()
    same = True
    for k in range(args.rounds):
        now = _run(None, args.hosts, args.drain, args.repeat)
        print(f"round {k + 1} this tree:   {json.dumps(now)}", flush=True)
        if args.before is not None:
            then = _run(args.before, args.hosts, args.drain, args.repeat)
            print(f"round {k + 1} before:      {json.dumps(then)}", flush=True)
            same = same and then["sha256"] == now["sha256"]
    if args.before is not None:
        print("plans the same byte for byte:", same)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
