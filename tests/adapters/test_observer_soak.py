"""A soak against libvirt test-driver hosts: hundreds of real rounds (real libvirt connections,
the observer's threads, the status store on disk) leave threads, file descriptors and memory
flat. The long version is ``benchmarks/soak_observe.py``."""

from __future__ import annotations

import gc
import resource
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.adapters.files.status import FileStatusStore
from tests.gitrepos import open_fds

pytestmark = pytest.mark.libvirt
pytest.importorskip("libvirt")


def soak_rounds(tmp_path: Path, rounds: int) -> tuple[list[int], list[int], list[int]]:
    """(threads, fds, max RSS KiB) after warm-up and at the end of ``rounds`` rounds."""
    from reconciler.adapters.lab import write_node_files
    from reconciler.adapters.libvirt.cluster_observer import LibvirtClusterObserver
    from reconciler.engine.round import RoundOptions, RoundPorts, run_round
    from reconciler.model.desired import DesiredState
    from tests.fakes import FakeCluster

    cluster = write_node_files(tmp_path / "nodes", 4, 6, name="soak")
    desired = DesiredState(cluster=cluster)

    class Clock:
        def now(self) -> datetime:
            return datetime.now(UTC)

    unused = FakeCluster("soak", [], [])  # no migration happens: the rounds only observe
    ports = RoundPorts(
        observer=LibvirtClusterObserver(cluster, sample_interval=0),
        migrator=unused,
        recorder=unused,
        status=FileStatusStore("soak", tmp_path / "state"),
        clock=Clock(),
    )
    marks: tuple[list[int], list[int], list[int]] = ([], [], [])
    for i in range(rounds):
        report = run_round(desired, ports, RoundOptions(act=False))
        assert report.snapshot is not None
        assert all(h.reachable for h in report.snapshot.hosts)
        if i in (rounds // 5, rounds - 1):
            gc.collect()
            marks[0].append(threading.active_count())
            marks[1].append(open_fds())
            marks[2].append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return marks


def test_observing_rounds_leave_threads_fds_and_memory_flat(tmp_path: Path) -> None:
    threads, fds, rss = soak_rounds(tmp_path, 300)
    assert threads[1] <= threads[0], threads
    assert fds[1] <= fds[0], fds
    assert rss[1] - rss[0] < 8 * 1024, f"max RSS grew by {rss[1] - rss[0]} KiB"
