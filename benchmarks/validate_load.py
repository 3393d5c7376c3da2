"""Time to read and validate a large cluster folder (YAML with positions, models, semantics).

The folder is written from a generated case (plan_generate.py): the Cluster, the policy, the
rules, and a Placement listing every VM on the host it runs on. Timed separately: reading the
YAML documents with positions (``read_documents``), and the whole ``validate_folder``.

Run: ``.venv/bin/python benchmarks/validate_load.py`` (``--hosts 1000 --vms-per-host 27``,
``--repeat 5``, ``--keep DIR`` to write the folder there and keep it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from plan_generate import GenParams, generate

from reconciler.config import validate_folder, yaml_source
from reconciler.config.folders import yaml_files
from reconciler.config.yaml_source import read_documents


def write_folder(folder: Path, hosts: int, vms_per_host: float, seed: int) -> int:
    """Writes the case's four documents into ``folder``; returns the number of VMs placed."""
    case = generate(GenParams(hosts, vms_per_host, seed))
    desired = case.desired
    placement: dict[str, Any] = {
        "apiVersion": desired.placement.api_version,
        "kind": "Placement",
        "metadata": {"name": "bench"},
        "spec": {"vms": {vm.name: vm.host for vm in case.snapshot.vms}},
    }
    docs: dict[str, Any] = {
        "cluster": desired.cluster.model_dump(mode="json", by_alias=True, exclude_defaults=True),
        "policy": desired.policy.model_dump(mode="json", by_alias=True, exclude_defaults=True),
        "rules": desired.rules.model_dump(mode="json", by_alias=True, exclude_defaults=True),
        "placement": placement,
    }
    for key in ("cluster", "policy", "rules"):
        docs[key].setdefault("apiVersion", desired.cluster.api_version)
    for name, doc in docs.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return len(placement["spec"]["vms"])


def _timed(fn: Any, repeat: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each run (CPU time is steadier on a shared machine)."""
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--vms-per-host", type=float, default=27)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", type=Path, help="write the folder here and keep it")
    ap.add_argument("--read-only", action="store_true", help="time the YAML reading only")
    ap.add_argument("--pure", action="store_true", help="without libyaml's C parser")
    args = ap.parse_args()
    if args.pure:
        setattr(yaml_source, "_FAST_LOADER", None)  # noqa: B010 - the module keeps it Final
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        vms = write_folder(folder, args.hosts, args.vms_per_host, args.seed)
        size = sum(p.stat().st_size for p in yaml_files(folder))
        print(f"{args.hosts} hosts, {vms} placement entries, {size / 1024:.0f} KiB of YAML")
        fast = yaml_source._FAST_LOADER is not None
        print(f"YAML parser: {'libyaml (C)' if fast else 'pure Python'}")
        paths = yaml_files(folder)

        def read() -> None:
            for p in paths:
                read_documents(p, root=folder)

        def validate() -> None:
            report, _ = validate_folder(folder)
            if not report.valid:
                sys.exit(f"the generated folder is not valid: {report.findings[:3]}")

        timed = [("read YAML", read)] + ([] if args.read_only else [("validate", validate)])
        for what, fn in timed:
            wall, cpu = _timed(fn, args.repeat)
            print(
                f"{what:16} wall median {statistics.median(wall):.3f} s, best {min(wall):.3f} s; "
                f"CPU median {statistics.median(cpu):.3f} s, best {min(cpu):.3f} s "
                f"({args.repeat} runs)"
            )


if __name__ == "__main__":
    main()
