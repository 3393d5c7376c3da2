"""What a round does, decided before it does anything: facts and time in, actions out.

A round is two pure decisions with the world between them (Neon's ``NextActions(now)``):

1. :func:`observed_facts` - from an observation: records dated in the future dropped, intents
   resolved from where each VM runs (the resolutions to write back), VMs on two hosts held,
   the reconciler's own moves that placement.yaml does not follow yet (recorded late, never
   reverted), and since when the cluster has been observed completely.
2. :func:`next_actions` - from those facts and what the rollouts hold out (the engine carries
   the rollouts on between the two): the plan, whether the round acts, and if not, why
   (never before a complete observation; never while another actor's intents are live),
   whether it asks a person first, and whether it counts (writes status, resolutions and
   first sightings).

``engine/round.py`` observes, calls both, carries the rollouts and the actions out and
records; ``simulate`` calls the same two functions on a simulated cluster.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from reconciler.core import duplicates, intents, late_moves, planner, rounds
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.plan import Plan
from reconciler.model.snapshot import HostState, ReconcilerState, Snapshot, VmState
from reconciler.model.status import Duplicate, MoveResult, ReconcileStatus


@dataclass(frozen=True)
class ObservedFacts:
    """An observation made fit to decide on, and what it owes the world."""

    desired: DesiredState
    """The desired state, following the late moves (in memory: their record makes it so)."""
    snapshot: Snapshot
    """Intents resolved, duplicates held: what the plan decides from."""
    recorded: Snapshot
    """The observation with only the records dated in the future dropped: the records as the
    domains carry them (an intent kept when its resolution cannot be written)."""
    distrusted: list[str]
    """Records dated in the future, ignored (one line each)."""
    resolutions: list[intents.Resolution]
    """Intents to write back as resolved, when the round counts."""
    duplicates: list[Duplicate]
    late: list[MoveResult]
    """The reconciler's own moves placement.yaml does not follow: recorded, not reverted."""
    history: History
    down: list[HostState]
    """Hosts that did not answer."""


def observed_facts(
    desired: DesiredState,
    observed: Snapshot,
    previous: ReconcileStatus | None,
    *,
    now: datetime,
    actor: str | None,
    placement_changed_at: datetime | None,
    asleep: Collection[str] = (),
) -> ObservedFacts:
    """The facts a round decides on, from its observation and the status the last left;
    ``asleep``: hosts powered off on purpose (power saving), known not to answer."""
    sane, distrusted = intents.without_future_records(observed, now + rounds.SKEW_TOLERANCE)
    snapshot, resolutions = intents.resolved(sane, now, actor)
    found = duplicates.found(snapshot)
    if found:
        snapshot = duplicates.held(snapshot, found)
    late = late_moves.unrecorded_moves(desired.placement.spec.vms, snapshot, placement_changed_at)
    late = late_moves.resolved_moves(desired.placement.spec.vms, late, resolutions)
    late = late_moves.owed_moves(desired.placement.spec.vms, snapshot, late)
    if late:
        desired = late_moves.following(desired, late)
    down = [h for h in observed.hosts if not h.reachable and h.name not in asleep]
    history = previous.history() if previous is not None else History()
    if history.observed_since is None and not down:
        history = history.model_copy(update={"observed_since": snapshot.taken_at})
    return ObservedFacts(
        desired=desired,
        snapshot=snapshot,
        recorded=sane,
        distrusted=distrusted,
        resolutions=resolutions,
        duplicates=found,
        late=late,
        history=history,
        down=down,
    )


@dataclass(frozen=True)
class RolloutHolds:
    """What the rollouts left for the plan, after the engine carried them on."""

    snapshot: Snapshot | None = None
    """The snapshot with the hosts they looked at again (None: unchanged)."""
    out: tuple[str, ...] = ()
    """Hosts held out: drained, and no VM moves to them."""
    keep_out: tuple[str, ...] = ()
    """Hosts no balance move may fill."""
    unreadable: str | None = None
    """Their records could not be read (and nothing was decided): everything is held back."""


@dataclass(frozen=True)
class NextActions:
    """What the round does now."""

    plan: Plan
    planned: DesiredState
    """The desired state the plan was made for (the rollouts' hosts held out)."""
    snapshot: Snapshot
    """The snapshot the plan was made from."""
    act: bool
    """Execute the plan's moves (once confirmed, when ``ask``)."""
    ask: bool
    """A person (or the caller) confirms before the moves start; "no" makes the round a look."""
    refusal: str | None
    """Why a round asked to act, with moves, does not act."""
    counts: bool
    """The round writes: its status, the resolutions, the first sightings. Asked rounds count
    once confirmed."""


def next_actions(
    facts: ObservedFacts,
    *,
    act: bool,
    holds: bool,
    confirm: bool,
    actor: str | None,
    now: datetime,
    rollouts: RolloutHolds | None = None,
) -> NextActions:
    """What a round does with ``facts``: ``act`` it was asked to move VMs, ``holds`` the
    caller holds the cluster (its status counts), ``confirm`` a person confirms the moves."""
    snapshot, planned = facts.snapshot, facts.desired
    refusal: str | None = None
    if rollouts is not None:
        if rollouts.unreadable is not None:
            act = False
            refusal = f"the rollouts' records could not be read: {rollouts.unreadable}"
        if rollouts.snapshot is not None:
            snapshot = rollouts.snapshot
        # imported here: a cluster without rollouts never loads the rollout modules
        from reconciler.core.rollout_vms import during_rollouts

        planned = during_rollouts(facts.desired, rollouts.out, rollouts.keep_out)
    plan = planner.plan(planned, snapshot, facts.history, now=now)
    moves = bool(plan.moves)
    ready = act and moves and facts.history.observed_since is not None
    if act and moves and facts.history.observed_since is None:
        refusal = not_observed(facts.down)
    others = intents.foreign(snapshot, actor, now) if ready else []
    if others:  # whatever the holds say, two actors never move VMs at once
        ready = False
        refusal = "another actor is moving VMs of this cluster: " + "; ".join(others)
    return NextActions(
        plan=plan,
        planned=planned,
        snapshot=snapshot,
        act=ready,
        ask=ready and confirm,
        refusal=refusal,
        counts=holds or ready,
    )


def not_observed(down: Sequence[HostState]) -> str:
    """Why nothing moves before the cluster was observed completely once."""
    return (
        "the cluster has not been observed completely yet ("
        + ", ".join(f"{h.name}: {h.error or 'unreachable'}" for h in down)
        + ")"
    )


def with_kept_intents(snapshot: Snapshot, recorded: Snapshot, kept: set[str]) -> Snapshot:
    """``snapshot`` with the records of the VMs ``kept`` as ``recorded`` carries them: their
    resolutions could not be written (a copy that could not be removed), so their intents
    stay for the next round."""
    if not kept:
        return snapshot
    records = {(v.name, v.host): v.reconciler for v in recorded.vms}
    vms = [
        v.model_copy(update={"reconciler": records[(v.name, v.host)]})
        if v.name in kept and (v.name, v.host) in records
        else v
        for v in snapshot.vms
    ]
    return snapshot.model_copy(update={"vms": vms})


def first_seen_stamps(
    snapshot: Snapshot, history: History, now: datetime
) -> list[tuple[VmState, ReconcilerState]]:
    """The VMs seen for the first time and the record that stamps them: a VM there at the
    first complete observation is old (stamped with that time), one seen later is new (now).
    Nothing before the cluster was observed completely."""
    since = history.observed_since
    if since is None:
        return []
    first = since if since >= snapshot.taken_at else now
    return [
        (vm, vm.reconciler.model_copy(update={"first_seen": first}))
        for vm in snapshot.vms
        if vm.reconciler.first_seen is None and vm.persistent
    ]
