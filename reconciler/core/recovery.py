"""Pure decisions of dead-host recovery; time is a parameter, nothing here does I/O.

- *Detection*: a host is a candidate once it has been unreachable in every observation of the
  active instance for ``grace`` (:func:`due`); a host that answers is never one, whatever it
  reports about its VMs.
- *Fencing*: a fence that does not confirm the host off is retried with backoff
  (:func:`fence_backoff`); nothing of that host is restarted meanwhile.
- *Restart*: the VMs that ran on the fenced host at its last sighting, highest priority first
  (:func:`restart_order`), each placed where ``place`` would put a new VM of its size, name
  and labels, given the VMs restarted before it (:func:`restart_plan`).
- *Return*: a host back after a fence may hold definitions of VMs now running elsewhere: those
  copies are stale (:func:`stale_copies`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from reconciler.core.hugepages import need_in_xml, started
from reconciler.core.placer import place
from reconciler.core.selectors import matches
from reconciler.model.base import HostName, VmName, VmUuid
from reconciler.model.desired import DesiredState
from reconciler.model.recovery import RecoverySpec, SavedVm
from reconciler.model.snapshot import Snapshot, UnmigratableReason, VmRunState, VmState

BACKOFF_FIRST = timedelta(seconds=15)
BACKOFF_MAX = timedelta(minutes=10)

RESTART_BLOCKERS = {
    UnmigratableReason.LOCAL_DISK: "its disks are not on shared storage",
    UnmigratableReason.HOST_DEVICE: "it uses a host device",
    UnmigratableReason.MEDIATED_DEVICE: "it uses a mediated device",
    UnmigratableReason.VTPM: "its vTPM state is local to the host",
}
"""What keeps a VM from being started on another host (a live migration's other blockers,
such as a host-passthrough CPU, do not)."""


def due(unreachable_since: datetime, now: datetime, grace: timedelta) -> bool:
    """Unreachable for ``grace`` already."""
    return now - unreachable_since >= grace


def fence_backoff(attempts: int) -> timedelta:
    """The wait after the ``attempts``-th fence that did not confirm: 15 s, 30 s, ... 10 min."""
    if attempts <= 0:
        return timedelta(0)
    wait: timedelta = BACKOFF_FIRST * (2 ** min(attempts - 1, 16))
    return min(wait, BACKOFF_MAX)


def blockers(vm: VmState) -> list[str]:
    """Why ``vm`` could not be started on another host; empty when it could."""
    out = []
    for u in vm.unmigratable:
        why = RESTART_BLOCKERS.get(u.code)
        if why is not None:
            out.append(f"{why} ({u.detail})" if u.detail else why)
    return out


def priority(spec: RecoverySpec, name: str, labels: dict[str, str]) -> int:
    """The highest priority of the entries that select the VM, 0 when none does."""
    found = [p.priority for p in spec.priorities if matches(p.vms, name, labels)]
    return max(found) if found else 0


def restart_order(spec: RecoverySpec, vms: Iterable[SavedVm]) -> list[SavedVm]:
    """Highest priority first, then by name."""
    return sorted(vms, key=lambda v: (-priority(spec, v.name, v.labels), v.name))


@dataclass(frozen=True)
class Restart:
    vm: SavedVm
    target: str | None
    why: str
    """Where and why (the placer's message), or why not."""


def restart_plan(
    desired: DesiredState, snapshot: Snapshot, vms: Iterable[SavedVm], *, now: datetime
) -> list[Restart]:
    """Targets for ``vms`` in priority order, each as ``place`` would choose for a new VM,
    with the VMs placed before it counted on their targets. The room ``reserveHosts`` kept is
    for this: a restart may use it (``place`` for a new VM would refuse to)."""
    spec = desired.policy.spec.recovery
    desired = _without_reserve(desired)
    current = snapshot
    out: list[Restart] = []
    for vm in restart_order(spec, vms):
        if vm.blockers:
            out.append(Restart(vm, None, "cannot start elsewhere: " + "; ".join(vm.blockers)))
            continue
        answer = place(
            desired,
            current,
            vcpus=vm.vcpus,
            memory=vm.memory,
            labels=vm.labels,
            name=vm.name,
            now=now,
            hugepages=need_in_xml(vm.xml),
        )
        if answer.host is None:
            reasons = "; ".join(
                f"{c.host}: {', '.join(c.reasons)}" for c in answer.candidates if not c.fits
            )
            out.append(Restart(vm, None, f"no host can take it ({reasons})"))
            continue
        out.append(Restart(vm, answer.host, answer.message))
        current = started(current, _running(vm, answer.host))
    return out


def _without_reserve(desired: DesiredState) -> DesiredState:
    policy = desired.policy
    recovery = policy.spec.recovery.model_copy(update={"reserve_hosts": 0})
    spec = policy.spec.model_copy(update={"recovery": recovery})
    return desired.model_copy(update={"policy": policy.model_copy(update={"spec": spec})})


def _running(vm: SavedVm, host: str) -> VmState:
    kib, pages = need_in_xml(vm.xml) or (None, 0)
    return VmState(
        name=VmName(vm.name),
        uuid=VmUuid(vm.uuid),
        host=HostName(host),
        state=VmRunState.RUNNING,
        vcpus=vm.vcpus,
        memory_max=vm.memory,
        memory_current=vm.memory,
        labels=vm.labels,
        hugepage_kib=kib,
        hugepages=pages,
    )


@dataclass(frozen=True)
class Stale:
    host: str
    vm: str
    uuid: str
    runs_on: str


def stale_copies(snapshot: Snapshot, returned: Iterable[str]) -> list[Stale]:
    """Definitions on ``returned`` hosts, not running, of VMs that run on another host."""
    back = set(returned)
    running: dict[str, str] = {}
    for vm in snapshot.vms:
        if vm.host not in back and vm.state is not VmRunState.SHUTOFF:
            running.setdefault(vm.uuid, vm.host)
    return [
        Stale(vm.host, vm.name, vm.uuid, running[vm.uuid])
        for vm in snapshot.vms
        if vm.host in back and vm.uuid in running and vm.state is VmRunState.SHUTOFF
    ]


def split_brain(snapshot: Snapshot) -> list[str]:
    """VMs running (or paused) on two hosts at once outside a migration."""
    moving = {f.uuid for f in snapshot.in_flight}
    seen: dict[str, list[str]] = {}
    for vm in snapshot.vms:
        if vm.state in (VmRunState.RUNNING, VmRunState.PAUSED) and vm.uuid not in moving:
            seen.setdefault(vm.uuid, []).append(f"{vm.name}@{vm.host}")
    return [", ".join(v) for v in seen.values() if len(v) > 1]
