"""Whether a change to the planner changed any plan of ``plan_scale.py``'s cases.

Saves the plan's JSON (``model_dump_json``) of each generated case (``plan_generate.py``, 25
VMs a host, as ``plan_scale.py`` makes it) into a folder, or compares the plans of the code
imported now with those saved, byte for byte. Save before a change, check after it:

    .venv/bin/python benchmarks/plan_same.py --save /tmp/plans --sizes 1000,5000
    .venv/bin/python benchmarks/plan_same.py --check /tmp/plans --sizes 1000,5000

Exits 1 when a plan differs (or none was saved for a size).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from plan_generate import GenParams, generate

from reconciler.core.planner import plan


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--save", type=Path, metavar="DIR", help="write each plan's JSON here")
    where.add_argument("--check", type=Path, metavar="DIR", help="compare with the JSON here")
    ap.add_argument("--sizes", default="1000,5000", help="host counts, comma-separated")
    ap.add_argument("--vms-per-host", type=float, default=25.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    same = True
    for hosts in (int(s) for s in args.sizes.split(",")):
        case = generate(GenParams(hosts, args.vms_per_host, args.seed))
        text = plan(case.desired, case.snapshot, case.history, now=case.now).model_dump_json()
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        name = f"plan-{hosts}-{args.vms_per_host:g}-{args.seed}.json"
        if args.save is not None:
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / name).write_text(text)
            print(f"{hosts:>6} hosts: saved {len(text)} bytes, sha256 {digest}")
            continue
        saved = args.check / name
        if not saved.exists():
            print(f"{hosts:>6} hosts: nothing saved at {saved}")
            same = False
            continue
        ok = saved.read_text() == text
        same = same and ok
        verdict = "same" if ok else "DIFFERENT"
        print(f"{hosts:>6} hosts: {len(text)} bytes, sha256 {digest}: {verdict}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
