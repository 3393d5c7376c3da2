"""One reconcile round: observe -> plan -> admit -> execute -> record, status written once.

``run_round`` is what ``apply`` runs once and ``run`` runs in its loop. It talks to the world
only through the ports; the ReconcileStatus is written exactly once, in a ``finally``, whatever
happened (Flux's habit), so the next round and the people reading it see the streak, the
conditions and the last result even after an error.

A look writes nothing: a round that does not hold the cluster (``plan``, ``apply --dry-run``,
an apply answered "no") writes no status and no domain record. A round writes them when it
``holds`` the cluster (``run``'s rounds on the active instance, in every mode) or once its
plan is confirmed. A round that acted leaves its record in the desired state's source (a
placement edit, or an audit commit) before it returns, while the caller still holds the
cluster.

Neon's lesson: nothing is decided before a complete observation. When the cluster has never
been observed completely (a host did not answer), the round plans and reports but moves
nothing; later, an unreachable host's VMs stay out of balance decisions (the planner treats
the host as unknown, never as empty).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from reconciler.core import intents, planner
from reconciler.core.hugepages import pages_moved
from reconciler.engine.execute import Event, Execution, Gate, Ports
from reconciler.engine.observed import require_observed
from reconciler.engine.ports import (
    Clock,
    DesiredSource,
    DomainRecorder,
    Hold,
    Migrator,
    Observer,
    StatusStore,
)
from reconciler.errors import ReconcilerError, TerminalError, TransientError
from reconciler.model.acting import Record
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.plan import Plan
from reconciler.model.snapshot import Snapshot
from reconciler.model.status import (
    ConditionType,
    MoveOutcome,
    MoveResult,
    ReconcileStatus,
    RoundOutcome,
    RoundResult,
    with_condition,
)

log = logging.getLogger(__name__)


@dataclass
class RoundPorts:
    observer: Observer
    migrator: Migrator
    recorder: DomainRecorder
    status: StatusStore
    clock: Clock
    source: DesiredSource | None = None
    """Where the round's record goes when it acted (placement edit or audit commit)."""
    hold: Hold | None = None
    """The caller's hold on the cluster: no migration starts once it is not valid."""
    recovery: Callable[[DesiredState, Snapshot, ReconcileStatus], ReconcileStatus] | None = None
    """Run after the round on its observation, when it holds (dead-host recovery); returns
    the status with what it did."""


@dataclass
class RoundReport:
    """What a round did, for the CLI and the loop."""

    status: ReconcileStatus
    plan: Plan | None = None
    snapshot: Snapshot | None = None
    results: list[MoveResult] = field(default_factory=list)
    acted: bool = False
    interrupted: bool = False
    placement_written: dict[str, str] = field(default_factory=dict)
    error: ReconcilerError | None = None
    counted: bool = False
    """The round held the cluster (or its plan was confirmed): its status was written."""
    not_acting: str | None = None
    """Why a round that was asked to act and had moves did not start any."""
    recorded: str | None = None
    """The audit commit or file the round's record went to."""
    conflicts: list[str] = field(default_factory=list)
    record_error: ReconcilerError | None = None
    late: list[MoveResult] = field(default_factory=list)
    """Earlier moves of the reconciler's whose record was missing: recorded by this round."""

    @property
    def outcome(self) -> RoundOutcome:
        assert self.status.last_result is not None
        return self.status.last_result.outcome


def run_round(
    desired: DesiredState,
    ports: RoundPorts,
    *,
    act: bool,
    trigger: str = "manual",
    revision: str | None = None,
    holds: bool | None = None,
    audit_trigger: Callable[[Plan], str] | None = None,
    placement_changed_at: datetime | None = None,
    confirm: Callable[[Plan], bool] | None = None,
    gate: Gate | None = None,
    stop: threading.Event | None = None,
    abort: threading.Event | None = None,
    on_event: Callable[[Event], None] = lambda e: None,
    on_plan: Callable[[Plan, Snapshot], None] = lambda p, s: None,
) -> RoundReport:
    """One round; ``act`` False plans and reports only. Errors end up in the status, re-raised.

    ``holds``: the caller holds the cluster for this round, so its status counts even when it
    does not act (default: ``act``); a plan the caller does not confirm un-counts it.
    ``gate`` is asked before every migration starts (a window that closed).
    ``placement_changed_at``: when placement.yaml last changed; the reconciler's own moves
    made after it that placement does not follow are recorded late, not reverted.
    """
    stop = stop or threading.Event()
    abort = abort or threading.Event()
    started = ports.clock.now()
    previous = _trusted(ports.status.load(), started)
    report = RoundReport(status=previous or ReconcileStatus(cluster=_name(desired)))
    report.counted = act if holds is None else holds
    try:
        _round(
            desired,
            ports,
            report,
            previous,
            act,
            placement_changed_at,
            confirm,
            gate,
            stop,
            abort,
            on_event,
            on_plan,
        )
    except ReconcilerError as err:
        report.error = err
        raise
    except Exception as err:  # a bug is a failed round, never "Applied"
        log.exception("round failed unexpectedly")
        report.error = TerminalError(f"unexpected {type(err).__name__}: {err}")
        raise
    finally:
        report.interrupted = stop.is_set()
        report.status = _status(
            desired, previous, report, started, ports.clock.now(), trigger, revision
        )
        owed = report.acted or (report.counted and bool(report.late))
        if owed and ports.source is not None and report.plan is not None:
            chosen = audit_trigger(report.plan) if audit_trigger is not None else trigger
            _leave_record(desired, ports.source, report, revision, chosen)
        if ports.recovery is not None and report.snapshot is not None and report.counted:
            after = _after_moves(report.snapshot, report.results)
            report.status = ports.recovery(desired, after, report.status)
        if report.counted:
            ports.status.save(report.status)
    return report


def _after_moves(snapshot: Snapshot, results: list[MoveResult]) -> Snapshot:
    """``snapshot`` with the VMs this round moved on their targets."""
    moved = {r.vm: r.target for r in results if r.outcome is MoveOutcome.SUCCEEDED}
    if not moved:
        return snapshot
    vms = [
        v.model_copy(update={"host": moved[v.name]}) if v.name in moved else v for v in snapshot.vms
    ]
    went = [(v, moved[v.name]) for v in snapshot.vms if v.name in moved]
    hosts = pages_moved(snapshot.hosts, went)  # rooms stay: the pages went with the VMs
    return snapshot.model_copy(update={"vms": vms, "hosts": hosts})


SKEW_TOLERANCE = timedelta(minutes=5)
"""How far in the future a record may be dated before it is distrusted (clock skew)."""


def _trusted(status: ReconcileStatus | None, now: datetime) -> ReconcileStatus | None:
    """The previous status, unless it is dated in the future (then ignored, with a warning)."""
    if status is None:
        return None
    dated = [t for t in (status.last_observed_at, status.observed_since) if t is not None]
    if status.last_result is not None:
        dated.append(status.last_result.finished_at)
    if any(t > now + SKEW_TOLERANCE for t in dated):
        log.warning(
            "ignoring the saved status of %s: it is dated in the future (after %s); "
            "imbalance streaks restart",
            status.cluster,
            now.isoformat(timespec="seconds"),
        )
        return None
    return status


def _leave_record(
    desired: DesiredState,
    source: DesiredSource,
    report: RoundReport,
    revision: str | None,
    trigger: str,
) -> None:
    """The round's record in its source, while the caller still holds the cluster."""
    assert report.plan is not None
    results = report.late + report.results
    writes, adopted = placement_updates(desired, report.plan, results)
    try:
        recorded = source.record(
            Record(
                cluster=_name(desired),
                plan_id=report.plan.plan_id,
                revision=revision,
                results=results,
                placement=writes,
                adopted=adopted,
                status=report.status,
                trigger=trigger,
            )
        )
    except ReconcilerError as err:
        log.error("the round acted but its record could not be written: %s", err)
        report.record_error = err
        report.status = report.status.model_copy(
            update={
                "conditions": with_condition(
                    report.status.conditions,
                    ConditionType.READY,
                    False,
                    "RecordFailed",
                    f"moves done, record not written: {err.message}",
                    report.status.last_result.finished_at
                    if report.status.last_result
                    else report.plan.created_at,
                )
            }
        )
        return
    report.recorded = recorded.where
    report.placement_written = dict(recorded.written)
    report.conflicts = list(recorded.conflicts)
    for line in recorded.conflicts:
        log.warning("placement conflict: %s", line)
    if recorded.conflicts and report.status.last_result is not None:
        report.status = report.status.model_copy(
            update={
                "conditions": with_condition(
                    report.status.conditions,
                    ConditionType.READY,
                    False,
                    "PlacementConflict",
                    "; ".join(recorded.conflicts),
                    report.status.last_result.finished_at,
                )
            }
        )


def _name(desired: DesiredState) -> str:
    return desired.cluster.metadata.name


def _round(
    desired: DesiredState,
    ports: RoundPorts,
    report: RoundReport,
    previous: ReconcileStatus | None,
    act: bool,
    placement_changed_at: datetime | None,
    confirm: Callable[[Plan], bool] | None,
    gate: Gate | None,
    stop: threading.Event,
    abort: threading.Event,
    on_event: Callable[[Event], None],
    on_plan: Callable[[Plan, Snapshot], None],
) -> None:
    observed = ports.observer.observe()
    down = [h for h in observed.hosts if not h.reachable]
    if observed.hosts and len(down) == len(observed.hosts):
        report.snapshot = observed
        require_observed(observed)  # raises: no host answered
    now = ports.clock.now()
    # Records dated in the future are dropped and intents resolved from where each VM runs,
    # in memory: the plan decides from them; they are written only by a round that holds.
    sane, distrusted = intents.without_future_records(observed, now + SKEW_TOLERANCE)
    for line in distrusted:
        log.warning("ignoring a record dated in the future: %s", line)
    snapshot, resolutions = intents.resolved(sane, now)
    report.snapshot = snapshot
    late = intents.unrecorded_moves(desired.placement.spec.vms, snapshot, placement_changed_at)
    if late:
        # the desired state follows these moves in memory; the record makes it so in the source
        report.late = late
        desired = intents.following(desired, late)
        for r in late:
            log.warning(
                "%s was moved %s -> %s by the reconciler (%s) but placement.yaml was not "
                "updated: recording it, not moving it back",
                r.vm,
                r.source,
                r.target,
                r.detail,
            )
    history = previous.history() if previous is not None else History()
    complete = not down
    if history.observed_since is None and complete:
        history = history.model_copy(update={"observed_since": snapshot.taken_at})
    plan = planner.plan(desired, snapshot, history, now=now)
    report.plan = plan
    for line in _decisions(plan):
        log.info(line, extra={"plan_id": plan.plan_id})
    on_plan(plan, snapshot)
    ready = act and bool(plan.moves) and history.observed_since is not None
    if act and plan.moves and history.observed_since is None:
        report.not_acting = (
            "the cluster has not been observed completely yet ("
            + ", ".join(f"{h.name}: {h.error or 'unreachable'}" for h in down)
            + ")"
        )
        log.warning("not acting: %s", report.not_acting)
    if ready and confirm is not None and not confirm(plan):
        report.counted = False  # answered "no" (or a dry run): a look, nothing written
        return
    if ready:
        report.counted = True
    if not report.counted:
        return  # a look: nothing written
    kept = _write_resolutions(ports, resolutions)
    if kept:  # a copy that could not be removed: its intent stays, for the next round
        records = {(v.name, v.host): v.reconciler for v in sane.vms}
        vms = [
            v.model_copy(update={"reconciler": records[(v.name, v.host)]})
            if v.name in kept and (v.name, v.host) in records
            else v
            for v in snapshot.vms
        ]
        snapshot = snapshot.model_copy(update={"vms": vms})
    if history.observed_since is not None:
        snapshot = _record_first_seen(ports, snapshot, history, now)
        report.snapshot = snapshot
    if not ready:
        return
    report.acted = True
    execution = Execution(
        desired,
        snapshot,
        plan.moves,
        Ports(ports.observer, ports.migrator, ports.recorder, ports.clock),
        plan_id=plan.plan_id,
        stop=stop,
        abort=abort,
        gate=_gates(ports.hold, gate),
        on_event=on_event,
    )
    report.results = execution.run()


def _gates(hold: Hold | None, gate: Gate | None) -> Gate:
    """Asked before each migration starts: the hold still valid, the caller's gate open."""

    def check() -> str | None:
        if hold is not None and not hold.valid():
            who = hold.holder()
            return "the hold on the cluster is no longer confirmed" + (
                f" (held by {who})" if who else ""
            )
        return gate() if gate is not None else None

    return check


def _write_resolutions(ports: RoundPorts, resolutions: list[intents.Resolution]) -> set[str]:
    """Intents found on domains, resolved from where the VMs run, written back on them; the
    VMs whose stopped cold move could not be undone (their intents stay)."""
    kept: set[str] = set()
    for r in resolutions:
        log.info("resolved an earlier migration of %s: %s", r.vm, r.summary)
        try:
            if r.discard_on is not None:  # the copy goes first: the record says it is gone
                kept.add(r.vm)
                ports.migrator.discard_copy(r.discard_on, r.vm, uuid=r.uuid)
                kept.discard(r.vm)
            ports.recorder.record(r.host, r.vm, r.state, uuid=r.uuid)
        except ReconcilerError as err:
            log.warning("could not record the resolution of %s: %s", r.vm, err)
    return kept


def _decisions(plan: Plan) -> list[str]:
    """One line per decision, VM -> host with its reason (vmpooler's habit)."""
    lines = [
        f"plan {m.vm}: {m.source} -> {m.target} ({m.reason.value}"
        f"{', rule ' + m.rule if m.rule else ''}, wave {m.wave}): {m.detail}"
        for m in plan.moves
    ]
    lines += [
        f"deferred {m.vm}: {m.source} -> {m.target} ({m.reason.value})" for m in plan.deferred
    ]
    lines += [f"unsatisfiable {u.code.value}: {u.message}" for u in plan.unsatisfiable]
    return lines


def _record_first_seen(
    ports: RoundPorts, snapshot: Snapshot, history: History, now: datetime
) -> Snapshot:
    """Stamp VMs seen for the first time: a VM there at the first complete observation is old.

    Returns the snapshot with the stamps, so later records of this round keep them.
    """
    since = history.observed_since
    vms = []
    for seen in snapshot.vms:
        vm = seen
        if vm.reconciler.first_seen is None and vm.persistent:
            first = since if since is not None and since >= snapshot.taken_at else now
            record = vm.reconciler.model_copy(update={"first_seen": first})
            try:
                ports.recorder.record(vm.host, vm.name, record, uuid=vm.uuid)
                vm = vm.model_copy(update={"reconciler": record})
            except ReconcilerError as err:
                log.warning("could not record first sighting of %s: %s", vm.name, err)
        vms.append(vm)
    return snapshot.model_copy(update={"vms": vms})


def placement_updates(
    desired: DesiredState, plan: Plan, results: list[MoveResult]
) -> tuple[dict[str, str], dict[str, str]]:
    """placement.yaml entries that follow what happened, so the next plan has nothing to undo:
    (every entry to write, those of them adopted from where a VM runs without a move).

    VMs listed in the Placement that moved move there too; drift adopted by the plan is written.
    """
    listed = desired.placement.spec.vms
    out: dict[str, str] = {}
    adopted: dict[str, str] = {}
    moved = {r.vm for r in results if r.outcome is MoveOutcome.SUCCEEDED}
    for r in results:
        if r.vm in moved and r.vm in listed and listed[r.vm] != r.target:
            out[r.vm] = r.target
    planned = {m.vm for m in plan.moves + plan.deferred}
    for vm, host in plan.placement.items():
        if vm in listed and listed[vm] != host and vm not in planned and vm not in moved:
            out[vm] = adopted[vm] = host
    return out, adopted


def _status(
    desired: DesiredState,
    previous: ReconcileStatus | None,
    report: RoundReport,
    started: datetime,
    finished: datetime,
    trigger: str,
    revision: str | None,
) -> ReconcileStatus:
    base = previous or ReconcileStatus(cluster=_name(desired))
    plan, snap = report.plan, report.snapshot
    complete = snap is not None and all(h.reachable for h in snap.hosts)
    observed_since = base.observed_since
    if observed_since is None and complete and snap is not None:
        observed_since = snap.taken_at
    counts = {o: sum(r.outcome is o for r in report.results) for o in MoveOutcome}
    bad = counts[MoveOutcome.FAILED] + counts[MoveOutcome.SKIPPED] + counts[MoveOutcome.ABORTED]
    if report.error is not None:
        outcome, message = RoundOutcome.FAILED, report.error.message
    elif plan is None or not (plan.moves or plan.deferred):
        outcome, message = RoundOutcome.IN_SYNC, "nothing to move"
    elif not report.acted:
        outcome, message = RoundOutcome.PLANNED, f"{len(plan.moves)} move(s) planned, none run"
    elif bad or report.interrupted:
        outcome = RoundOutcome.PARTIAL
        message = (
            f"{counts[MoveOutcome.SUCCEEDED]} moved, {counts[MoveOutcome.FAILED]} failed, "
            f"{counts[MoveOutcome.SKIPPED]} skipped, {counts[MoveOutcome.ABORTED]} aborted"
            + (" (interrupted)" if report.interrupted else "")
        )
    else:
        outcome, message = RoundOutcome.APPLIED, f"{counts[MoveOutcome.SUCCEEDED]} moved"
    conditions = list(base.conditions)
    # A transient error (a host or remote not answering) is retried; anything else needs a person.
    stalled = report.error is not None and not isinstance(report.error, TransientError)
    if report.error is not None:
        reason = type(report.error).__name__
        conditions = with_condition(
            conditions, ConditionType.READY, False, reason, message, finished
        )
        conditions = with_condition(
            conditions, ConditionType.STALLED, stalled, reason, message, finished
        )
        conditions = with_condition(
            conditions, ConditionType.RECONCILING, False, reason, "", finished
        )
    else:
        pending = plan is not None and bool(
            plan.deferred or (plan.moves and outcome is not RoundOutcome.APPLIED)
        )
        ready = outcome in (RoundOutcome.IN_SYNC, RoundOutcome.APPLIED) and not pending
        reason = "InSync" if outcome is RoundOutcome.IN_SYNC else outcome.value
        conditions = with_condition(
            conditions, ConditionType.READY, ready, reason, message, finished
        )
        conditions = with_condition(
            conditions,
            ConditionType.RECONCILING,
            not ready,
            "MovesPending" if not ready else reason,
            message,
            finished,
        )
        conditions = with_condition(
            conditions, ConditionType.STALLED, False, "Progressing", "", finished
        )
    interval = desired.policy.spec.interval
    return base.model_copy(
        update={
            "cluster": _name(desired),
            "observed_revision": revision or base.observed_revision,
            "observed_since": observed_since,
            "last_observed_at": snap.taken_at if snap is not None else base.last_observed_at,
            "imbalance_rounds": dict(plan.imbalance_rounds)
            if plan is not None
            else base.imbalance_rounds,
            "rounds": base.rounds + 1,
            "conditions": conditions,
            "last_result": RoundResult(
                started_at=started,
                finished_at=finished,
                trigger=trigger,
                outcome=outcome,
                plan_id=plan.plan_id if plan is not None else None,
                message=message,
                moves=report.results,
            ),
            "next_round_at": finished + interval,
        }
    )
