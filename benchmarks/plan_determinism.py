"""Plans are a function of their inputs: the same cases planned quietly, beside CPU-bound
processes, under ``nice -n 19``, and on a simulated machine ten times slower give the same plans.

Cases: the default cases of ``plan_quality.py`` (40 small clusters) and of ``plan_midsize.py``
(24 and 40 hosts x 10 VMs, 24 cases). Every ``scipy.optimize.milp`` call the planner makes is
recorded: its variables, branch-and-bound nodes, CPU seconds (``time.process_time``), wall
seconds and whether the node limit or the clock stopped it, so the limits can be chosen from
what the models need (``--stats``).

Runs, each giving every case's plan id and moves:

* ``quiet``: this process, nothing else started;
* ``spinners``: the same with ``--spinners`` busy processes competing for the CPUs;
* ``nice``: a child process under ``nice -n 19`` beside the spinners;
* ``slow``: a machine ``--slow`` times slower (10 by default), simulated: a solve whose CPU
  seconds here times that exceed its time limit counts as stopped by the clock (HiGHS's own
  clock is wall time, which the load here would stretch too).

Any plan id that differs from the quiet run's is printed with both move counts; the exit status
is 1 then.

Run: ``nice .venv/bin/python benchmarks/plan_determinism.py`` (``--only quiet --stats`` for the
solver figures alone).
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import plan_midsize
import plan_quality
from plan_generate import GenParams, generate

RUNS = ("quiet", "spinners", "nice", "slow")


@dataclass(frozen=True)
class Solve:
    case: str
    columns: int
    limit: int  # node limit given
    nodes: int
    cpu: float
    wall: float
    stopped: str  # "" | "nodes" | "clock"


SOLVES: list[Solve] = []
_CASE = [""]


def _recording_milp(
    milp: Callable[..., Any], slow: float, clock: float | None
) -> Callable[..., Any]:
    def wrapped(c: Any, **kw: Any) -> Any:
        opts = dict(kw.get("options") or {})
        if clock is not None:
            opts["time_limit"] = clock
        kw["options"] = opts
        limit = int(opts.get("node_limit") or 0)  # milp takes it out of the dict
        seconds = float(opts.get("time_limit") or float("inf"))
        c0, w0 = time.process_time(), time.perf_counter()
        res = milp(c, **kw)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        if slow > 1 and cpu * slow > seconds:
            # a machine `slow` times slower would have run into the clock
            res.status, res.message = 1, "Time limit reached. (a slower machine, simulated)"
        msg = str(getattr(res, "message", "")).lower()
        stopped = "clock" if "time limit" in msg else "nodes" if res.status not in (0, 2) else ""
        nodes = int(getattr(res, "mip_node_count", 0) or 0)
        SOLVES.append(Solve(_CASE[0], len(c), limit, nodes, cpu, wall, stopped))
        return res

    return wrapped


@contextmanager
def recording(slow: float = 1.0, clock: float | None = None) -> Iterator[None]:
    scipy_optimize: Any = importlib.import_module("scipy.optimize")
    original = scipy_optimize.milp
    scipy_optimize.milp = _recording_milp(original, slow, clock)
    try:
        yield
    finally:
        scipy_optimize.milp = original


def all_cases() -> list[tuple[str, GenParams]]:
    small = [(f"q-{_key(p)}", p) for p in plan_quality.case_params(20, 20.0)]
    mid = plan_midsize.case_params([24, 40], 3, 10.0, [0.0, 0.5])
    return small + [(plan_midsize.case_key(p), p) for p in mid]


def _key(p: GenParams) -> str:
    return f"h{p.hosts}-v{p.vms_per_host:g}-s{p.seed}-{p.basis.value}"


def plan_all(slow: float = 1.0, clock: float | None = None) -> dict[str, tuple[str, int, float]]:
    """Case -> (plan id, moves, wall seconds)."""
    plan_fn = plan_quality.load_planner()
    assert plan_fn is not None
    out = {}
    with recording(slow, clock):
        for key, p in all_cases():
            case = generate(p)
            _CASE[0] = key
            t0 = time.perf_counter()
            plan = plan_fn(case.desired, case.snapshot, case.history, now=case.now)
            seconds = time.perf_counter() - t0
            out[key] = (plan.plan_id, len(plan.moves) + len(plan.deferred), seconds)
    return out


def _spin() -> None:
    while True:
        pass


@contextmanager
def spinners(n: int) -> Iterator[None]:
    procs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
            p.join()


def print_stats() -> None:
    by_kind: dict[str, list[Solve]] = {}
    for s in SOLVES:
        kind = "small" if s.case.startswith("q-") else s.case.split("-")[0]
        by_kind.setdefault(kind, []).append(s)
    print(
        f"{'cases':<8} {'solves':>6} {'nodes max':>9} {'nodes p50':>9} {'cpu max s':>9} "
        f"{'cpu sum s':>9} {'by nodes':>8} {'by clock':>8}"
    )
    for kind, solves in by_kind.items():
        nodes = [s.nodes for s in solves]
        cpu = [s.cpu for s in solves]
        print(
            f"{kind:<8} {len(solves):>6} {max(nodes):>9} {statistics.median(nodes):>9.0f} "
            f"{max(cpu):>9.3f} {sum(cpu):>9.2f} "
            f"{sum(1 for s in solves if s.stopped == 'nodes'):>8} "
            f"{sum(1 for s in solves if s.stopped == 'clock'):>8}"
        )
    worst = sorted(SOLVES, key=lambda s: -s.cpu)[:8]
    exact: Any = importlib.import_module("reconciler.core.exact")
    print(
        f"slowest solve {worst[0].cpu:.2f} s of CPU: the {exact.TIME_LIMIT:g} s clock is "
        f"{exact.TIME_LIMIT / worst[0].cpu:.0f}x that"
    )
    print("slowest solves (case, variables, node limit, nodes, cpu s, wall s, stopped by):")
    for s in worst:
        print(
            f"  {s.case:<28} {s.columns:>5} {s.limit:>5} {s.nodes:>6} {s.cpu:>7.3f} {s.wall:>7.3f}"
            f" {s.stopped}"
        )


def compare(name: str, base: dict[str, tuple[str, int, float]], other: dict[str, Any]) -> int:
    differ = [k for k in base if other[k][0] != base[k][0]]
    moves = sum(v[1] for v in other.values())
    secs = sum(v[2] for v in other.values())
    print(
        f"{name:<9} {len(base) - len(differ):>3}/{len(base)} plan ids as quiet, "
        f"{moves} moves, {secs:.1f} s wall"
    )
    for k in differ:
        print(f"    {k}: {base[k][1]} moves quiet, {other[k][1]} here")
    return len(differ)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(RUNS), help=f"runs, of {','.join(RUNS)}")
    ap.add_argument("--spinners", type=int, default=4, help="busy processes (default 4)")
    ap.add_argument("--slow", type=float, default=10.0, help="slower machine (default 10x)")
    ap.add_argument("--stats", action="store_true", help="solver figures of the quiet run")
    ap.add_argument("--clock", type=float, help="every solve's time limit (to measure the models)")
    ap.add_argument("--emit", action="store_true", help=argparse.SUPPRESS)  # child of `nice`
    args = ap.parse_args()
    if args.emit:
        json.dump(plan_all(), sys.stdout)
        return 0
    runs = args.only.split(",")
    base = plan_all(clock=args.clock)
    moves = sum(v[1] for v in base.values())
    print(f"quiet     {len(base)} cases, {moves} moves, {sum(v[2] for v in base.values()):.1f} s")
    kinds: dict[str, int] = {}
    for key, (_, n, _) in base.items():
        kind = "small" if key.startswith("q-") else key.split("-")[0]
        kinds[kind] = kinds.get(kind, 0) + n
    print("moves: " + ", ".join(f"{k} {n}" for k, n in kinds.items()))
    if args.stats:
        print_stats()
    differ = 0
    if "spinners" in runs:
        with spinners(args.spinners):
            differ += compare("spinners", base, plan_all())
    if "nice" in runs:
        with spinners(args.spinners):
            child = subprocess.run(
                ["nice", "-n", "19", sys.executable, __file__, "--emit"],
                check=True,
                capture_output=True,
                text=True,
            )
        differ += compare("nice", base, json.loads(child.stdout))
    if "slow" in runs:
        differ += compare(f"slow x{args.slow:g}", base, plan_all(args.slow))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
