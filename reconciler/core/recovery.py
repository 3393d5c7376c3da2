"""Pure decisions of dead-host recovery; time is a parameter, nothing here does I/O.

- *Detection*: a host is a candidate once it has been unreachable in every observation of the
  active instance for ``grace`` (:func:`due`); a host that answers is never one, whatever it
  reports about its VMs.
- *Fencing*: a fence is believed only once confirmed: its command exited 0, its status action
  (when it has one) says off, and libvirt on the host does not answer (:func:`unconfirmed`).
  A fence that does not confirm the host off is retried with backoff (:func:`fence_backoff`);
  nothing of that host is restarted meanwhile.
- *Restart*: the VMs that ran on the fenced host at its last sighting, highest priority first
  (:func:`restart_order`), each placed where ``place`` would put a new VM of its size, name
  and labels, given the VMs restarted before it (:func:`restart_plan`); what one recovery
  step of a fenced host starts, what it finds done already and what it reports as not
  restarted (:func:`restart_steps`).
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
from reconciler.model.recovery import (
    HostRecovery,
    PowerState,
    PowerStatus,
    RecordedSighting,
    RecoverySpec,
    RecoveryState,
    RestartIntent,
    SavedVm,
)
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


def unconfirmed(host: str, power: PowerStatus | None, answer: str | None) -> str | None:
    """Why a fence of ``host`` that exited 0 does not confirm it off, None when it does:
    ``power`` is what its status action said (None: it has none), ``answer`` what libvirt on
    the host answered afterwards (None: nothing)."""
    if power is not None and power.state is not PowerState.OFF:
        said = f" ({power.detail})" if power.detail else ""
        return f"the fence exited 0 but its status action says {power.state.value}{said}"
    if answer is not None:
        return f"the fence exited 0 but libvirt on {host} still answers ({answer})"
    return None


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
class RestartStep:
    """One thing a recovery step does for a VM of the fenced host, in order."""

    vm: str
    target: str | None
    """Where to start it; None: it is not restarted, and this is said (once)."""
    why: str
    """The placer's message, or why it is not restarted."""
    saved: SavedVm | None = None
    """What is started (its definition), None for a VM not restarted."""


@dataclass(frozen=True)
class RestartSteps:
    """What one recovery step of a fenced host does, decided before anything is done."""

    steps: list[RestartStep]
    """VMs to start and VMs newly not restarted, in the order they are done and reported."""
    restarted: dict[str, str]
    """VM -> the host it runs on again: the host's record, and what the observation shows
    (an earlier start that took effect, a VM running elsewhere already)."""
    took_effect: dict[str, str]
    """The earlier starts this observation shows done: VM -> its host (their intents go)."""
    intents: dict[str, RestartIntent]
    """The restart intents still open, by UUID."""
    not_restarted: dict[str, str]
    """VM -> why it is not restarted: the record's, with this step's refusals."""


def restart_steps(
    desired: DesiredState,
    snapshot: Snapshot,
    state: RecoveryState,
    host: str,
    record: HostRecovery,
    unknown: Mapping[str, str],
    *,
    now: datetime,
) -> RestartSteps:
    """What a recovery step of fenced ``host`` does, from where libvirt shows every VM now.

    An intent whose VM runs is resolved (the start took effect); one whose target answers
    without it, or was fenced, did not take effect; one whose target stopped answering and was
    never fenced holds its VM: it may run there, so it waits until that host is fenced. A VM
    saved as running on ``host`` that runs anywhere now is not started again, nor one this
    recovery restarted on a host that stopped answering since (it is that host's VM now).
    ``unknown`` (VM name -> why no source can start it) and the VMs ``restart_plan`` finds no
    host for are not restarted, said once (a reason already on the record is not said
    again); the others are started where a
    definition of theirs already is (a start that failed after defining it), else where
    ``restart_plan`` puts them.
    """
    defined: dict[str, tuple[str, bool]] = {}
    for seen in snapshot.vms:
        running = seen.state is not VmRunState.SHUTOFF
        if seen.uuid not in defined or running:
            defined[seen.uuid] = (seen.host, running)
    silent = _silent(snapshot, state)
    restarted = dict(record.restarted)
    took_effect: dict[str, str] = {}
    intents = dict(state.intents)
    held: dict[str, str] = {}
    for uuid, intent in state.intents.items():  # resolved from where libvirt has the VM
        if intent.source != host:
            continue
        if uuid in defined and defined[uuid][1]:
            took_effect[intent.vm] = restarted[intent.vm] = defined[uuid][0]
            del intents[uuid]
        elif intent.target in silent:
            held[uuid] = intent.target  # it may run there: unknown until that host is fenced
        else:  # its target answers without it running, or was fenced: it did not take effect
            del intents[uuid]
    todo: list[SavedVm] = []
    hung: dict[str, str] = {}
    for vm in state.vms.values():
        if vm.host != host or not vm.running:
            continue
        where = defined.get(vm.uuid)
        if where is not None and where[1]:
            restarted.setdefault(vm.name, where[0])
            continue
        on = held.get(vm.uuid) or restarted.get(vm.name)
        if on is not None and on in silent:
            hung[vm.name] = on
            continue
        todo.append(vm)
    not_restarted = dict(record.not_restarted)
    steps: list[RestartStep] = []

    def refuse(name: str, why: str) -> None:
        if not_restarted.get(name) != why:  # said once, not every round
            steps.append(RestartStep(name, None, why))
        not_restarted[name] = why

    for name, on in sorted(hung.items()):
        refuse(
            name,
            f"started on {on}, which stopped answering before it was seen running there: it "
            f"may run on {on}, so it waits until {on} is fenced",
        )
    running_names = {v.name for v in snapshot.vms if v.state is not VmRunState.SHUTOFF}
    for name, why in sorted(unknown.items()):
        if name not in running_names:  # one that runs on a reachable host is not missed
            refuse(name, why)
    for r in restart_plan(desired, snapshot, todo, now=now):
        # a definition already on a reachable host (a start that failed) is started there
        target = defined[r.vm.uuid][0] if r.vm.uuid in defined else r.target
        if target is None:
            refuse(r.vm.name, r.why)
        else:
            steps.append(RestartStep(r.vm.name, target, r.why, r.vm))
    return RestartSteps(steps, restarted, took_effect, intents, not_restarted)


def _silent(snapshot: Snapshot, state: RecoveryState) -> set[str]:
    """The hosts that do not answer and were never confirmed fenced: what runs there is
    unknown, and may be running."""
    fenced = {h for h, r in state.hosts.items() if r.fenced_at is not None}
    return {h.name for h in snapshot.hosts if not h.reachable and h.name not in fenced}


def restarted_on(vm: SavedVm, target: str, now: datetime) -> SavedVm:
    """``vm`` once started on ``target``: that host's VM from now on, recovered with it if it
    dies in turn (never by the recovery of the host it ran on before)."""
    return vm.model_copy(update={"host": target, "seen_at": now})


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
