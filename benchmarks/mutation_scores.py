"""The score of the last ``make mutation`` run, per module: mutants, killed, survived, not yet
run, and the survivors by name (``mutmut show NAME`` prints one's diff).

Reads what mutmut left in ``mutants/`` (one ``.meta`` file per mutated module); run it from
the repository root. Exits 1 when more than ``--max-survived`` percent of a module's mutants
that ran were not killed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

# mutmut's exit codes of one mutant's test run (mutmut's own table, kept to what a run leaves)
_STATUS = {
    0: "survived",
    1: "killed",
    3: "killed",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    36: "timeout",
    24: "timeout",
    -24: "timeout",
    152: "timeout",
    255: "timeout",
    None: "not checked",
}


def module_statuses(meta: Path) -> dict[str, str]:
    codes: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"]
    return {name: _STATUS.get(code, "suspicious") for name, code in codes.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("mutants"))
    parser.add_argument("--max-survived", type=float, default=5.0, metavar="PERCENT")
    args = parser.parse_args(argv)
    metas = sorted(args.dir.rglob("*.py.meta"))
    if not metas:
        print(f"no mutation results in {args.dir}/: run `make mutation` first", file=sys.stderr)
        return 2
    over = False
    print(
        f"{'module':42} {'mutants':>7} {'killed':>7} {'timeout':>7} {'survived':>8} "
        f"{'no test':>7} {'unrun':>6} {'% left':>6}"
    )
    survivors: list[str] = []
    for meta in metas:
        statuses = module_statuses(meta)
        counts = Counter(statuses.values())
        run = len(statuses) - counts["not checked"]
        # a timeout is a mutant the tests stopped (a loop that no longer ends): caught
        left = run - counts["killed"] - counts["timeout"]
        share = 100.0 * left / run if run else 0.0
        over |= share > args.max_survived
        module = str(meta.relative_to(args.dir)).removesuffix(".meta")
        print(
            f"{module:42} {len(statuses):7} {counts['killed']:7} {counts['timeout']:7} "
            f"{counts['survived']:8} {counts['no tests']:7} {counts['not checked']:6} "
            f"{share:6.1f}"
        )
        survivors += [
            f"  {name}  ({status})"
            for name, status in sorted(statuses.items())
            if status not in ("killed", "timeout", "not checked")
        ]
    if survivors:
        print("\nnot killed (mutmut show NAME):")
        print("\n".join(survivors))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
