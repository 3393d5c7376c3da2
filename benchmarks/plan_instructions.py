"""Instructions a plan takes, counted by valgrind's callgrind: a figure this machine's drifting
speed does not change (wall-clock pairs of one plan drift by 20-40% within minutes here).

For each tree, two processes run under ``valgrind --tool=callgrind``: one generates the case
(``plan_generate.py``, 25 VMs a host, seed 1) and plans it ``--plans`` times, the other only
generates it. Their difference over ``--plans`` is the instructions of one plan, imports and
input left out. ``PYTHONHASHSEED=0`` makes each count repeat to within a few in ten thousand.
Each tree's package is byte-compiled first, so neither pays for compiling its sources. With
``--before DIR`` (an earlier version's package, e.g. ``git archive BASE reconciler | tar -x
-C DIR``), that version is counted too and the change is shown. The processes of a run go
two at a time.

Needs valgrind (Debian: ``apt-get install valgrind``). A 1,000-host count takes about eight
minutes a process; 300 hosts about three.

Run: ``.venv/bin/python benchmarks/plan_instructions.py --hosts 1000 --before /tmp/before``
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
COLLECTED = re.compile(r"Collected : (\d+)")


def _child(hosts: int, plans: int) -> None:
    from plan_generate import GenParams, generate

    from reconciler.core.planner import plan

    case = generate(GenParams(hosts, 25.0, 1))
    for _ in range(plans):
        plan(case.desired, case.snapshot, case.history, now=case.now)


def _count(package: Path, hosts: int, plans: int) -> int:
    """Instructions of a process that generates the case and plans it ``plans`` times."""
    code = (
        "import sys; sys.path[:0] = " + json.dumps([str(package), str(HERE)]) + "\n"
        "import plan_instructions\n"
        f"plan_instructions._child({hosts}, {plans})\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={tmp}/callgrind.out",
                sys.executable,
                "-c",
                code,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=7200,
            check=False,
        )
    found = COLLECTED.search(out.stderr)
    if out.returncode != 0 or found is None:
        raise SystemExit(f"valgrind failed for {package} ({hosts} hosts):\n{out.stderr[-2000:]}")
    return int(found.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--plans", type=int, default=2, help="plans counted in each process")
    ap.add_argument("--before", type=Path, metavar="DIR", help="an earlier version's package")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: apt-get install valgrind", file=sys.stderr)
        return 2
    trees = {"now": ROOT}
    if args.before is not None:
        if not (args.before / "reconciler" / "core" / "planner.py").is_file():
            print(f"--before {args.before}: no reconciler package there", file=sys.stderr)
            return 2
        trees["before"] = args.before.resolve()
    for tree in trees.values():
        compileall.compile_dir(tree / "reconciler", quiet=1)
    jobs = [(name, tree, n) for name, tree in trees.items() for n in (0, args.plans)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = list(pool.map(lambda job: _count(job[1], args.hosts, job[2]), jobs))
    per_plan: dict[str, float] = {}
    for name in trees:
        base, total = (c for (n, _, _), c in zip(jobs, counts, strict=True) if n == name)
        per_plan[name] = (total - base) / args.plans
        print(
            f"{name:7} {per_plan[name] / 1e9:.4f} billion instructions a plan ({args.hosts} hosts)"
        )
    if "before" in per_plan:
        change = per_plan["now"] / per_plan["before"] - 1
        print(f"change  {change * 100:+.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
