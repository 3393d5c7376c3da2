"""Progress of a move that copies disks says which phase it is in, from libvirt's job stats."""

from __future__ import annotations

from reconciler.adapters.libvirt.live_move import LiveMove
from reconciler.model.migration import MigrationProgress

GIB = 1024**3


def _read(stats: dict[str, int]) -> MigrationProgress:
    seen: list[MigrationProgress] = []
    LiveMove._report("vm", stats, 1.0, seen.append)
    (progress,) = seen
    return progress


def test_disks_first_then_memory() -> None:
    copying = _read(
        {"disk_total": 10 * GIB, "disk_processed": 4 * GIB, "disk_remaining": 6 * GIB}
        | {"data_total": 12 * GIB, "data_processed": 4 * GIB}
    )
    assert (copying.phase, copying.disk_total, copying.disk_processed) == (
        "disk",
        10 * GIB,
        4 * GIB,
    )
    memory = _read(
        {"disk_total": 10 * GIB, "disk_processed": 10 * GIB, "disk_remaining": 0}
        | {"data_total": 12 * GIB, "data_processed": 11 * GIB}
    )
    assert memory.phase == "memory"


def test_a_move_without_disks_is_all_memory() -> None:
    plain = _read({"data_total": GIB, "data_processed": GIB // 2})
    assert (plain.phase, plain.disk_total) == ("memory", 0)
