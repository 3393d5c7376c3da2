"""The executor's work per started move at 10, 100 and 1,000 hosts, on the in-memory cluster.

    PYTHONPATH=. .venv/bin/python benchmarks/execute_scale.py
    PYTHONPATH=. .venv/bin/python benchmarks/execute_scale.py --sizes 10 100 1000 --repeat 3

Each case (``tests/engine/scale.py``): 4 VMs per host, 0.75 x hosts pending moves (750 at
1,000 hosts), parallel.cluster 4, a disruption budget. Prints the calls the hosts answered per
started move (observations, records, both ends of each migration), the admission models built
from the whole cluster, the verdicts given per started move and the executor's own CPU time
per move (its thread, without the time inside the ports; median of ``--repeat``).
"""

from __future__ import annotations

import argparse
import statistics

from tests.engine.scale import run_scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--vms-per-host", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    print(
        f"{'hosts':>6} {'pending':>8} {'started':>8} {'host calls':>11} {'calls/move':>11} "
        f"{'observations':>13} {'builds':>7} {'verdicts/move':>14} {'executor ms/move':>17} "
        f"{'wall s':>7}"
    )
    for size in args.sizes:
        runs = [run_scale(size, args.vms_per_host) for _ in range(args.repeat)]
        f = runs[0]
        ms = statistics.median(r.executor_ms_per_move for r in runs)
        wall = statistics.median(r.wall_seconds for r in runs)
        print(
            f"{f.hosts:>6} {f.pending:>8} {f.started:>8} {f.host_calls:>11} "
            f"{f.calls_per_move:>11.1f} {f.observations:>13} {f.builds:>7} "
            f"{f.verdicts_per_move:>14.1f} {ms:>17.2f} {wall:>7.2f}"
        )


if __name__ == "__main__":
    main()
