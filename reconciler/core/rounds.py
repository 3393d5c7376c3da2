"""Pure decisions at the end of a reconcile round; the engine sequences them, nothing here acts.

- :func:`trusted_status`: the previous round's status, unless it is dated in the future (clock
  skew): then the imbalance streaks restart rather than trusting it.
- :func:`round_status`: the ReconcileStatus a round leaves (Flux's conditions Ready,
  Reconciling and Stalled, the last result, the streaks), from what it did (:class:`RoundFacts`).
- :func:`status_not_ready`: a status made not Ready after the fact (its record failed, or a
  person changed an entry it wrote).
- :func:`with_duplicates`: the Duplicated condition of the VMs the status lists on two hosts
  (``core.duplicates``), Ready False while there are any.
- :func:`placement_updates`: the placement.yaml entries that follow what the round did.
- :func:`snapshot_after_moves`: the round's observation with the VMs it moved on their targets,
  for the step that runs after it (dead-host recovery).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from reconciler.core import duplicates as copies
from reconciler.core.hugepages import pages_moved
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Plan
from reconciler.model.snapshot import Snapshot
from reconciler.model.status import (
    Condition,
    ConditionType,
    Duplicate,
    MoveOutcome,
    MoveResult,
    ReconcileStatus,
    RoundOutcome,
    RoundResult,
    with_condition,
)

SKEW_TOLERANCE = timedelta(minutes=5)
"""How far in the future a record may be dated before it is distrusted (clock skew)."""


@dataclass(frozen=True)
class RoundFailure:
    """The error that ended a round, as the status tells it."""

    reason: str
    """The condition's reason: the error's kind (``HostUnreachable``, ``TerminalError``)."""
    message: str
    transient: bool
    """Retrying may help (a host or remote not answering): not Stalled."""


@dataclass(frozen=True)
class RoundFacts:
    """What one round did, as far as it got."""

    plan: Plan | None = None
    snapshot: Snapshot | None = None
    results: list[MoveResult] = field(default_factory=list)
    acted: bool = False
    """Its moves were started (the executor ran)."""
    interrupted: bool = False
    failure: RoundFailure | None = None
    duplicates: list[Duplicate] = field(default_factory=list)
    """VMs its observation found on two hosts (``core.duplicates.found``)."""


def trusted_status(status: ReconcileStatus | None, now: datetime) -> ReconcileStatus | None:
    """``status``, unless a time in it is after ``now`` + ``SKEW_TOLERANCE`` (then None)."""
    if status is None:
        return None
    dated = [t for t in (status.last_observed_at, status.observed_since) if t is not None]
    if status.last_result is not None:
        dated.append(status.last_result.finished_at)
    if any(t > now + SKEW_TOLERANCE for t in dated):
        return None
    return status


def _outcome(facts: RoundFacts) -> tuple[RoundOutcome, str]:
    plan = facts.plan
    counts = {o: sum(r.outcome is o for r in facts.results) for o in MoveOutcome}
    bad = counts[MoveOutcome.FAILED] + counts[MoveOutcome.SKIPPED] + counts[MoveOutcome.ABORTED]
    if facts.failure is not None:
        return RoundOutcome.FAILED, facts.failure.message
    if plan is None or not (plan.moves or plan.deferred):
        return RoundOutcome.IN_SYNC, "nothing to move"
    if not facts.acted:
        return RoundOutcome.PLANNED, f"{len(plan.moves)} move(s) planned, none run"
    if bad or facts.interrupted:
        return RoundOutcome.PARTIAL, (
            f"{counts[MoveOutcome.SUCCEEDED]} moved, {counts[MoveOutcome.FAILED]} failed, "
            f"{counts[MoveOutcome.SKIPPED]} skipped, {counts[MoveOutcome.ABORTED]} aborted"
            + (" (interrupted)" if facts.interrupted else "")
        )
    return RoundOutcome.APPLIED, f"{counts[MoveOutcome.SUCCEEDED]} moved"


def round_status(
    desired: DesiredState,
    previous: ReconcileStatus | None,
    facts: RoundFacts,
    *,
    started: datetime,
    finished: datetime,
    trigger: str,
    revision: str | None,
) -> ReconcileStatus:
    """The status after a round that did ``facts``, following ``previous`` (None: the first).

    A failed round is not Ready and not Reconciling, and Stalled unless its error is transient;
    otherwise Ready when it is in sync or applied everything with nothing deferred, and
    Reconciling (``MovesPending``) while moves remain.
    """
    name = desired.cluster.metadata.name
    base = previous or ReconcileStatus(cluster=name)
    plan, snap = facts.plan, facts.snapshot
    complete = snap is not None and all(h.reachable for h in snap.hosts)
    observed_since = base.observed_since
    if observed_since is None and complete and snap is not None:
        observed_since = snap.taken_at
    outcome, message = _outcome(facts)
    conditions = list(base.conditions)
    failure = facts.failure
    if failure is not None:
        reason = failure.reason
        conditions = with_condition(
            conditions, ConditionType.READY, False, reason, message, finished
        )
        conditions = with_condition(
            conditions, ConditionType.STALLED, not failure.transient, reason, message, finished
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
    found = base.duplicates
    if snap is not None:  # and what it could not settle of the last one's
        found = list(facts.duplicates)
        seen = {d.uuid for d in found}
        found += [d for d in copies.carried(base.duplicates, snap) if d.uuid not in seen]
    if plan is not None and plan.load is not None:
        conditions = _load_condition(conditions, plan, finished)
    return base.model_copy(
        update={
            "cluster": name,
            "duplicates": found,
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
                moves=facts.results,
            ),
            "next_round_at": finished + desired.policy.spec.interval,
        }
    )


def _load_condition(conditions: list[Condition], plan: Plan, at: datetime) -> list[Condition]:
    """LoadKnown: false while some VM's or host's load over the window is unknown."""
    load = plan.load
    assert load is not None
    vms, hosts = load.unknown_vms, load.unknown_hosts
    if load.problem is not None:
        return with_condition(
            conditions, ConditionType.LOAD_KNOWN, False, "LoadSourceFailed", load.problem, at
        )
    if load.out_of_range:
        named = [f"{vm} ({why})" for vm, why in list(load.out_of_range.items())[:5]]
        message = (
            f"the CPU figures of {len(load.out_of_range)} VM(s) are out of range, not used; "
            f"balance leaves their hosts alone: {'; '.join(named)}"
            + ("; ..." if len(load.out_of_range) > 5 else "")
        )
        return with_condition(
            conditions, ConditionType.LOAD_KNOWN, False, "OutOfRange", message, at
        )
    if vms or hosts:
        message = (
            f"the load over the window of {len(vms)} VM(s) and {len(hosts)} host(s) is "
            f"unknown, balance leaves them alone: {', '.join((vms or hosts)[:10])}"
            + (", ..." if len(vms or hosts) > 10 else "")
        )
        return with_condition(
            conditions, ConditionType.LOAD_KNOWN, False, "WindowMissing", message, at
        )
    if load.basis == "sample":
        return with_condition(
            conditions, ConditionType.LOAD_KNOWN, True, "ShortSample", load.note or "", at
        )
    return with_condition(conditions, ConditionType.LOAD_KNOWN, True, "Window", "", at)


def status_not_ready(
    status: ReconcileStatus, reason: str, message: str, at: datetime
) -> ReconcileStatus:
    """``status`` with Ready False for ``reason``, its other conditions as they were."""
    conditions = with_condition(status.conditions, ConditionType.READY, False, reason, message, at)
    return status.model_copy(update={"conditions": conditions})


def with_duplicates(
    status: ReconcileStatus, previous: ReconcileStatus | None, at: datetime
) -> ReconcileStatus:
    """``status`` with its Duplicated condition: True, naming them, while it lists VMs on two
    hosts, and then Ready False too (``Duplicated``, not Ready since ``previous`` was not);
    False (``NoDuplicates``) otherwise."""
    found = status.duplicates
    message = copies.summary(found)
    conditions = with_condition(
        status.conditions,
        ConditionType.DUPLICATED,
        bool(found),
        "Duplicated" if found else "NoDuplicates",
        message,
        at,
    )
    if found:
        was = previous.condition(ConditionType.READY) if previous is not None else None
        since = was.last_transition if was is not None and not was.status else at
        conditions = with_condition(
            conditions, ConditionType.READY, False, "Duplicated", message, since
        )
    return status.model_copy(update={"conditions": conditions})


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


def snapshot_after_moves(snapshot: Snapshot, results: list[MoveResult]) -> Snapshot:
    """``snapshot`` with the VMs moved successfully on their targets (their huge pages too)."""
    moved = {r.vm: r.target for r in results if r.outcome is MoveOutcome.SUCCEEDED}
    if not moved:
        return snapshot
    vms = [
        v.model_copy(update={"host": moved[v.name]}) if v.name in moved else v for v in snapshot.vms
    ]
    went = [(v, moved[v.name]) for v in snapshot.vms if v.name in moved]
    hosts = pages_moved(snapshot.hosts, went)  # rooms stay: the pages went with the VMs
    return snapshot.model_copy(update={"vms": vms, "hosts": hosts})
