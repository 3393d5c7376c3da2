"""Live migrations per minute on the lab, and the migrator's own overhead per move.

Starts a private lab (2 hosts, ``--vms`` tiny VMs on the first), then for each concurrency
(1, 2, 4) migrates every VM to the other host, ``--rounds`` times back and forth, with that many
threads calling ``LibvirtMigrator.migrate`` at once. Per move it takes the migrator's wall time
and libvirt's share (how long ``migrateToURI3`` took, from the migrator's log record of the
move); the difference is the adapter's overhead: opening two connections, looking the VM up,
watching the job, looking at both hosts afterwards.

    .venv/bin/python benchmarks/migrate_bench.py              # needs root, like `lab up`
    .venv/bin/python benchmarks/migrate_bench.py --vms 8 --rounds 2 --parallel 1 2 4
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from reconciler.adapters import lab as libvirt_lab
from reconciler.adapters.libvirt.migrator import LibvirtMigrator
from reconciler.config import load_desired
from reconciler.model.base import HostName, VmName
from reconciler.model.migration import MigrationProgress
from reconciler.model.plan import Move, Reason


class _CallTimes(logging.Handler):
    """Collects the migrator's per-move log records: libvirt's share of each move, by VM."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seconds: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        result = getattr(record, "migration", None)
        call = getattr(record, "libvirt_seconds", None)
        if result is not None and call is not None:
            self.seconds[result.vm] = call


def run(vms: int, rounds: int, parallel: list[int]) -> int:
    directory = Path(tempfile.mkdtemp(prefix="migbench-")) / "lab"
    lab = libvirt_lab.start_lab(directory, hosts=2, vms=vms)
    try:
        desired = load_desired(lab.cluster_dir)
        calls = _CallTimes()
        logger = logging.getLogger("reconciler.adapters.libvirt.live_move")
        logger.addHandler(calls)
        logger.setLevel(logging.INFO)
        names = [h.name for h in lab.hosts]
        where = {vm.name: vm.host for vm in lab.vms}
        memory = {vm.name: vm.memory_mib * 1024**2 for vm in lab.vms}
        migrator = LibvirtMigrator(desired)
        print(f"lab: 2 hosts, {vms} VMs ({lab.virt_type}), started in {lab.seconds:.1f}s")
        print(
            "parallel  moves  failed  wall s  moves/min  move s (median)  libvirt s (median)  "
            "overhead ms (median / max)  overhead %"
        )
        for width in parallel:
            walls: list[float] = []
            jobs: list[float] = []
            failures: list[str] = []

            def one(
                vm: str,
                walls: list[float] = walls,
                jobs: list[float] = jobs,
                failures: list[str] = failures,
            ) -> None:
                source = where[vm]
                target = names[1] if source == names[0] else names[0]
                move = Move(
                    vm=VmName(vm),
                    source=HostName(source),
                    target=HostName(target),
                    memory=memory[vm],
                    vcpus=1,
                    reason=Reason.BALANCE,
                    detail="benchmark",
                    wave=0,
                )

                def ignore(_: MigrationProgress) -> None:
                    return None

                result = migrator.migrate(move, on_progress=ignore, abort=threading.Event())
                job = calls.seconds.pop(vm, None)
                if not result.succeeded:  # list.append is atomic: no lock needed
                    failures.append(f"{vm} {source} -> {target}: {result.error}")
                    return
                where[vm] = target
                walls.append(result.seconds)
                if job is not None:
                    jobs.append(job)

            began = time.monotonic()
            with ThreadPoolExecutor(max_workers=width) as pool:
                for _ in range(rounds):
                    list(pool.map(one, list(where)))
            wall = time.monotonic() - began
            for failure in failures:
                print(f"  failed: {failure}")
            moves = len(walls)
            overheads = [w - j for w, j in zip(walls, jobs, strict=False)]
            median_over = statistics.median(overheads) if overheads else float("nan")
            median_job = statistics.median(jobs) if jobs else float("nan")
            print(
                f"{width:8d}  {moves:5d}  {len(failures):6d}  {wall:6.1f}  "
                f"{60 * moves / wall:9.1f}  "
                f"{statistics.median(walls):15.3f}  {median_job:14.3f}  "
                f"{1000 * median_over:13.0f} / {1000 * max(overheads, default=0):5.0f}  "
                f"{100 * median_over / median_job:10.1f}"
            )
        return 0
    finally:
        libvirt_lab.stop_lab(directory)
        directory.parent.rmdir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args(argv)
    return run(args.vms, args.rounds, args.parallel)


if __name__ == "__main__":
    sys.exit(main())
