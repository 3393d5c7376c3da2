"""One reconcile round: observe -> plan -> admit -> execute -> record, status written once.

``run_round`` is what ``apply`` runs once and ``run`` runs in its loop. It talks to the world
only through the ports; the ReconcileStatus is written exactly once, in a ``finally``, whatever
happened (Flux's habit), so the next round and the people reading it see the streak, the
conditions and the last result even after an error.

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
from datetime import datetime

from reconciler.core import planner
from reconciler.engine.execute import Event, Execution, Ports
from reconciler.engine.ports import (
    Clock,
    DomainRecorder,
    Migrator,
    Observer,
    PlacementWriter,
    StatusStore,
)
from reconciler.errors import ReconcilerError, TerminalError, TransientError
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
    placement: PlacementWriter | None = None


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
    confirm: Callable[[Plan], bool] | None = None,
    stop: threading.Event | None = None,
    abort: threading.Event | None = None,
    on_event: Callable[[Event], None] = lambda e: None,
    on_plan: Callable[[Plan, Snapshot], None] = lambda p, s: None,
) -> RoundReport:
    """One round; ``act`` False plans and reports only. Errors end up in the status, re-raised."""
    stop = stop or threading.Event()
    abort = abort or threading.Event()
    started = ports.clock.now()
    previous = ports.status.load()
    report = RoundReport(status=previous or ReconcileStatus(cluster=_name(desired)))
    try:
        _round(desired, ports, report, previous, act, confirm, stop, abort, on_event, on_plan)
    except ReconcilerError as err:
        report.error = err
        raise
    finally:
        report.interrupted = stop.is_set()
        report.status = _status(
            desired, previous, report, started, ports.clock.now(), trigger, revision
        )
        ports.status.save(report.status)
    return report


def _name(desired: DesiredState) -> str:
    return desired.cluster.metadata.name


def _round(
    desired: DesiredState,
    ports: RoundPorts,
    report: RoundReport,
    previous: ReconcileStatus | None,
    act: bool,
    confirm: Callable[[Plan], bool] | None,
    stop: threading.Event,
    abort: threading.Event,
    on_event: Callable[[Event], None],
    on_plan: Callable[[Plan, Snapshot], None],
) -> None:
    snapshot = ports.observer.observe()
    report.snapshot = snapshot
    down = [h for h in snapshot.hosts if not h.reachable]
    if snapshot.hosts and len(down) == len(snapshot.hosts):
        lines = "; ".join(f"{h.name}: {h.error or 'unreachable'}" for h in down)
        raise TerminalError(
            f"no host could be observed ({lines})",
            hint="check that libvirtd runs on the hosts and is reachable",
        )
    history = previous.history() if previous is not None else History()
    now = ports.clock.now()
    complete = not down
    if history.observed_since is None and complete:
        history = history.model_copy(update={"observed_since": snapshot.taken_at})
    plan = planner.plan(desired, snapshot, history, now=now)
    report.plan = plan
    for line in _decisions(plan):
        log.info(line, extra={"plan_id": plan.plan_id})
    on_plan(plan, snapshot)
    if act and history.observed_since is not None:
        snapshot = _record_first_seen(ports, snapshot, history, now)
    if not act or not plan.moves:
        return
    if history.observed_since is None:
        log.warning(
            "not acting: the cluster has not been observed completely yet (%s down)",
            ", ".join(h.name for h in down),
        )
        return
    if confirm is not None and not confirm(plan):
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
        on_event=on_event,
    )
    report.results = execution.run()
    if ports.placement is not None:
        writes = placement_updates(desired, plan, report.results)
        if writes and ports.placement.write_placement(writes):
            report.placement_written = writes


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
                ports.recorder.record(vm.host, vm.name, record)
                vm = vm.model_copy(update={"reconciler": record})
            except ReconcilerError as err:
                log.warning("could not record first sighting of %s: %s", vm.name, err)
        vms.append(vm)
    return snapshot.model_copy(update={"vms": vms})


def placement_updates(
    desired: DesiredState, plan: Plan, results: list[MoveResult]
) -> dict[str, str]:
    """placement.yaml entries that follow what happened, so the next plan has nothing to undo.

    VMs listed in the Placement that moved move there too; drift adopted by the plan is written.
    """
    listed = desired.placement.spec.vms
    out: dict[str, str] = {}
    moved = {r.vm for r in results if r.outcome is MoveOutcome.SUCCEEDED}
    for r in results:
        if r.vm in moved and r.vm in listed and listed[r.vm] != r.target:
            out[r.vm] = r.target
    planned = {m.vm for m in plan.moves + plan.deferred}
    for vm, host in plan.placement.items():
        if vm in listed and listed[vm] != host and vm not in planned:
            out[vm] = host
    return out


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
