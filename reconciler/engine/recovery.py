"""Dead-host recovery, the effectful step run after each round of the active instance.

One :meth:`Recovery.step` per round, on the round's observation:

1. **Track**: per host, since when this instance has seen it unreachable in every observation
   (in memory: a restarted instance starts counting again); a host that answers is never a
   candidate, whatever it reports about its VMs.
2. **Remember**: the inactive definition of every VM on a reachable host, kept in the
   state directory (``RecoveryStore``), so the VMs of a host that dies can be started elsewhere.
3. **Fence** a host unreachable for ``grace``: its fence command, exit 0 only, then confirmed:
   the fence's status action (when it has one) must say off, and libvirt on the host must
   not answer. A fence that fails, times out or is not confirmed restarts nothing and is
   retried with backoff.
4. **Restart** the VMs that ran on a fenced host, by priority, where ``place`` would put them;
   an intent is saved before each start, and every start is first checked against libvirt
   (the VM running or defined on any reachable host is not started again), so a crash of the
   reconciler between the two restarts nothing twice. VMs this instance never saw there (a
   standby that took over, a lost state directory) are taken from the observed branch
   (``ObservedBranch``) when their recorded definition is fit to start; the others, and the
   VMs the placement puts there that no source knows, are listed as not restarted.
5. **Clean** a fenced host that comes back: a definition on it of a VM that runs elsewhere is
   undefined before anything starts it; a VM that runs nowhere else is left where it is.

Nothing here acts unless ``act`` (the policy's mode is apply and the cluster is held).
Every decision is a pure function of ``core.recovery_round`` (which sighting to keep, what to
do about each host that does not answer: wait, back off, fence, restart; the record after a
fence; the Recovered condition) and ``core.recovery`` (what a restart step starts and where,
stale copies); this module only carries them out, through the ports of ``engine/ports.py``
(``Fencer``, ``Restarter``, ``RecoveryStore``, ``ObservedBranch``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from reconciler.core import recovery as decide
from reconciler.core import recovery_round as decide_step
from reconciler.core.definitions import redacted_definition
from reconciler.core.recovery_round import HostVerdict, RecoveryReport
from reconciler.engine.ports import (
    Clock,
    DesiredSource,
    Fencer,
    ObservedBranch,
    RecoveryStore,
    Restarter,
)
from reconciler.errors import ReconcilerError
from reconciler.model.acting import Record
from reconciler.model.cluster import Host, effective_fence
from reconciler.model.desired import DesiredState
from reconciler.model.recovery import (
    Fence,
    FenceOutcome,
    FenceResult,
    HostRecovery,
    RecordedSighting,
    RecoveryState,
    RestartIntent,
)
from reconciler.model.snapshot import Snapshot
from reconciler.model.status import (
    MoveOutcome,
    MoveResult,
    ReconcileStatus,
)

log = logging.getLogger(__name__)

DEFINITIONS_FOLDER = "reconciler-definitions"
"""In the cluster folder of the state repository: ``<VM>.xml``, the definition a recovery
started (secrets removed), written by its audit commit."""


@dataclass
class RecoveryPorts:
    fencer: Fencer
    restarter: Restarter
    store: RecoveryStore
    clock: Clock
    source: DesiredSource | None = None
    observed: ObservedBranch | None = None
    """The observed branch (``run --repo``): definitions of VMs this instance never saw."""
    on_fence: Callable[[str, FenceOutcome], None] = lambda host, outcome: None


class Recovery:
    """The recovery state of one cluster across the rounds of one instance."""

    def __init__(self, cluster: str, ports: RecoveryPorts) -> None:
        self.cluster = cluster
        self.ports = ports
        self.unreachable_since: dict[str, datetime] = {}
        self.last: RecoveryReport = RecoveryReport()
        self._status: ReconcileStatus | None = None

    def step(
        self,
        desired: DesiredState,
        snapshot: Snapshot,
        *,
        act: bool,
        status: ReconcileStatus | None = None,
    ) -> RecoveryReport:
        report = RecoveryReport()
        self._status = status
        state = self.ports.store.load() or RecoveryState(cluster=self.cluster)
        now = self.ports.clock.now()
        self.unreachable_since = decide_step.unreachable_since(self.unreachable_since, snapshot)
        reachable: set[str] = {h.name for h in snapshot.hosts if h.reachable}
        state = self._returned(state, snapshot, reachable, act, report)
        state = self._remember(state, snapshot, reachable, now)
        spec = desired.policy.spec.recovery
        if spec.enabled:
            for host in desired.cluster.spec.hosts:
                if host.name in reachable:
                    continue
                state = self._recover(desired, state, snapshot, host.name, act, now, report)
        self.ports.store.save(state)
        self.last = report
        return report

    # -- a host that is back -----------------------------------------------------------------

    def _returned(
        self,
        state: RecoveryState,
        snapshot: Snapshot,
        reachable: set[str],
        act: bool,
        report: RecoveryReport,
    ) -> RecoveryState:
        back = [h for h in state.hosts if h in reachable]
        if not back:
            return state
        stale = decide.stale_copies(snapshot, back)
        left = set()
        for s in stale:
            if not act:
                left.add(s.host)
                continue
            try:
                self.ports.restarter.undefine(s.host, s.uuid)
            except ReconcilerError as err:
                log.error("could not undefine the stale copy of %s on %s: %s", s.vm, s.host, err)
                left.add(s.host)
                continue
            log.warning(
                "undefined the stale copy of %s on %s, which came back (it runs on %s)",
                s.vm,
                s.host,
                s.runs_on,
            )
            report.undefined.append(f"{s.vm}@{s.host}")
            report.removed.append((s.uuid, s.host))
        for h in back:
            if h in left:
                continue
            if state.hosts[h].fenced_at is None:
                log.warning(
                    "host %s answers again; it was never confirmed fenced and nothing of it "
                    "was restarted",
                    h,
                )
            else:
                log.info("host %s is back; its recovery is over", h)
        return decide_step.after_return(state, back, left)

    # -- definitions -------------------------------------------------------------------------

    def _remember(
        self, state: RecoveryState, snapshot: Snapshot, reachable: set[str], now: datetime
    ) -> RecoveryState:
        definitions: dict[str, dict[str, str] | None] = {}
        for host in sorted(reachable):
            try:
                definitions[host] = self.ports.restarter.definitions(host)
            except ReconcilerError as err:
                log.warning("could not read the definitions on %s: %s", host, err)
                definitions[host] = None
        vms = decide_step.remembered(state, snapshot, definitions, now)
        return state.model_copy(update={"vms": vms})

    # -- fence and restart ---------------------------------------------------------------------

    def _recover(
        self,
        desired: DesiredState,
        state: RecoveryState,
        snapshot: Snapshot,
        host: str,
        act: bool,
        now: datetime,
        report: RecoveryReport,
    ) -> RecoveryState:
        spec = desired.policy.spec.recovery
        record = state.hosts.get(host)
        since = self.unreachable_since.get(host, now)
        fence = effective_fence(desired.cluster, _host(desired, host))
        step = decide_step.host_next(
            record, since, now, grace=spec.grace, has_fence=fence is not None, act=act
        )
        verdict = step.verdict
        if verdict is HostVerdict.WAIT or verdict is HostVerdict.BACKOFF:
            assert step.until is not None
            report.waiting[host] = step.until
            if record is not None and record.fence is not None:
                report.failing(host, record.fence)
            return state
        if verdict is HostVerdict.NO_FENCE:
            log.error("host %s is unreachable and has no fence: nothing is restarted", host)
            report.unfenceable.append(host)
            return state
        if verdict is HostVerdict.LOOK:
            log.warning("host %s is a recovery candidate; not acting in this round", host)
            return state
        if verdict is HostVerdict.FENCED_LOOK:
            return state
        if verdict is HostVerdict.FENCE:
            assert fence is not None
            log.warning("host %s unreachable since %s: fencing it", host, since.isoformat())
            result = self.ports.fencer.fence(host, fence)
            if result.outcome is FenceOutcome.OK:
                result = self._confirmed(host, fence, result)
            self.ports.on_fence(host, result.outcome)
            record = decide_step.after_fence(record, since, result, now)
            state = _with_host(state, host, record, self.ports.store)
            if result.outcome is not FenceOutcome.OK:
                assert record.next_attempt_at is not None
                log.error(
                    "fencing %s did not confirm it off (%s: %s); nothing of it is restarted, "
                    "next try at %s",
                    host,
                    result.outcome,
                    result.detail,
                    record.next_attempt_at.isoformat(timespec="seconds"),
                )
                report.failing(host, result)
                report.waiting[host] = record.next_attempt_at
                return state
            log.warning("host %s fenced (%s)", host, result.detail or "exit 0")
            report.fenced.append(host)
        assert record is not None
        return self._restart(desired, state, snapshot, host, record, now, report)

    def _confirmed(self, host: str, fence: Fence, result: FenceResult) -> FenceResult:
        """``result`` of a fence that exited 0, once confirmed: the fence's status action (when
        it has one) asked for the host's power, then libvirt on the host asked whether it
        answers; ``unconfirmed``, with why, unless the one says off and the other is silent."""
        power = self.ports.fencer.status(host, fence) if fence.status_action() else None
        answer = self.ports.restarter.answers(host).version
        why = decide.unconfirmed(host, power, answer)
        seconds = result.seconds + (power.seconds if power is not None else 0)
        if why is not None:
            return FenceResult(outcome=FenceOutcome.UNCONFIRMED, detail=why, seconds=seconds)
        said = [result.detail or "exit 0"]
        if power is not None:
            said.append(f"status action: {power.detail or 'off'}")
        said.append("libvirt does not answer")
        return result.model_copy(update={"detail": "; ".join(said), "seconds": seconds})

    def _restart(
        self,
        desired: DesiredState,
        state: RecoveryState,
        snapshot: Snapshot,
        host: str,
        record: HostRecovery,
        now: datetime,
        report: RecoveryReport,
    ) -> RecoveryState:
        """Do what ``decide.restart_steps`` decided: an intent saved before each start, the
        start, its outcome on the host's record; then the audit record of what was done."""
        state, unknown = self._unknown(desired, state, host)
        decided = decide.restart_steps(desired, snapshot, state, host, record, unknown, now=now)
        for name, on in decided.took_effect.items():
            log.info("an earlier restart of %s took effect on %s", name, on)
        restarted, intents = dict(decided.restarted), dict(decided.intents)
        not_restarted = dict(decided.not_restarted)
        results: list[MoveResult] = []
        fence_said = record.fence.outcome.value if record.fence else "ok"
        for step in decided.steps:
            if step.target is None or step.saved is None:
                log.error("%s of fenced host %s is not restarted: %s", step.vm, host, step.why)
                results.append(_result(step.vm, host, host, MoveOutcome.SKIPPED, step.why, now))
                continue
            vm, target = step.saved, step.target
            intents[vm.uuid] = RestartIntent(
                vm=vm.name, uuid=vm.uuid, source=host, target=target, started_at=now
            )
            state = state.model_copy(update={"intents": intents})
            self.ports.store.save(state)
            try:
                self.ports.restarter.start(target, vm.uuid, vm.xml)
            except ReconcilerError as err:
                # the intent stays: the next step reads from libvirt whether the start took
                # effect, and holds the VM while its target does not answer
                log.error("restarting %s on %s failed: %s", vm.name, target, err)
                not_restarted[vm.name] = f"start on {target} failed: {err.message}"
                results.append(_result(vm.name, host, target, MoveOutcome.FAILED, err.message, now))
                continue
            log.warning("restarted %s of fenced host %s on %s", vm.name, host, target)
            del intents[vm.uuid]
            vms = {**state.vms, vm.uuid: decide.restarted_on(vm, target, now)}
            state = state.model_copy(update={"vms": vms})
            restarted[vm.name] = target
            not_restarted.pop(vm.name, None)
            report.restarted[vm.name] = target
            detail = f"restarted after {host} was fenced ({fence_said}): {step.why}"
            results.append(_result(vm.name, host, target, MoveOutcome.SUCCEEDED, detail, now))
        report.not_restarted.update(not_restarted)
        record = record.model_copy(update={"restarted": restarted, "not_restarted": not_restarted})
        state = state.model_copy(update={"intents": intents})
        state = _with_host(state, host, record, self.ports.store)
        if results:
            used = {s.saved.name: s.saved.xml for s in decided.steps if s.saved is not None}
            self._record(desired, host, results, used, report)
        return state

    def _unknown(
        self, desired: DesiredState, state: RecoveryState, host: str
    ) -> tuple[RecoveryState, dict[str, str]]:
        """``state`` with the VMs of fenced ``host`` taken from the observed branch, and VM
        name -> why not restarted for those of it no source can start."""
        saw_host = any(v.host == host for v in state.vms.values())
        sighting, unread = self._sighting(desired, host)
        unknown: dict[str, str] = {}
        if sighting is not None:
            found = decide.from_recorded(sighting, host, state.vms)
            if found.taken:
                log.warning(
                    "%s of fenced host %s: definition(s) taken from the observed branch "
                    "(recorded %s, %s)",
                    ", ".join(sorted(v.name for v in found.taken)),
                    host,
                    sighting.snapshot.taken_at.isoformat(timespec="seconds"),
                    sighting.commit[:12],
                )
                vms = {**state.vms, **{v.uuid: v for v in found.taken}}
                state = state.model_copy(update={"vms": vms})
            unknown.update(found.refused)
        if not saw_host:
            known = {v.name for v in state.vms.values()} | set(unknown)
            if sighting is not None:
                known |= {v.name for v in sighting.snapshot.vms}
            why = f"no saved definition: this instance never saw {host} reachable"
            if unread:
                why += f" (and the observed branch could not be read: {unread})"
            elif (
                self.ports.observed is not None
                and desired.policy.spec.recovery.definitions_from_git
            ):
                why += " (nor does the observed branch record it there)"
            for name in decide.unseen_placed(desired, host, known):
                unknown[name] = why
        return state, unknown

    def _sighting(self, desired: DesiredState, host: str) -> tuple[RecordedSighting | None, str]:
        """The observed branch's last sighting of ``host`` (None when it is off, absent or has
        none), and why it could not be read ("" when it could)."""
        observed = self.ports.observed
        if observed is None or not desired.policy.spec.recovery.definitions_from_git:
            return None, ""
        try:
            return observed.last_sighting(host), ""
        except ReconcilerError as err:
            log.warning(
                "could not read the recorded definitions of %s from the observed branch: %s; "
                "going on with the state directory's",
                host,
                err,
            )
            return None, err.message

    def _record(
        self,
        desired: DesiredState,
        host: str,
        results: list[MoveResult],
        definitions: dict[str, str],
        report: RecoveryReport,
    ) -> None:
        """The audit record of one recovery step, with the definitions it started (secrets
        removed; one that cannot be checked is left out)."""
        source = self.ports.source
        if source is None:
            return
        revert = desired.policy.spec.recovery.failback.value == "revert"
        placement = {
            r.vm: r.target for r in results if r.outcome is MoveOutcome.SUCCEEDED and not revert
        }
        files: dict[str, str] = {}
        for r in results:
            redacted = redacted_definition(definitions.get(r.vm, ""))
            if r.outcome is MoveOutcome.SUCCEEDED and redacted is not None:
                files[f"{DEFINITIONS_FOLDER}/{r.vm}.xml"] = redacted
        try:
            recorded = source.record(
                Record(
                    cluster=self.cluster,
                    plan_id=f"recovery-{host}",
                    revision=None,
                    results=results,
                    placement=placement,
                    status=self._status or ReconcileStatus(cluster=self.cluster),
                    trigger="recovery",
                    files=files,
                )
            )
        except ReconcilerError as err:
            log.error("the recovery of %s could not be recorded: %s", host, err)
            return
        report.recorded = recorded.where


def _host(desired: DesiredState, name: str) -> Host:
    return next(h for h in desired.cluster.spec.hosts if h.name == name)


def _with_host(
    state: RecoveryState, host: str, record: HostRecovery, store: RecoveryStore
) -> RecoveryState:
    new = state.model_copy(update={"hosts": {**state.hosts, host: record}})
    store.save(new)
    return new


def _result(
    vm: str, source: str, target: str, outcome: MoveOutcome, detail: str, at: datetime
) -> MoveResult:
    return MoveResult(
        vm=vm,
        source=source,
        target=target,
        outcome=outcome,
        reason="Recovery",
        detail=detail,
        started_at=at,
    )
