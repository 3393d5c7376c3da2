"""Long soak of ``reconciler run``'s loop around the real round, on the in-memory cluster.

    PYTHONPATH=. python benchmarks/soak_run.py --rounds 20000

Prints rounds, migrations, memory growth after warm-up (tracemalloc), threads and file
descriptors before and after. The suite runs the same soak for 400 rounds
(tests/engine/test_soak.py).
"""

from __future__ import annotations

import argparse
import time

from tests.engine.soak import soak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20000)
    args = parser.parse_args()
    began = time.perf_counter()
    f = soak(args.rounds)
    seconds = time.perf_counter() - began
    print(
        f"rounds                {f.rounds} in {seconds:.1f} s "
        f"({1000 * seconds / f.rounds:.2f} ms each)"
    )
    print(
        f"migrations            {f.migrations} "
        f"(toward the flapping host while down: {f.flap_migrations})"
    )
    print(f"memory growth         {f.memory_growth_kib:.0f} KiB after warm-up")
    print(f"threads               {f.threads[0]} -> {f.threads[1]}")
    print(f"file descriptors      {f.fds[0]} -> {f.fds[1]}")


if __name__ == "__main__":
    main()
