"""Planner quality on mid-size clusters (24 and 40 hosts) against a proven optimum.

The cases are those of ``plan_quality.py --sizes`` (``plan_generate.py``: both bases, with and
without broken anti-affinity groups). Their optimum (``plan_milp.py``, final states only, so a
lower bound for a planner that moves one VM at a time) takes minutes to prove at this size, so
it is solved once per case and kept in ``plan_midsize_optima.json`` next to this file, with a
digest of the case as the benchmark models it: a changed generator solves again. The solve
gets the planner's moves as a bound on the objective (scipy's HiGHS takes no starting
solution; the bound prunes what the planner's plan as an incumbent would), more time
(``--milp-seconds``), and runs under ``nice`` when started so. A solve the clock stops keeps
what it proved: the best plan found (or the planner's, which the bound admits) and the fewest
moves its dual bound allows. Both are printed, so a gap shows.

Run: ``nice .venv/bin/python benchmarks/plan_midsize.py`` (``--help`` for options); with the
cache filled it takes seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import plan_milp
from plan_generate import GenParams, generate
from plan_model import Instance, build_instance, judge, revision
from plan_quality import PlannerRun, heuristic_only, load_planner, run_planner

from reconciler.model.policy import Basis

CACHE = Path(__file__).with_name("plan_midsize_optima.json")
CASE_RATIO = 1.02
"""Each case's moves at most this times its best known (under 50 moves: the best known)."""


@dataclass(frozen=True)
class Optimum:
    status: str  # optimal | timeout | unreachable
    moves: int  # best known final state within the threshold (proven fewest when optimal)
    min_moves: int  # fewest moves proven necessary
    gib: float
    seconds: float
    source: str  # milp | planner: who found the best known state

    def json(self) -> dict[str, object]:
        return {
            "status": self.status,
            "moves": self.moves,
            "min_moves": self.min_moves,
            "gib": round(self.gib, 3),
            "seconds": round(self.seconds, 1),
            "source": self.source,
        }


def case_params(
    sizes: list[int], seeds: int, vms_per_host: float, broken: list[float]
) -> list[GenParams]:
    out = []
    for hosts in sizes:
        for frac in broken:
            for seed in range(1, seeds + 1):
                for basis in (Basis.USED, Basis.ALLOCATED):
                    p = GenParams(hosts, vms_per_host, seed, basis)
                    out.append(replace(p, broken_groups=frac) if frac else p)
    return out


def case_key(p: GenParams) -> str:
    return f"h{p.hosts}-v{p.vms_per_host:g}-s{p.seed}-{p.basis.value}-b{p.broken_groups:g}"


def digest(inst: Instance) -> str:
    """Of what the optimum sees (the benchmark's own model of the case), so a field added to
    the reconciler's input models with its default does not make every optimum stale."""
    parts = [
        f"{k}={v.tolist() if isinstance(v, np.ndarray) else v!r}"
        for k, v in sorted(vars(inst).items())
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def solve_optimum(inst: Instance, planner: PlannerRun | None, seconds: float) -> Optimum:
    """The optimum within ``seconds``, bounded by the planner's plan when that one reaches the
    threshold and breaks no rule."""
    t0 = time.perf_counter()
    known = None
    if planner is not None:
        o = planner.outcome
        if o.reaches(inst.threshold) and not o.rule_violations and not o.step_violations:
            known = o
    bound = known.moves if known is not None else None
    res = plan_milp.solve(inst, threshold=inst.threshold, time_limit=seconds, max_moves=bound)
    spent = time.perf_counter() - t0
    if res.assign is not None:
        found = judge(inst, "optimum", res.assign, res.seconds)
        if known is None or found.moves < known.moves or res.status == "optimal":
            lower = found.moves if res.status == "optimal" else res.min_moves
            return Optimum(res.status, found.moves, lower, found.gib, spent, "milp")
    if known is not None:  # the MILP found nothing better in time (or proved the plan optimal)
        proven = res.status == "infeasible"  # nothing with fewer moves... or as many
        lower = known.moves if proven else res.min_moves
        status = "optimal" if proven else "timeout"
        return Optimum(status, known.moves, lower, known.gib, spent, "planner")
    return Optimum(
        "unreachable" if res.status == "infeasible" else res.status, 0, 0, 0.0, spent, "-"
    )


def load_cache(path: Path) -> dict[str, dict[str, object]]:
    if not path.exists():
        return {}
    data: dict[str, dict[str, object]] = json.loads(path.read_text())
    return data


def save_cache(path: Path, cache: dict[str, dict[str, object]]) -> None:
    path.write_text(json.dumps(dict(sorted(cache.items())), indent=1) + "\n")


def from_cache(entry: dict[str, object]) -> Optimum:
    return Optimum(
        str(entry["status"]),
        int(str(entry["moves"])),
        int(str(entry["min_moves"])),
        float(str(entry["gib"])),
        float(str(entry["seconds"])),
        str(entry["source"]),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="24,40", help="host counts (default 24,40)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per size and basis (default 3)")
    ap.add_argument("--vms-per-host", type=float, default=10.0, help="default 10")
    ap.add_argument("--broken", default="0,0.5", help="fractions of broken groups (default 0,0.5)")
    ap.add_argument("--milp-seconds", type=float, default=300.0, help="per uncached optimum")
    ap.add_argument("--cache", type=Path, default=CACHE, help=f"default {CACHE.name}")
    ap.add_argument("--no-solve", action="store_true", help="cached optima only")
    ap.add_argument("--heuristic", action="store_true", help="switch the exact plans off")
    args = ap.parse_args()
    plan_fn = load_planner()
    if plan_fn is None:
        print("reconciler.core.planner is not available")
        return 1
    if args.heuristic:
        heuristic_only()
    print(revision() + (" (exact plan off)" if args.heuristic else ""))
    params = case_params(
        [int(x) for x in args.sizes.split(",")],
        args.seeds,
        args.vms_per_host,
        [float(x) for x in args.broken.split(",")],
    )
    cache = load_cache(args.cache)
    head = (
        f"{'case':<28} {'optimum':>7} {'proven':>6} {'milp s':>7} | {'planner':>7} "
        f"{'GiB':>7} {'spread':>6} {'viol':>5} {'ms':>7}"
    )
    print(head)
    print("-" * len(head))
    rows: list[tuple[GenParams, Optimum | None, PlannerRun]] = []
    for p in params:
        case = generate(p)
        inst = build_instance(case.desired, case.snapshot)
        run = run_planner(plan_fn, case, inst)
        key, dig = case_key(p), digest(inst)
        entry = cache.get(key)
        opt = from_cache(entry) if entry is not None and entry.get("digest") == dig else None
        if opt is None and not args.no_solve:
            opt = solve_optimum(inst, run, args.milp_seconds)
            cache[key] = {"digest": dig, **opt.json()}
            save_cache(args.cache, cache)
        rows.append((p, opt, run))
        o = run.outcome
        mark = "" if o.reaches(inst.threshold) else "*"
        opt_s = "-" if opt is None else f"{opt.moves}"
        proven = (
            "-" if opt is None else ("yes" if opt.status == "optimal" else f">={opt.min_moves}")
        )
        secs = "-" if opt is None else f"{opt.seconds:.0f}"
        viol = f"{len(o.rule_violations)}/{o.step_violations}"
        print(
            f"{key:<28} {opt_s:>7} {proven:>6} {secs:>7} | {o.moves:>7} {o.gib:>7.1f} "
            f"{o.max_spread:>5.1f}{mark:1} {viol:>5} {o.seconds * 1000:>7.1f}",
            flush=True,
        )
    return summarise(rows)


def _best(p: GenParams, o: Optimum, r: PlannerRun) -> int:
    """The optimum's moves, or the fewer of the best known and this planner's plan."""
    mine = r.outcome
    if o.status == "optimal" or mine.rule_violations or not mine.reaches(p.threshold):
        return o.moves
    return min(o.moves, mine.moves)


def summarise(rows: list[tuple[GenParams, Optimum | None, PlannerRun]]) -> int:
    print()
    known = [(p, o, r) for p, o, r in rows if o is not None and o.status != "unreachable"]
    bad = [r for _, _, r in rows if r.outcome.rule_violations or r.outcome.step_violations]
    missed = [p for p, _, r in known if not r.outcome.reaches(p.threshold)]
    groups: dict[str, list[tuple[GenParams, Optimum, PlannerRun]]] = {}
    for p, o, r in known:
        assert o is not None
        groups.setdefault(f"{p.hosts} hosts, broken {p.broken_groups:g}", []).append((p, o, r))
        groups.setdefault("all", []).append((p, o, r))
    print(
        f"{'cases':<24} {'n':>3} {'planner':>8} {'best':>6} {'ratio':>6} {'proven':>7} {'lower':>6}"
    )
    ratios: dict[str, float] = {}
    for name in [*(k for k in groups if k != "all"), "all"]:
        got = groups.get(name, [])
        pl = sum(r.outcome.moves for _, _, r in got)
        best = sum(_best(p, o, r) for p, o, r in got)
        lower = sum(o.min_moves for _, o, _ in got)
        proven = sum(1 for _, o, _ in got if o.status == "optimal")
        ratio = ratios[name] = pl / best if best else 1.0
        print(
            f"{name:<24} {len(got):>3} {pl:>8} {best:>6} {ratio:>6.3f} "
            f"{proven:>3}/{len(got):<3} {lower:>6}"
        )
    print(
        "best = the optimum's moves where proven, else the best final state known (MILP or "
        "planner); lower = moves proven necessary (solver's dual bound)"
    )
    ratio = ratios.get("all", 1.0)
    over = [
        case_key(p) for p, o, r in known if r.outcome.moves > CASE_RATIO * _best(p, o, r) + 1e-9
    ]
    ok = ratio <= 1.03 + 1e-9 and not over and not bad and not missed
    print(
        f"moves within 3% of the best known: ratio {ratio:.3f}; {len(over)} cases over "
        f"{CASE_RATIO:g}x their best known{': ' + ', '.join(over) if over else ''}; "
        f"{len(bad)} cases with bad steps or violations; {len(missed)} over the threshold "
        f"-> {'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
