"""Speed and memory of ``reconciler.core.planner.plan`` from 10 to 1,000 hosts (25 VMs each).

Every size runs in a fresh Python process so its peak resident memory is its own. In that
process the generated input (plan_generate.py, basis ``used``, holdRounds satisfied, batch
1000) is built first, outside the timed region; then ``plan()`` runs ``--repeat`` times
(median and best wall time reported), then once more under ``tracemalloc`` for the peak of
the memory it allocates. ``rss`` is the process's ``ru_maxrss`` after the timed runs (input
included, tracemalloc not yet started); ``input`` is the same figure before the first run.

Targets: 1,000 hosts x 25,000 VMs in under 2 s, 5,000 x 125,000 under 3 s (``--sizes 5000``),
both under 1 GiB (tracemalloc peak of plan()). ``cpu`` is the median CPU seconds of the same
runs: on a shared machine the wall time waits for the other processes too.

Run: ``.venv/bin/python benchmarks/plan_scale.py`` (``--sizes 10,100``, ``--profile 1000`` for
the functions plan() spends its time in).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib
import json
import pstats
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from plan_generate import Case, GenParams, generate
from plan_model import revision

from reconciler.model.plan import Plan

SIZES = (10, 30, 100, 300, 1000)
TARGET_SECONDS = {1000: 2.0, 5000: 3.0}
"""Hosts -> the most seconds (median wall of plan()) a plan of that size may take."""
TARGET_MIB = 1024.0
MIB = 1024**2


def _planner() -> Callable[..., Plan]:
    module: Any = importlib.import_module("reconciler.core.planner")
    return cast(Callable[..., Plan], module.plan)


def _case(hosts: int, vms_per_host: float, seed: int) -> Case:
    return generate(GenParams(hosts, vms_per_host, seed))


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def measure_one(hosts: int, vms_per_host: float, seed: int, repeat: int) -> dict[str, Any]:
    """Measure in this process; meant to run in a fresh one."""
    plan = _planner()
    case = _case(hosts, vms_per_host, seed)
    args = (case.desired, case.snapshot, case.history)
    gc.collect()
    rss_input = _rss_mib()
    times = []
    cpus = []
    result: Plan | None = None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        result = plan(*args, now=case.now)
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        gc.collect()
    rss = _rss_mib()
    del result
    gc.collect()
    tracemalloc.start()
    result = plan(*args, now=case.now)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert result is not None
    return {
        "hosts": hosts,
        "vms": len(case.snapshot.vms),
        "median": statistics.median(times),
        "cpu": statistics.median(cpus),
        "best": min(times),
        "peak_mib": peak / MIB,
        "rss_mib": rss,
        "input_mib": rss_input,
        "moves": len(result.moves),
        "deferred": len(result.deferred),
        "spread_before": max((s.before for s in result.spreads), default=0.0),
        "spread_after": max((s.after for s in result.spreads), default=0.0),
    }


def profile(hosts: int, vms_per_host: float, seed: int, top: int) -> None:
    plan = _planner()
    case = _case(hosts, vms_per_host, seed)
    prof = cProfile.Profile()
    prof.enable()
    plan(case.desired, case.snapshot, case.history, now=case.now)
    prof.disable()
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="host counts, comma-sep")
    ap.add_argument("--vms-per-host", type=float, default=25.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per size")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--profile", type=int, metavar="HOSTS", help="cProfile plan() at this size")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(measure_one(args.one, args.vms_per_host, args.seed, args.repeat)))
        return 0
    if args.profile is not None:
        profile(args.profile, args.vms_per_host, args.seed, args.top)
        return 0

    print(revision())
    head = (
        f"{'hosts':>6} {'VMs':>7} {'median s':>9} {'best s':>8} {'CPU s':>6} {'peak MiB':>9} "
        f"{'rss MiB':>8} {'input MiB':>9} {'moves':>6} {'deferred':>8} {'spread':>13}"
    )
    print(head)
    print("-" * len(head))
    rows: list[dict[str, Any]] = []
    failed = False
    for size in (int(s) for s in args.sizes.split(",")):
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--one",
            str(size),
            "--vms-per-host",
            str(args.vms_per_host),
            "--seed",
            str(args.seed),
            "--repeat",
            str(args.repeat),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            print(f"{size:>6} failed: {proc.stderr.strip().splitlines()[-1:]}")
            failed = True
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(r)
        print(
            f"{r['hosts']:>6} {r['vms']:>7} {r['median']:>9.3f} {r['best']:>8.3f} {r['cpu']:>6.2f} "
            f"{r['peak_mib']:>9.1f} {r['rss_mib']:>8.1f} {r['input_mib']:>9.1f} "
            f"{r['moves']:>6} {r['deferred']:>8} "
            f"{r['spread_before']:>5.1f} -> {r['spread_after']:>4.1f}"
        )
    print(
        "median/best s: wall time of plan() alone; peak MiB: tracemalloc peak during plan(); "
        "rss MiB: process ru_maxrss (input included); input MiB: ru_maxrss before plan()"
    )
    judged = [r for r in rows if r["hosts"] in TARGET_SECONDS]
    if not judged:
        print(f"target not judged: no run of {', '.join(map(str, TARGET_SECONDS))} hosts")
        return 1 if failed else 0
    ok = not failed
    for r in judged:
        limit = TARGET_SECONDS[r["hosts"]]
        t_ok = r["median"] < limit
        m_ok = r["peak_mib"] < TARGET_MIB
        print(
            f"T-speed {r['hosts']} hosts x {r['vms']} VMs under {limit:.0f} s: "
            f"{r['median']:.3f} s (CPU {r['cpu']:.3f} s) -> {'PASS' if t_ok else 'FAIL'}"
        )
        print(
            f"T-memory under {TARGET_MIB:.0f} MiB: tracemalloc peak {r['peak_mib']:.1f} MiB "
            f"(process rss {r['rss_mib']:.1f} MiB) -> {'PASS' if m_ok else 'FAIL'}"
        )
        ok = ok and t_ok and m_ok
    print(f"RESULT: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
