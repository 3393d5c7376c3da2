"""Moves costed in bytes: guest memory plus the local disks a move copies (allocation)."""

from __future__ import annotations

from reconciler.core.movable import copy_bytes, why_fixed
from reconciler.core.planner import plan
from reconciler.model.history import History
from reconciler.model.plan import Plan, UnsatisfiableCode
from reconciler.model.snapshot import (
    MigrationClass,
    Unmigratable,
    UnmigratableReason,
    VmDisk,
    VmRunState,
    VmState,
)
from tests.core.builders import GIB, NOW, desired, host, host_state, snapshot, vm

COPY = {"localDisks": "copy"}


def with_disk(base: VmState, allocation: int, *, capacity: int = 100 * GIB) -> VmState:
    """``base`` with one local pool volume of ``allocation`` bytes (class copy)."""
    disk = VmDisk(
        target="vda",
        source=f"local/{base.name}.qcow2",
        shared=False,
        pool="local",
        volume=f"{base.name}.qcow2",
        capacity=capacity,
        allocation=allocation,
        why="volume of the local dir pool local",
    )
    blocker = Unmigratable(code=UnmigratableReason.LOCAL_DISK, detail="disk vda is local")
    return base.model_copy(
        update={
            "migratable": False,
            "unmigratable": [blocker],
            "migration_class": MigrationClass.COPY,
            "disks": [disk],
            "disk_bytes": allocation,
        }
    )


def run(d: object, vms: list[VmState]) -> Plan:
    s = snapshot([host_state("a"), host_state("b")], vms)
    return plan(d, s, History(), now=NOW)  # type: ignore[arg-type]


def hot(disk_on: str, allocation: int = 20 * GIB) -> list[VmState]:
    """Host a is hot with two equal VMs; the one named ``disk_on`` has a local disk."""
    vms = [vm(n, "a", memory_gib=4, cpu_used=3) for n in ("a-vm", "b-vm")]
    vms += [vm("base", "a", memory_gib=4, cpu_used=2)]
    return [with_disk(v, allocation) if v.name == disk_on else v for v in vms]


def test_copy_bytes_are_memory_plus_disk_allocation_not_capacity() -> None:
    v = with_disk(vm("x", "a", memory_gib=4), 3 * GIB)
    assert copy_bytes(v, 4 * GIB) == 7 * GIB
    off = v.model_copy(update={"state": VmRunState.SHUTOFF})
    assert copy_bytes(off, 0) == 3 * GIB


def test_of_two_equal_moves_the_one_with_less_to_copy_wins() -> None:
    d = desired([host("a"), host("b")], threshold=10, migration=COPY)
    for disk_on, expected in (("a-vm", "b-vm"), ("b-vm", "a-vm")):
        p = run(d, hot(disk_on))
        assert [m.vm for m in p.moves] == [expected]
        assert p.moves[0].copy_bytes == 4 * GIB
        assert p.copy_bytes == 4 * GIB


def test_a_copy_move_carries_its_disks_and_bytes() -> None:
    d = desired([host("a", maintenance=True), host("b")], threshold=100, migration=COPY)
    p = run(d, [with_disk(vm("x", "a", memory_gib=2), 5 * GIB)])
    (m,) = p.moves
    assert (m.migration_class, m.disks, m.disk_bytes) == (MigrationClass.COPY, ["vda"], 5 * GIB)
    assert m.copy_bytes == 7 * GIB
    assert p.copy_bytes == 7 * GIB


def test_local_disks_block_by_default_and_the_plan_names_them() -> None:
    d = desired([host("a", maintenance=True), host("b")], threshold=100)
    p = run(d, [with_disk(vm("x", "a"), GIB)])
    assert not p.moves
    (u,) = p.unsatisfiable
    assert u.code is UnsatisfiableCode.UNMIGRATABLE
    assert "vda (local/x.qcow2)" in u.message
    assert "localDisks is block" in u.message


def test_shut_off_vm_moves_cold_only_its_disks_counted() -> None:
    off = with_disk(vm("x", "a", memory_gib=2), 3 * GIB).model_copy(
        update={"state": VmRunState.SHUTOFF, "migration_class": MigrationClass.COLD}
    )
    d = desired([host("a", maintenance=True), host("b")], threshold=100, migration=COPY)
    (m,) = run(d, [off]).moves
    assert m.migration_class is MigrationClass.COLD
    assert m.copy_bytes == 3 * GIB  # nothing of its memory: it is off
    blocked = desired([host("a", maintenance=True), host("b")], threshold=100)
    assert "shut off" in (why_fixed(off, blocked.policy.spec) or "")


def test_immovable_never_moves_whatever_the_policy() -> None:
    x = with_disk(vm("x", "a"), GIB).model_copy(
        update={"migration_class": MigrationClass.IMMOVABLE, "migration_reasons": ["hostdev"]}
    )
    d = desired([host("a", maintenance=True), host("b")], threshold=100, migration=COPY)
    p = run(d, [x])
    assert not p.moves
    assert "hostdev" in p.unsatisfiable[0].message
