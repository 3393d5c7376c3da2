"""One reconcile round: observe -> plan -> admit -> execute -> record, status written once.

``run_round`` is what ``apply`` runs once and ``run`` runs in its loop. It talks to the world
only through the ports; the ReconcileStatus is written exactly once, in a ``finally``, whatever
happened (Flux's habit), so the next round and the people reading it see the streak, the
conditions and the last result even after an error: a record that cannot be written (even
with an error its port should have mapped to the project's) makes the status not Ready
(``RecordFailed``), and the recovery step and the status save still follow. What the status
says, which placement entries follow the moves and what the recovery step is shown are pure
decisions (``core.rounds``), and so is what the round does: ``core.next_actions`` turns the
observation into facts (intents resolved, duplicates held, late moves) and the facts into
actions (the plan, act or not and why, ask first, count); the round only carries them out, the
rollouts between the two. How a round runs is one frozen ``RoundOptions``.

A look writes nothing: a round that does not hold the cluster (``plan``, ``apply --dry-run``,
an apply answered "no") writes no status and no domain record. A round writes them when it
``holds`` the cluster (``run``'s rounds on the active instance, in every mode) or once its
plan is confirmed. A round that acted leaves its record in the desired state's source (a
placement edit, or an audit commit) before it returns, while the caller still holds the
cluster.

Every observation is checked for VMs on two hosts (``core.duplicates``): each is logged, held
where it is (no move of it is planned, admitted or started) and listed in the status, whose
Duplicated condition (and Ready) says so after the recovery step.

Neon's lesson: nothing is decided before a complete observation. When the cluster has never
been observed completely (a host did not answer), the round plans and reports but moves
nothing; later, an unreachable host's VMs stay out of balance decisions (the planner treats
the host as unknown, never as empty).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from reconciler.core import intents, rounds
from reconciler.core import next_actions as decide
from reconciler.engine.execute import Event, Execution, Gate, Ports
from reconciler.engine.observed import require_observed
from reconciler.engine.ports import (
    Clock,
    DesiredSource,
    DomainRecorder,
    Hold,
    Migrator,
    Observer,
    QueuedRecords,
    StatusStore,
)
from reconciler.errors import ReconcilerError, TerminalError, TransientError
from reconciler.model.acting import Record
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.plan import Plan
from reconciler.model.snapshot import ReconcilerState, Snapshot
from reconciler.model.status import Duplicate, MoveResult, ReconcileStatus, RoundOutcome

if TYPE_CHECKING:  # the rollout engine is imported by the rounds of a cluster with rollouts
    from reconciler.engine.power import PowerSaving
    from reconciler.engine.rollouts import RolloutPorts, RolloutRound

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
    rollouts: RolloutPorts | None = None
    """The rollouts' records, commands and hosts: a round that holds the cluster carries the
    rollouts on when it acts, and plans with the hosts they hold out drained."""
    power: PowerSaving | None = None
    """Power saving (``engine.power``): the round plans with the hosts it empties, powered
    off or booting held out (those asleep known not to answer), and its step follows the
    round's record, before recovery, which never fences a host asleep."""


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
    duplicates: list[Duplicate] = field(default_factory=list)
    """VMs the observation found on two hosts: none of them was moved."""
    rollouts: RolloutRound | None = None
    """What the rollouts did this round and what they hold out."""
    marked: dict[str, tuple[str, str, ReconcilerState]] = field(default_factory=dict)
    """VM -> (host, UUID, record) of the moves marked unrecorded on their domains that this
    round's record carries: its own, and earlier ones a stopped reconciler left."""

    @property
    def outcome(self) -> RoundOutcome:
        assert self.status.last_result is not None
        return self.status.last_result.outcome

    def facts(self) -> rounds.RoundFacts:
        """What the round did so far, for its status."""
        error = self.error
        return rounds.RoundFacts(
            plan=self.plan,
            snapshot=self.snapshot,
            results=list(self.results),
            acted=self.acted,
            interrupted=self.interrupted,
            duplicates=list(self.duplicates),
            failure=None
            if error is None
            else rounds.RoundFailure(
                reason=type(error).__name__,
                message=error.message,
                # a host or remote not answering is retried; anything else needs a person
                transient=isinstance(error, TransientError),
            ),
        )


def _ignore(*_: object) -> None:
    """A callback that does nothing."""


@dataclass(frozen=True)
class RoundOptions:
    """How one round runs: whether it acts, what it records, and who it tells."""

    act: bool
    """Move VMs when the plan has moves; False plans and reports only."""
    trigger: str = "manual"
    """What started the round, as its status and record say it."""
    revision: str | None = None
    """The desired state's revision (a commit), recorded as the one observed."""
    holds: bool | None = None
    """The caller holds the cluster for this round, so its status counts even when it does not
    act (default: ``act``); a plan the caller does not confirm un-counts it."""
    audit_trigger: Callable[[Plan], str] | None = None
    """The trigger the record names, chosen from the plan (default: ``trigger``)."""
    placement_changed_at: datetime | None = None
    """When placement.yaml last changed; the reconciler's own moves made after it that
    placement does not follow are recorded late, not reverted."""
    confirm: Callable[[Plan], bool] | None = None
    """Asked once before acting on a plan with moves; False makes the round a look."""
    gate: Gate | None = None
    """Asked before every migration starts (a window that closed)."""
    stop: threading.Event = field(default_factory=threading.Event)
    """Set: start nothing more, let running migrations end (the VMs stay where they are)."""
    abort: threading.Event = field(default_factory=threading.Event)
    """Set: also abort the running migrations."""
    on_event: Callable[[Event], None] = _ignore
    """Told of every start, progress, end and skip of a move."""
    on_plan: Callable[[Plan, Snapshot], None] = _ignore
    """Told of the plan and the observation it was made from, before anything acts."""
    actor: str | None = None
    """Who acts (``run@kvm-admin-1``): named on every intent and move it writes; another
    actor's live intent found on a VM keeps the round from acting."""
    instance: str = "reconciler"
    """Who acts, as the rollouts' records name it."""


def run_round(desired: DesiredState, ports: RoundPorts, options: RoundOptions) -> RoundReport:
    """One round; ``options.act`` False plans and reports only. Errors end up in the status,
    re-raised; the status is saved once, in a ``finally``, when the round counts."""
    started = ports.clock.now()
    saved = ports.status.load()
    previous = rounds.trusted_status(saved, started)
    if saved is not None and previous is None:
        log.warning(
            "ignoring the saved status of %s: it is dated in the future (after %s); "
            "imbalance streaks restart",
            saved.cluster,
            started.isoformat(timespec="seconds"),
        )
    report = RoundReport(status=previous or ReconcileStatus(cluster=_name(desired)))
    report.counted = options.act if options.holds is None else options.holds
    try:
        _round(desired, ports, report, previous, options)
    except ReconcilerError as err:
        report.error = err
        raise
    except Exception as err:  # a bug is a failed round, never "Applied"
        log.exception("round failed unexpectedly")
        report.error = TerminalError(f"unexpected {type(err).__name__}: {err}")
        raise
    finally:
        report.interrupted = options.stop.is_set()
        report.status = rounds.round_status(
            desired,
            previous,
            report.facts(),
            started=started,
            finished=ports.clock.now(),
            trigger=options.trigger,
            revision=options.revision,
        )
        if report.rollouts is not None:
            report.status = report.status.model_copy(update={"rollouts": report.rollouts.states()})
        try:
            _after(desired, ports, report, options)
        finally:
            # after the recovery step, which may have removed a stale copy since the look
            report.status = rounds.with_duplicates(report.status, previous, ports.clock.now())
            if report.counted:
                ports.status.save(report.status)
    return report


def _after(
    desired: DesiredState, ports: RoundPorts, report: RoundReport, options: RoundOptions
) -> None:
    """What follows a round while the caller still holds the cluster: its record, when it
    acted (or owes a late one, or earlier rounds' records wait in its source's queue), and
    the recovery step on its observation."""
    queued = isinstance(ports.source, QueuedRecords) and ports.source.queued()
    owed = report.acted or (report.counted and (bool(report.late) or queued))
    if owed and ports.source is not None and report.plan is not None:
        audit = options.audit_trigger
        chosen = audit(report.plan) if audit is not None else options.trigger
        _leave_record(desired, ports.source, ports.recorder, report, options.revision, chosen)
    after = (
        rounds.snapshot_after_moves(report.snapshot, report.results)
        if report.snapshot is not None
        else None
    )
    if ports.power is not None and after is not None and report.counted:
        held = report.rollouts.out if report.rollouts is not None else ()
        try:
            ports.power.step(desired, after, act=options.act, held=held)
        except ReconcilerError as err:
            log.error("power step failed: %s", err)
        report.status = report.status.model_copy(
            update={
                "standby": dict(sorted((h, s.why) for h, s in ports.power.book().standby.items()))
            }
        )
    if ports.recovery is not None and after is not None and report.counted:
        if ports.power is not None:  # a host asleep on purpose is no dead host
            desired, after = _awake(desired, after, ports.power.asleep())
        report.status = ports.recovery(desired, after, report.status)


def _awake(
    desired: DesiredState, snapshot: Snapshot, asleep: tuple[str, ...]
) -> tuple[DesiredState, Snapshot]:
    """``desired`` and ``snapshot`` without the hosts ``asleep``."""
    if not asleep:
        return desired, snapshot
    gone = set(asleep)
    hosts = [h for h in desired.cluster.spec.hosts if h.name not in gone]
    spec = desired.cluster.spec.model_copy(update={"hosts": hosts})
    cluster = desired.cluster.model_copy(update={"spec": spec})
    seen = [h for h in snapshot.hosts if h.name not in gone]
    return (
        desired.model_copy(update={"cluster": cluster}),
        snapshot.model_copy(update={"hosts": seen}),
    )


def _leave_record(
    desired: DesiredState,
    source: DesiredSource,
    recorder: DomainRecorder,
    report: RoundReport,
    revision: str | None,
    trigger: str,
) -> None:
    """The round's record in its source, while the caller still holds the cluster."""
    assert report.plan is not None
    results = report.late + report.results
    writes, adopted = rounds.placement_updates(desired, report.plan, results)
    record = Record(
        cluster=_name(desired),
        plan_id=report.plan.plan_id,
        revision=revision,
        results=results,
        placement=writes,
        adopted=adopted,
        status=report.status,
        trigger=trigger,
    )
    at = report.status.last_result.finished_at if report.status.last_result else None
    try:
        recorded = source.record(record)
    except Exception as err:  # a port that broke its promise fails the same way
        failed = err if isinstance(err, ReconcilerError) else _unexpected(err)
        log.error("the round acted but its record could not be written: %s", failed)
        report.record_error = failed
        report.status = rounds.status_not_ready(
            report.status,
            "RecordFailed",
            f"moves done, record not written: {failed.message}",
            at or report.plan.created_at,
        )
        return
    report.recorded = recorded.where
    report.placement_written = dict(recorded.written)
    _unmark(recorder, report)
    report.conflicts = list(recorded.conflicts)
    for line in recorded.conflicts:
        log.warning("placement conflict: %s", line)
    if recorded.conflicts and at is not None:
        report.status = rounds.status_not_ready(
            report.status, "PlacementConflict", "; ".join(recorded.conflicts), at
        )


def _unmark(recorder: DomainRecorder, report: RoundReport) -> None:
    """The round's record is written: the moves it carries are no longer unrecorded. A mark
    that cannot be cleared stays; the next round records its move again (late)."""
    recorded = {r.vm for r in [*report.late, *report.results]}
    for vm, (host, uuid, state) in sorted(report.marked.items()):
        if vm not in recorded or not state.unrecorded:
            continue
        try:
            recorder.record(host, vm, state.model_copy(update={"unrecorded": False}), uuid=uuid)
        except ReconcilerError as err:
            log.warning("could not mark the move of %s as recorded: %s", vm, err)


def _unexpected(err: Exception) -> TerminalError:
    """An error a port should have mapped to the project's own, as one (logged with its
    traceback: it is a bug of that port)."""
    log.error("a port raised %s instead of the project's error", type(err).__name__, exc_info=err)
    return TerminalError(f"unexpected {type(err).__name__}: {err}")


def _name(desired: DesiredState) -> str:
    return desired.cluster.metadata.name


def _round(
    desired: DesiredState,
    ports: RoundPorts,
    report: RoundReport,
    previous: ReconcileStatus | None,
    options: RoundOptions,
) -> None:
    """Observe, decide (``core.next_actions``), carry out: the rollouts between the two
    decisions, then what the second decided."""
    observed = ports.observer.observe()
    down = [h for h in observed.hosts if not h.reachable]
    if observed.hosts and len(down) == len(observed.hosts):
        report.snapshot = observed
        require_observed(observed)  # raises: no host answered
    now = ports.clock.now()
    facts = decide.observed_facts(
        desired,
        observed,
        previous,
        now=now,
        actor=options.actor,
        placement_changed_at=options.placement_changed_at,
        asleep=ports.power.asleep() if ports.power is not None else (),
    )
    _tell(facts)
    report.duplicates = facts.duplicates
    report.late = facts.late
    late = {r.vm for r in facts.late}
    report.marked = {
        v.name: (v.host, v.uuid, v.reconciler)
        for v in facts.snapshot.vms
        if v.reconciler.unrecorded and v.name in late
    }
    report.snapshot = facts.snapshot
    holds = report.counted
    holding: decide.RolloutHolds | None = None
    if ports.rollouts is not None and desired.rollouts and holds:
        held = _rollouts(facts, ports, ports.rollouts, options)
        report.rollouts = held
        unreadable = held.error.message if held.error is not None and not held.decisions else None
        holding = decide.RolloutHolds(held.snapshot, held.out, held.keep_out, unreadable)
    if ports.power is not None and holds:
        out = ports.power.out()
        if out:  # power saving's hosts join what the rollouts hold out
            base = holding or decide.RolloutHolds()
            holding = dataclasses.replace(base, out=tuple(dict.fromkeys((*base.out, *out))))
    actions = decide.next_actions(
        facts,
        act=options.act,
        holds=holds,
        confirm=options.confirm is not None,
        actor=options.actor,
        now=now,
        rollouts=holding,
    )
    plan = actions.plan
    report.plan = plan
    report.snapshot = actions.snapshot
    for line in _decisions(plan):
        log.info(line, extra={"plan_id": plan.plan_id})
    options.on_plan(plan, actions.snapshot)
    if actions.refusal is not None:
        report.not_acting = actions.refusal
        log.warning("not acting: %s", actions.refusal)
    if actions.ask and options.confirm is not None and not options.confirm(plan):
        report.counted = False  # answered "no" (or a dry run): a look, nothing written
        return
    report.counted = actions.counts
    if not actions.counts:
        return  # a look: nothing written
    kept = _write_resolutions(ports, facts.resolutions)
    snapshot = decide.with_kept_intents(actions.snapshot, facts.recorded, kept)
    snapshot = _record_first_seen(ports, snapshot, facts.history, now)
    report.snapshot = snapshot
    if not actions.act:
        return
    report.acted = True
    execution = Execution(
        actions.planned,
        snapshot,
        plan.moves,
        Ports(ports.observer, ports.migrator, ports.recorder, ports.clock),
        plan_id=plan.plan_id,
        stop=options.stop,
        abort=options.abort,
        gate=_gates(ports.hold, options.gate),
        on_event=options.on_event,
        actor=options.actor,
        owed=ports.source is not None,
    )
    report.results = execution.run()
    report.marked.update(execution.written)


def _tell(facts: decide.ObservedFacts) -> None:
    """The facts an operator must hear of, logged once per round."""
    for line in facts.distrusted:
        log.warning("ignoring a record dated in the future: %s", line)
    for d in facts.duplicates:  # whatever made them: said, and none of them moves
        log.error(
            "duplicate VM: %s; no move of it until a person keeps one copy "
            "(docs/recovery.md#duplicates)",
            d.describe(),
        )
    for r in facts.late:
        log.warning(
            "%s was moved %s -> %s by the reconciler (%s) but its record was not written: "
            "recording it now, not moving it back",
            r.vm,
            r.source,
            r.target,
            r.detail,
        )


def _rollouts(
    facts: decide.ObservedFacts,
    ports: RoundPorts,
    rollout_ports: RolloutPorts,
    options: RoundOptions,
) -> RolloutRound:
    """The rollouts carried on as far as they go now, in a round that acts on a cluster
    observed completely once; otherwise only what they hold (nothing is done)."""
    from reconciler.engine.rollouts import RolloutRound, carry_out, look

    desired, snapshot = facts.desired, facts.snapshot
    if options.act and facts.history.observed_since is not None:
        hold = ports.hold

        def may_act() -> str | None:
            if hold is not None and not hold.valid():
                return "the hold on the cluster is no longer confirmed"
            return None

        return carry_out(
            desired,
            snapshot,
            rollout_ports,
            instance=options.instance,
            may_act=may_act,
            stop=options.stop,
        )
    try:
        return look(desired, snapshot, rollout_ports.records, ports.clock.now())
    except ReconcilerError as err:
        log.error("rollouts: %s", err)
        return RolloutRound(error=err)


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
    """Stamp the VMs ``core.next_actions.first_seen_stamps`` names on their domains; the
    snapshot with the stamps written, so later records of this round keep them."""
    stamped = {}
    for vm, record in decide.first_seen_stamps(snapshot, history, now):
        try:
            ports.recorder.record(vm.host, vm.name, record, uuid=vm.uuid)
        except ReconcilerError as err:
            log.warning("could not record first sighting of %s: %s", vm.name, err)
            continue
        stamped[(vm.host, vm.name)] = record
    if not stamped:
        return snapshot
    vms = [
        v.model_copy(update={"reconciler": stamped[(v.host, v.name)]})
        if (v.host, v.name) in stamped
        else v
        for v in snapshot.vms
    ]
    return snapshot.model_copy(update={"vms": vms})
