"""VMs found where there should be one of them: the same UUID on two hosts.

Whatever the cause (a fence that lied, a host that came back, a person's ``virsh start`` of an
old copy, a bug), an observation is checked for two kinds (:func:`found`):

- **running twice**: a UUID whose guest is live on two hosts or more (running, paused by a
  person or an error, shutting down, suspended). Two guests writing one set of disks corrupt
  them. A live migration is not one: its incoming half is paused by libvirt until the guest
  switches over, its outgoing half from then on, so only one half is live at a time.
- **defined twice**: a UUID with a persistent definition on two hosts or more, outside a move
  in progress (an intent of the reconciler on one of its copies, or a half paused by a
  migration). Nothing runs twice yet; one ``virsh start`` (or an autostart) makes it so.

Each is a :class:`~reconciler.model.status.Duplicate`. Every move of such a VM stops
(:func:`held`); what to do with the copies is left to a person. :func:`without_removed`
drops what a step removed since the observation (a stale copy of a host that came back);
:func:`carried` keeps what an observation could not settle (a host with a copy that did not
answer).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from reconciler.model.base import fields_of
from reconciler.model.snapshot import (
    Snapshot,
    Unmigratable,
    UnmigratableReason,
    VmRunState,
    VmState,
)
from reconciler.model.status import Duplicate

NOT_LIVE: Final = frozenset({VmRunState.SHUTOFF, VmRunState.CRASHED, VmRunState.NOSTATE})
"""States in which no guest runs."""
MIGRATION_PAUSES: Final = frozenset({"migration", "starting up", "post-copy", "post-copy failed"})
"""libvirt's reasons for a pause that belongs to a migration: its incoming half is "starting
up" then "migration" until the guest switches over, its outgoing half "migration" after."""


def live(vm: VmState) -> bool:
    """Whether a guest runs in this copy, a half paused by a migration aside."""
    if vm.state in NOT_LIVE:
        return False
    return not (vm.state is VmRunState.PAUSED and vm.state_reason in MIGRATION_PAUSES)


def _moving(copies: list[VmState]) -> bool:
    """A move is in progress between these copies: an intent on one, or a migration's pause."""
    return any(
        v.reconciler.intent is not None
        or (v.state is VmRunState.PAUSED and v.state_reason in MIGRATION_PAUSES)
        for v in copies
    )


def found(snapshot: Snapshot) -> list[Duplicate]:
    """The VMs of ``snapshot`` running on two hosts, then those defined on two, by name."""
    uuids = [fields_of(vm)["uuid"] for vm in snapshot.vms]
    if len(set(uuids)) == len(uuids):
        return []  # each seen once, on one host: nearly every round, told in one pass
    by_uuid: dict[str, list[VmState]] = {}
    for uuid, vm in zip(uuids, snapshot.vms, strict=True):
        by_uuid.setdefault(uuid, []).append(vm)
    out: list[Duplicate] = []
    for uuid, copies in by_uuid.items():
        if len(copies) < 2:
            continue  # seen once, on one host: nearly every VM, not looked at further
        hosts = {v.host for v in copies}
        if len(hosts) < 2:
            continue
        names = "/".join(sorted({v.name for v in copies}))
        running: list[str] = sorted({v.host for v in copies if live(v)})
        if len(running) > 1:
            out.append(Duplicate(vm=names, uuid=uuid, hosts=running, running=True))
            continue
        defined: list[str] = sorted({v.host for v in copies if v.persistent})
        if len(defined) > 1 and not _moving(copies):
            out.append(Duplicate(vm=names, uuid=uuid, hosts=defined, running=False))
    return sorted(out, key=lambda d: (not d.running, d.vm, d.uuid))


def held(snapshot: Snapshot, duplicates: Iterable[Duplicate]) -> Snapshot:
    """``snapshot`` with every copy of a duplicate VM not migratable, saying why: nothing
    plans, admits or starts a move of it while it is on two hosts."""
    why = {d.uuid: d for d in duplicates}
    if not why:
        return snapshot
    vms: list[VmState] = []
    for seen in snapshot.vms:
        vm, d = seen, why.get(seen.uuid)
        if d is not None:
            how = "runs on" if d.running else "is defined on"
            blocker = Unmigratable(
                code=UnmigratableReason.DUPLICATE,
                detail=f"a duplicate: it {how} {' and '.join(d.hosts)}",
            )
            # not in flight either: it is not migrating, whatever the observer guessed
            kept = [u for u in vm.unmigratable if u.code is not UnmigratableReason.IN_FLIGHT]
            vm = vm.model_copy(update={"migratable": False, "unmigratable": [*kept, blocker]})
        vms.append(vm)
    flights = [f for f in snapshot.in_flight if f.uuid not in why]
    return snapshot.model_copy(update={"vms": vms, "in_flight": flights})


def without_removed(
    duplicates: Iterable[Duplicate], removed: Iterable[tuple[str, str]]
) -> list[Duplicate]:
    """``duplicates`` without the copies ``removed`` since (UUID, host): a VM left on one
    host is no longer one."""
    gone = set(removed)
    out: list[Duplicate] = []
    for d in duplicates:
        hosts = [h for h in d.hosts if (d.uuid, h) not in gone]
        if len(hosts) > 1:
            out.append(d.model_copy(update={"hosts": hosts}))
    return out


def carried(previous: Iterable[Duplicate], snapshot: Snapshot) -> list[Duplicate]:
    """The duplicates of ``previous`` this observation cannot have settled: one of their
    hosts did not answer it, so a copy there may still be (said until it answers)."""
    down = {h.name for h in snapshot.hosts if not h.reachable}
    return [d for d in previous if down.intersection(d.hosts)]


def summary(duplicates: Iterable[Duplicate]) -> str:
    """One line naming each duplicate."""
    return "; ".join(d.describe() for d in duplicates)
