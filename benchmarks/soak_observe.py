"""Soak of real observing rounds against libvirt test-driver hosts: threads, fds, memory.

    PYTHONPATH=. python benchmarks/soak_observe.py --rounds 5000

Each round observes 4 test-driver hosts of 6 VMs through the real observer, plans and writes
the status file, as ``run`` does in mode observe. Prints threads, open file descriptors and the
maximum RSS after a fifth of the rounds and at the end; the suite runs 300 rounds
(``tests/adapters/test_observer_soak.py``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tests.adapters.test_observer_soak import soak_rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        threads, fds, rss = soak_rounds(Path(tmp), args.rounds)
        seconds = time.perf_counter() - began
    print(f"{args.rounds} rounds in {seconds:.1f}s ({1000 * seconds / args.rounds:.1f} ms a round)")
    print(
        f"threads {threads[0]} -> {threads[1]}, fds {fds[0]} -> {fds[1]}, "
        f"max RSS {rss[0]} -> {rss[1]} KiB"
    )


if __name__ == "__main__":
    main()
