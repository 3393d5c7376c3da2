"""What one recovery step decides, before and after each thing it does; time is a parameter.

The engine's ``Recovery.step`` carries these out, in order, through its ports:

- :func:`remembered` - the saved sighting of every VM, from what the reachable hosts define;
- :func:`after_return` - the hosts and intents left once a host that came back is cleaned;
- :func:`host_next` - for a host that does not answer: wait, say it has no fence, wait out a
  fence's backoff, look only, fence it, or restart its VMs;
- :func:`after_fence` - the host's record once its fence answered (confirmed or not);
- ``core.recovery.restart_steps`` - what a restart step starts, and what it reports;
- :func:`recovered_status` - the Recovered condition of the step's report.

Nothing here does I/O; the report (:class:`RecoveryReport`) is plain data the step fills in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from reconciler.core import duplicates
from reconciler.core.recovery import blockers, due, fence_backoff
from reconciler.model.recovery import (
    FenceOutcome,
    FenceResult,
    HostRecovery,
    RecoveryState,
    SavedVm,
)
from reconciler.model.snapshot import Snapshot, VmRunState
from reconciler.model.status import ConditionType, ReconcileStatus, with_condition


@dataclass
class RecoveryReport:
    """What one recovery step did and found, for the status, the metrics and the CLI."""

    fence_failing: dict[str, str] = field(default_factory=dict)
    """Host -> what its last fence said, for hosts not confirmed off."""
    unconfirmed: list[str] = field(default_factory=list)
    """Hosts of ``fence_failing`` whose fence exited 0 but was not confirmed."""
    fenced: list[str] = field(default_factory=list)
    restarted: dict[str, str] = field(default_factory=dict)
    not_restarted: dict[str, str] = field(default_factory=dict)
    undefined: list[str] = field(default_factory=list)
    removed: list[tuple[str, str]] = field(default_factory=list)
    """(UUID, host) of each stale copy undefined: no longer a duplicate."""
    unfenceable: list[str] = field(default_factory=list)
    """Hosts past grace without a fence configured: never recovered."""
    waiting: dict[str, datetime] = field(default_factory=dict)
    """Host -> when it is next due (grace ends, or the fence's backoff)."""
    recorded: str | None = None

    @property
    def trouble(self) -> str | None:
        if self.fence_failing:
            return "; ".join(f"fencing {h} failed: {d}" for h, d in self.fence_failing.items())
        if self.unfenceable:
            return "no fence configured for " + ", ".join(self.unfenceable)
        if self.not_restarted:
            return "; ".join(f"{vm} not restarted: {why}" for vm, why in self.not_restarted.items())
        return None

    def failing(self, host: str, result: FenceResult) -> None:
        """Note that ``host``'s fence said ``result`` and did not confirm it off."""
        self.fence_failing[host] = f"{result.outcome}: {result.detail}"
        if result.outcome is FenceOutcome.UNCONFIRMED:
            self.unconfirmed.append(host)


def recovered_status(
    status: ReconcileStatus, report: RecoveryReport, now: datetime
) -> ReconcileStatus:
    """``status`` with the Recovered condition of ``report``, and without the duplicates its
    removal of stale copies settled."""
    trouble = report.trouble
    if report.unconfirmed:
        reason = "FenceUnconfirmed"
    elif report.fence_failing:
        reason = "FenceFailed"
    elif report.unfenceable:
        reason = "NoFence"
    elif report.not_restarted:
        reason = "NotRestarted"
    else:
        reason = "Restarted" if report.restarted else "NoDeadHost"
    message = trouble or (
        "restarted " + ", ".join(f"{vm} on {h}" for vm, h in sorted(report.restarted.items()))
        if report.restarted
        else ""
    )
    conditions = with_condition(
        status.conditions, ConditionType.RECOVERED, trouble is None, reason, message, now
    )
    left = duplicates.without_removed(status.duplicates, report.removed)
    return status.model_copy(update={"conditions": conditions, "duplicates": left})


def unreachable_since(tracked: Mapping[str, datetime], snapshot: Snapshot) -> dict[str, datetime]:
    """Per host, since when it has been unreachable in every observation: ``tracked`` with the
    hosts of ``snapshot`` that answer dropped and those that do not added (at its time)."""
    out = dict(tracked)
    for h in snapshot.hosts:
        if h.reachable:
            out.pop(h.name, None)
        else:
            out.setdefault(h.name, snapshot.taken_at)
    return out


def remembered(
    state: RecoveryState,
    snapshot: Snapshot,
    definitions: Mapping[str, Mapping[str, str] | None],
    now: datetime,
) -> dict[str, SavedVm]:
    """The saved sighting of every VM, by UUID, once the reachable hosts were read:
    ``definitions`` is host -> UUID -> inactive XML for each reachable host (None: its
    definitions could not be read, and what was saved of it stays). A VM of a host that does
    not answer keeps its last sighting. A shut-off copy never replaces a sighting of the VM
    running on another host, reachable or not (it may run there)."""
    reachable = set(definitions)
    vms = {u: v for u, v in state.vms.items() if v.host not in reachable}
    for host in sorted(reachable):
        xmls = definitions[host]
        if xmls is None:
            vms.update({u: v for u, v in state.vms.items() if v.host == host})
            continue
        for vm in snapshot.vms:
            xml = xmls.get(vm.uuid)
            if vm.host != host or xml is None:
                continue
            running = vm.state is not VmRunState.SHUTOFF
            old = vms.get(vm.uuid)
            if old is not None and old.running and not running and old.host != host:
                continue
            vms[vm.uuid] = SavedVm(
                name=vm.name,
                uuid=vm.uuid,
                host=vm.host,
                running=running,
                vcpus=vm.vcpus,
                memory=vm.memory_max,
                labels=dict(vm.labels),
                blockers=blockers(vm),
                xml=xml,
                seen_at=now,
            )
    return vms


def after_return(state: RecoveryState, back: Iterable[str], left: Iterable[str]) -> RecoveryState:
    """``state`` once the hosts ``back`` answer again: their recovery is over, but for those
    ``left`` (a stale copy on them could not be removed), which stay recovered; the intents of
    the hosts whose recovery is over go."""
    over = set(back) - set(left)
    hosts = {h: r for h, r in state.hosts.items() if h not in over}
    intents = {u: i for u, i in state.intents.items() if i.source in hosts}
    return state.model_copy(update={"hosts": hosts, "intents": intents})


class HostVerdict(StrEnum):
    WAIT = "wait"
    """Unreachable for less than grace: nothing yet."""
    NO_FENCE = "no-fence"
    """Due, but no fence is configured: never recovered."""
    BACKOFF = "backoff"
    """A fence did not confirm; the next try is not due yet."""
    LOOK = "look"
    """A candidate, in a step that does not act."""
    FENCE = "fence"
    """Fence it now."""
    RESTART = "restart"
    """Fenced: a restart step of its VMs (in a step that acts)."""
    FENCED_LOOK = "fenced-look"
    """Fenced, in a step that does not act: nothing more."""


@dataclass(frozen=True)
class HostNext:
    verdict: HostVerdict
    until: datetime | None = None
    """When it is next due (WAIT, BACKOFF)."""


def host_next(
    record: HostRecovery | None,
    since: datetime,
    now: datetime,
    *,
    grace: timedelta,
    has_fence: bool,
    act: bool,
) -> HostNext:
    """What a recovery step does about a host that has not answered since ``since``."""
    if record is None and not due(since, now, grace):
        return HostNext(HostVerdict.WAIT, since + grace)
    if record is not None and record.fenced_at is not None:
        return HostNext(HostVerdict.RESTART if act else HostVerdict.FENCED_LOOK)
    if not has_fence:
        return HostNext(HostVerdict.NO_FENCE)
    if record is not None and record.next_attempt_at is not None and now < record.next_attempt_at:
        return HostNext(HostVerdict.BACKOFF, record.next_attempt_at)
    return HostNext(HostVerdict.FENCE if act else HostVerdict.LOOK)


def after_fence(
    record: HostRecovery | None, since: datetime, result: FenceResult, now: datetime
) -> HostRecovery:
    """The host's record once its fence said ``result`` (confirmed or not): fenced now, or one
    more attempt with the next due after the backoff."""
    record = record or HostRecovery(unreachable_since=since)
    if result.outcome is FenceOutcome.OK:
        return record.model_copy(
            update={"fence": result, "fenced_at": now, "next_attempt_at": None}
        )
    attempts = record.attempts + 1
    return record.model_copy(
        update={
            "fence": result,
            "attempts": attempts,
            "next_attempt_at": now + fence_backoff(attempts),
        }
    )
