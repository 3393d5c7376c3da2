"""Pure decisions of dead-host recovery; time is a parameter, nothing here does I/O.

- *Detection*: a host is a candidate once it has been unreachable in every observation of the
  active instance for ``grace`` (:func:`due`); a host that answers is never one, whatever it
  reports about its VMs.
- *Fencing*: a fence that does not confirm the host off is retried with backoff
  (:func:`fence_backoff`); nothing of that host is restarted meanwhile.
- *Restart*: the VMs that ran on the fenced host at its last sighting, highest priority first
  (:func:`restart_order`), each placed where ``place`` would put a new VM of its size, name
  and labels, given the VMs restarted before it (:func:`restart_plan`).
- *Definitions from git*: the VMs a recorded snapshot had running on the fenced host that this
  instance does not know, or saw before that snapshot (:func:`from_recorded`), and those the
  placement puts there that no source knows (:func:`unseen_placed`).
- *Return*: a host back after a fence may hold definitions of VMs now running elsewhere: those
  copies are stale (:func:`stale_copies`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from reconciler.core.definitions import recorded_definition
from reconciler.core.hugepages import need_in_xml, started
from reconciler.core.placer import place
from reconciler.core.selectors import matches
from reconciler.model.base import HostName, VmName, VmUuid
from reconciler.model.desired import DesiredState
from reconciler.model.recovery import RecordedSighting, RecoverySpec, SavedVm
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
class FromGit:
    taken: list[SavedVm]
    """VMs to restart from their recorded definition."""
    refused: dict[str, str]
    """VM name -> why its recorded definition is not used."""


def from_recorded(sighting: RecordedSighting, host: str, known: Mapping[str, SavedVm]) -> FromGit:
    """The VMs ``sighting`` has running on ``host`` that ``known`` (the state directory's, by
    UUID) lacks or saw before ``sighting`` was taken: size, labels and blockers from the
    recorded snapshot, the definition recorded beside it when it is fit to start. When it is
    not, an older saved sighting on the same host is kept (its definition is whole);
    otherwise the VM is refused, with why."""
    taken: list[SavedVm] = []
    refused: dict[str, str] = {}
    at = sighting.snapshot.taken_at
    for vm in sighting.snapshot.vms:
        if vm.host != host or vm.state is VmRunState.SHUTOFF:
            continue
        old = known.get(vm.uuid)
        if old is not None and old.seen_at >= at:
            continue  # this instance saw it since: its own sighting wins
        text = sighting.definitions.get(vm.name)
        if text is None:
            checked_xml, why = None, "the observed branch has no definition of it; start it by hand"
        else:
            checked = recorded_definition(text, name=vm.name, uuid=vm.uuid)
            checked_xml, why = checked.xml, checked.why
        if checked_xml is None:
            if old is None or old.host != host:
                refused[vm.name] = why
            continue
        taken.append(
            SavedVm(
                name=vm.name,
                uuid=vm.uuid,
                host=host,
                running=True,
                vcpus=vm.vcpus,
                memory=vm.memory_max,
                labels=dict(vm.labels),
                blockers=blockers(vm),
                xml=checked_xml,
                seen_at=at,
            )
        )
    return FromGit(taken, refused)


def unseen_placed(desired: DesiredState, host: str, known: Iterable[str]) -> list[str]:
    """The VMs the placement puts on ``host`` whose names are not in ``known``, by name."""
    names = set(known)
    return sorted(
        vm for vm, where in desired.placement.spec.vms.items() if where == host and vm not in names
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
