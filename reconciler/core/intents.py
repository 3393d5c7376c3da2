"""Migrations recorded as intents on their domains, resolved from where the VMs run.

Before a migration starts, the executor writes an intent on the domain (plan, source, target,
start time); after it ends, the outcome replaces it. An intent still there when a round begins
belongs to a migration whose outcome was never written (the reconciler was killed, or lost
its hold mid-move). It is resolved from the observation alone: the VM on the target is a move
(its cooldown starts), on the source a failure, on both still in flight (left alone), except a
cold move stopped between defining the VM on the target and undefining it on the source: shut
off on both hosts with the same intent, its target copy is discarded (the source was not
touched before the copy was verified) and the move recorded as failed on the source; such a
move (or a post-copy lost with its target's copy kept) whose VM a person started again on
its source: the same, the VM running where it was started; and a
live move libvirt ended after its call failed (running on the target, left shut off and
defined on the source): a move, the source's definition removed. A VM held by a post-copy,
going on or failed, is left alone: ``post_copy_failures`` says what to do with a failed one.

Every intent names its actor (the acting command and its machine, or a holder's identity), and
the record of a move says who made it. An intent of another actor that is still live (its VM in
flight, or written within ``FOREIGN_LIVE``) is left alone, and ``foreign`` lists it: an actor
that finds one does not act (``engine.round``), whatever its hold says. The shapes a stopped
move leaves on two hosts are another actor's to settle while its intent is young (it may be
between two of its steps), and settled as any other once it is older (that actor is gone).

Records dated after ``limit`` (a clock gone wrong) are dropped rather than trusted.

A move whose outcome reached the domain but whose record never reached the desired state (the
reconciler was killed before its audit commit, or the commit failed) leaves placement.yaml
naming the VM's old host. ``unrecorded_moves`` finds them, so the round records them late
instead of reverting its own move as drift, naming who made the move. An intent resolved as
a move (the reconciler killed between the end of the migration and its records) is recorded
too when placement already names the VM's new host (``resolved_moves``): the round is in sync
then, and nothing else would write that record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from reconciler.core import backoff
from reconciler.model.base import fields_of
from reconciler.model.plan import Unsatisfiable, UnsatisfiableCode
from reconciler.model.snapshot import (
    FailedMove,
    MigrationClass,
    MoveIntent,
    ReconcilerState,
    Snapshot,
    Unmigratable,
    UnmigratableReason,
    VmRunState,
    VmState,
)
from reconciler.model.status import MoveOutcome, MoveResult

FOREIGN_LIVE = timedelta(minutes=10)
"""How long another actor's intent on a VM seen on one host is taken for a move under way (the
time between writing it and the VM showing on its target, or between the end and its record);
older, it is a move its actor left behind, and resolved as any other."""

POST_COPY_FAILED: Final = "post-copy failed"
"""libvirt's reason for a VM whose post-copy failed (paused on its source, or on its target)."""
POST_COPY_REASONS: Final = frozenset({"post-copy", POST_COPY_FAILED})
"""libvirt's state reasons of a VM held by a post-copy migration (running or paused)."""


@dataclass(frozen=True)
class Resolution:
    """The record to write on ``vm`` (by ``uuid``) on ``host``, where it runs."""

    vm: str
    uuid: str
    host: str
    state: ReconcilerState
    summary: str
    discard_on: str | None = None
    """A host whose shut-off copy of the VM is to be removed before the record is written."""
    moved: MoveResult | None = None
    """The move the intent resolved into, when it happened: its audit record was never
    written (``resolved_moves``)."""


def without_future_records(snapshot: Snapshot, limit: datetime) -> tuple[Snapshot, list[str]]:
    """``snapshot`` with every record time after ``limit`` dropped, and a line per drop."""
    lines: list[str] = []
    changed: dict[int, VmState] = {}
    for i, seen in enumerate(snapshot.vms):
        r = fields_of(seen)["reconciler"]
        times = fields_of(r)  # the four times, read as cheaply as they can be
        first, moved, failure, intent = (
            times["first_seen"],
            times["last_moved_at"],
            times["last_failure"],
            times["intent"],
        )
        update: dict[str, object] = {}
        if first is not None and first > limit:
            update["first_seen"] = None
        if moved is not None and moved > limit:
            update |= {"last_moved_at": None, "last_moved_from": None, "last_moved_to": None}
        if failure is not None and failure.at > limit:
            update["last_failure"] = None
        if intent is not None and intent.started_at > limit:
            update["intent"] = None
        if not update:
            continue  # nearly every sighting: nothing in the future, nothing copied
        lines.append(f"{seen.name} on {seen.host}: {', '.join(sorted(update))}")
        changed[i] = seen.model_copy(update={"reconciler": r.model_copy(update=update)})
    if not changed:
        return snapshot, []
    vms = [changed.get(i, vm) for i, vm in enumerate(snapshot.vms)]
    return snapshot.model_copy(update={"vms": vms}), lines


def foreign(snapshot: Snapshot, actor: str | None, now: datetime) -> list[str]:
    """The live intents of other actors than ``actor``, one line each: an intent naming
    another actor whose VM is in flight (seen on two hosts), or that was written less than
    ``FOREIGN_LIVE`` before ``now``. An intent naming no actor, or ``actor``, is never one."""
    return sorted(set(_foreign(snapshot, actor, now).values()))


def _foreign(
    snapshot: Snapshot, actor: str | None, now: datetime, *, flying_counts: bool = True
) -> dict[str, str]:
    """VM name -> the line of its live intent of another actor (``foreign``); without
    ``flying_counts``, of its intent written within ``FOREIGN_LIVE`` alone."""
    theirs = [
        (vm, intent)
        for vm in snapshot.vms
        if (intent := vm.reconciler.intent) is not None
        and intent.actor is not None
        and intent.actor != actor
    ]
    if not theirs:  # the common case: no other actor's intent, no sighting counted
        return {}
    flying: set[str] = set()
    if flying_counts:
        seen: dict[str, int] = {}
        for vm in snapshot.vms:
            seen[vm.name] = seen.get(vm.name, 0) + 1
        flying = {f.name for f in snapshot.in_flight} | {n for n, c in seen.items() if c > 1}
    out: dict[str, str] = {}
    for vm, intent in theirs:
        if vm.name in flying or now - intent.started_at < FOREIGN_LIVE:
            out[vm.name] = (
                f"{intent.actor} is moving {vm.name} {intent.source} -> {intent.target} "
                f"(since {intent.started_at.isoformat(timespec='seconds')})"
            )
    return out


def resolved(
    snapshot: Snapshot, now: datetime, actor: str | None = None
) -> tuple[Snapshot, list[Resolution]]:
    """``snapshot`` with every settled intent resolved, and the records to write for them; a
    live intent of another actor than ``actor`` (``foreign``) is not settled, nor one of its
    stopped moves' shapes while its intent is younger than ``FOREIGN_LIVE``."""
    # Only a VM with an intent on one of its sightings has anything to settle: the others
    # (all of them, most rounds) are not grouped by name at all.
    named = {vm.name for vm in snapshot.vms if vm.reconciler.intent is not None}
    if not named:
        return snapshot, []
    live = _foreign(snapshot, actor, now)
    # A stopped move's shapes are on two hosts by nature: another actor's is left alone while
    # its intent is young (that actor may be between two of its steps), and settled as any
    # other once it is older (that actor is gone), or it would hold the cluster for good.
    young = _foreign(snapshot, actor, now, flying_counts=False)
    sightings: dict[str, list[VmState]] = {}
    for vm in snapshot.vms:
        if vm.name in named:
            sightings.setdefault(vm.name, []).append(vm)
    in_flight = {f.name for f in snapshot.in_flight}
    out: list[Resolution] = []
    replaced: dict[tuple[str, str], VmState] = {}
    halves: set[str] = set()
    for name, seen in sightings.items():
        if any(v.state_reason in POST_COPY_REASONS for v in seen):
            continue  # held by a post-copy, going on or failed: see post_copy_failures
        lost = _lost_leaving_a_copy(seen) if name not in young else None
        if lost is not None:  # the copy goes; the source's sighting is then lost as below
            source, left = lost
            summary = (
                f"its post-copy to {left.host} was lost (shut off as migrated on {source.host}); "
                f"the copy {left.host}'s daemon left defined there, shut off, is removed"
            )
            out.append(
                Resolution(name, source.uuid, source.host, source.reconciler, summary, left.host)
            )
            halves.add(name)
            replaced[(name, source.host)] = _held_where_it_is(source)
            continue
        if _ended_out_of_sight(seen):
            replaced[(name, seen[0].host)] = _held_where_it_is(seen[0])
            continue
        if name in young:
            continue  # another actor's move under way: theirs to settle
        half = (
            _half_cold_move(seen) or _settled_live_move(seen, now) or _started_again_on_source(seen)
        )
        if half is not None:
            out.append(half)
            halves.add(name)
            source = next(v for v in seen if v.host == half.host)
            replaced[(name, half.host)] = source.model_copy(update={"reconciler": half.state})
            continue
        if len(seen) != 1 or name in in_flight or name in live:
            continue  # in flight, not seen, or another actor's move: nothing is settled yet
        vm = seen[0]
        intent = vm.reconciler.intent
        if intent is None:
            continue
        old = vm.reconciler
        moved: MoveResult | None = None
        if vm.host == intent.target:
            state = backoff.recorded(
                old.model_copy(update={"intent": None}),
                reason=intent.reason or "",
                source=intent.source,
                target=intent.target,
                at=now,
                plan_id=intent.plan_id,
                actor=intent.actor,
            )
            summary = f"it runs on {intent.target}: moved from {intent.source}"
            moved = _moved(vm.name, intent)
        elif vm.host == intent.source:
            failure = FailedMove(
                at=intent.started_at,
                source=intent.source,
                target=intent.target,
                plan_id=intent.plan_id,
                error="its outcome was never recorded (the reconciler stopped mid-move); "
                "the VM stayed on the source",
            )
            state = old.model_copy(update={"intent": None, "last_failure": failure})
            summary = f"it still runs on {intent.source}: recorded as failed"
        else:
            state = old.model_copy(update={"intent": None})
            summary = f"it runs on {vm.host}, moved by someone else"
        out.append(Resolution(vm.name, vm.uuid, vm.host, state, summary, moved=moved))
        replaced[(vm.name, vm.host)] = vm.model_copy(update={"reconciler": state})
    if not replaced:
        return snapshot, []
    discarded = {(r.vm, r.discard_on) for r in out if r.discard_on is not None}
    vms = [replaced.get((v.name, v.host), v) for v in snapshot.vms]
    vms = [v for v in vms if (v.name, v.host) not in discarded]
    flights = [f for f in snapshot.in_flight if f.name not in halves]
    return snapshot.model_copy(update={"vms": vms, "in_flight": flights}), out


def _on_both_ends(seen: list[VmState]) -> tuple[MoveIntent, VmState, VmState] | None:
    """The intent, and the VM on its source and on its target, when ``seen`` is one VM seen on
    exactly those two hosts with the same intent on both; else None."""
    if len(seen) != 2 or seen[0].uuid != seen[1].uuid:
        return None
    intent = seen[0].reconciler.intent
    if intent is None or seen[1].reconciler.intent != intent:
        return None
    by_host: dict[str, VmState] = {v.host: v for v in seen}
    source, target = by_host.get(intent.source), by_host.get(intent.target)
    if source is None or target is None:
        return None
    return intent, source, target


def _half_cold_move(seen: list[VmState]) -> Resolution | None:
    """The resolution of a cold move stopped with the VM defined on both of its hosts."""
    ends = _on_both_ends(seen)
    if ends is None:
        return None
    intent, source, target = ends
    if any(v.state is not VmRunState.SHUTOFF for v in seen):
        return None  # one was started since: see _started_again_on_source, _settled_live_move
    return _failed_leaving_a_copy(
        source,
        intent,
        "the cold move stopped after defining the VM on the target; "
        "its copy there was removed, the VM stays on the source",
        f"a cold move to {intent.target} stopped midway: its copy there is removed, "
        f"it stays on {intent.source}",
    )


def _started_again_on_source(seen: list[VmState]) -> Resolution | None:
    """The resolution of a move that stopped with its VM shut off on both hosts (a cold move
    stopped midway, or a post-copy lost on the way whose target kept its copy), the VM then
    started again on its source by a person before a round removed the copy: one VM (one
    uuid) running on the source of its unresolved move and shut off on that move's target.
    The VM is where it runs: the move is recorded as failed there and the target's copy
    removed, so it is defined exactly once again and the copy is never started beside it."""
    if len(seen) != 2 or seen[0].uuid != seen[1].uuid:
        return None
    on_source = [v for v in seen if v.reconciler.intent and v.reconciler.intent.source == v.host]
    if len(on_source) != 1:
        return None
    (source,) = on_source
    intent = source.reconciler.intent
    assert intent is not None
    (left,) = (v for v in seen if v is not source)
    if (
        source.state is not VmRunState.RUNNING
        or left.host != intent.target
        or left.state is not VmRunState.SHUTOFF
        or left.reconciler.intent not in (None, intent)
    ):
        return None
    return _failed_leaving_a_copy(
        source,
        intent,
        "the move stopped with the VM shut off, and it was started again on the source; "
        "its copy on the target was removed",
        f"its move to {intent.target} stopped and it was started again on {intent.source}: "
        f"the copy left shut off on {intent.target} is removed, recorded as failed",
    )


def _failed_leaving_a_copy(
    source: VmState, intent: MoveIntent, error: str, summary: str
) -> Resolution:
    """The move of ``intent`` recorded as failed on ``source`` (its intent cleared), with the
    copy it left on its target to remove."""
    failure = FailedMove(
        at=intent.started_at,
        source=intent.source,
        target=intent.target,
        plan_id=intent.plan_id,
        error=error,
    )
    state = source.reconciler.model_copy(update={"intent": None, "last_failure": failure})
    return Resolution(
        source.name, source.uuid, source.host, state, summary, discard_on=intent.target
    )


def _ended_out_of_sight(seen: list[VmState]) -> bool:
    """A VM seen only on the source of its unresolved move, shut off as migrated: its
    migration ended there (a post-copy whose target's daemon was killed, say) while it runs on
    no host seen; it is not a failure to record on the source, nor a VM to move."""
    if len(seen) != 1:
        return False
    vm = seen[0]
    intent = vm.reconciler.intent
    return (
        intent is not None
        and vm.host == intent.source
        and vm.state is VmRunState.SHUTOFF
        and vm.state_reason == "migrated"
    )


def _lost_leaving_a_copy(seen: list[VmState]) -> tuple[VmState, VmState] | None:
    """(source, target) of a VM lost with its post-copy whose target's restarted daemon left
    its copy defined there, shut off: one VM (one uuid) seen on the source of its unresolved
    move, shut off as migrated, and on that move's target, shut off; else None."""
    if len(seen) != 2 or seen[0].uuid != seen[1].uuid:
        return None
    source = next((v for v in seen if _ended_out_of_sight([v])), None)
    if source is None:
        return None
    intent = source.reconciler.intent
    assert intent is not None
    (left,) = (v for v in seen if v is not source)
    if left.host != intent.target or left.state is not VmRunState.SHUTOFF:
        return None
    return source, left


def _lost_source(seen: list[VmState]) -> VmState | None:
    """The source's sighting of a VM whose post-copy ended there while it runs on no host
    seen (alone, or beside the shut-off copy its target's daemon left), else None."""
    if _ended_out_of_sight(seen):
        return seen[0]
    lost = _lost_leaving_a_copy(seen)
    return lost[0] if lost is not None else None


def _held_where_it_is(vm: VmState) -> VmState:
    blocker = Unmigratable(
        code=UnmigratableReason.IN_FLIGHT,
        detail="its migration ended on its source but it runs on no host seen",
    )
    return vm.model_copy(
        update={
            "migratable": False,
            "unmigratable": [blocker],
            "migration_class": MigrationClass.IMMOVABLE,
            "migration_reasons": [blocker.detail],
        }
    )


def out_of_sight_held(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with every VM whose migration ended out of sight (``_lost_source``: alone
    on its source, or beside the shut-off copy its target kept) made immovable, every sighting
    of it, as ``resolved`` leaves it: for a plan made without resolving intents."""
    named = {
        v.name
        for v in snapshot.vms
        if v.reconciler.intent is not None and v.state_reason == "migrated"
    }
    if not named:
        return snapshot  # the common case, decided without grouping the sightings
    seen: dict[str, list[VmState]] = {}
    for vm in snapshot.vms:
        if vm.name in named:
            seen.setdefault(vm.name, []).append(vm)
    lost = {name for name, sightings in seen.items() if _lost_source(sightings) is not None}
    vms = [_held_where_it_is(v) if v.name in lost else v for v in snapshot.vms]
    return snapshot.model_copy(update={"vms": vms})


def _settled_live_move(seen: list[VmState], now: datetime) -> Resolution | None:
    """The resolution of a live move libvirt ended after its call had failed (a post-copy
    whose source's daemon lost the target's, say): running on the target, shut off but still
    defined on the source, both with the same intent. The move is recorded and the source's
    leftover definition removed."""
    ends = _on_both_ends(seen)
    if ends is None:
        return None
    intent, source, target = ends
    if source.state is not VmRunState.SHUTOFF or target.state is not VmRunState.RUNNING:
        return None
    state = backoff.recorded(
        target.reconciler.model_copy(update={"intent": None}),
        reason=intent.reason or "",
        source=intent.source,
        target=intent.target,
        at=now,
        plan_id=intent.plan_id,
    )
    summary = (
        f"it runs on {intent.target}, its definition left shut off on {intent.source}: "
        f"moved, the leftover definition removed"
    )
    return Resolution(
        target.name,
        target.uuid,
        target.host,
        state,
        summary,
        discard_on=intent.source,
        moved=_moved(target.name, intent),
    )


def post_copy_failures(snapshot: Snapshot) -> list[Unsatisfiable]:
    """VMs a failed post-copy left split between two hosts (or paused on its source with the
    rest of its memory gone), each with what a person must do. The reconciler neither resumes
    such a VM on its source nor moves it; its migrator resumes a post-copy libvirt reports
    failed on both hosts once, while the move runs."""
    # Only a VM with a sighting failed by a post-copy or shut off as migrated can be one:
    # the others (all of them, most rounds) are not grouped by name at all.
    named = {
        vm.name
        for vm in snapshot.vms
        if vm.state_reason == POST_COPY_FAILED
        or (vm.state_reason == "migrated" and vm.reconciler.intent is not None)
    }
    if not named:
        return []
    uris: dict[str, str] = {h.name: h.uri for h in snapshot.hosts}
    reachable: set[str] = {h.name for h in snapshot.hosts if h.reachable}
    by_name: dict[str, list[VmState]] = {}
    for vm in snapshot.vms:
        if vm.name in named:
            by_name.setdefault(vm.name, []).append(vm)
    out: list[Unsatisfiable] = []
    for name, seen in sorted(by_name.items()):
        failed = [v for v in seen if v.state_reason == POST_COPY_FAILED]
        source_seen = _lost_source(seen)
        if source_seen is not None:
            out.append(_out_of_sight(source_seen, uris, reachable, left=len(seen) > 1))
            continue
        if not failed:
            continue
        intent = next((v.reconciler.intent for v in seen if v.reconciler.intent), None)
        paused = next((v for v in failed if v.state is VmRunState.PAUSED), failed[0])
        source = intent.source if intent is not None else paused.host
        others = [v.host for v in seen if v.host != source]
        target = intent.target if intent is not None else (others[0] if others else "?")
        on_target = target in others
        if on_target or target not in reachable:
            todo = (
                f"{name}'s memory is split between {source} (paused) and {target} by a failed "
                f"post-copy; do not resume or start it on {source}; once both hosts answer, "
                f"resume the migration: virsh -c {uris.get(source, source)} migrate --live "
                f"--p2p --persistent --undefinesource --postcopy --postcopy-resume {name} "
                f"{uris.get(target, target)}"
            )
        else:
            todo = (
                f"{name} is paused on {source} by a failed post-copy and {target} no longer "
                f"holds it: the memory it had fetched is lost; restart it on {source} (virsh -c "
                f"{uris.get(source, source)} destroy {name}; virsh -c {uris.get(source, source)} "
                f"start {name}), it boots afresh; never resume it"
            )
        out.append(Unsatisfiable(code=UnsatisfiableCode.POST_COPY_FAILED, vms=[name], message=todo))
    return out


def _out_of_sight(
    vm: VmState, uris: dict[str, str], reachable: set[str], left: bool = False
) -> Unsatisfiable:
    intent = vm.reconciler.intent
    assert intent is not None
    source, target, uri = intent.source, intent.target, uris.get(intent.source, intent.source)
    if target in reachable:
        todo = (
            f"{vm.name}'s migration to {target} ended on {source} (shut off as migrated), but "
            f"{target} does not run it: it was lost with its post-copy; start it again on "
            f"{source} (virsh -c {uri} start {vm.name}), it boots afresh"
        )
        if left:
            todo += (
                f"; the copy {target} left defined, shut off, is removed by the next round "
                f"that acts (never start it there)"
            )
    else:
        todo = (
            f"{vm.name}'s migration to {target} ended on {source} (shut off as migrated) while "
            f"{target} does not answer: it may run there; wait for {target} to answer, and do "
            f"not start it on {source} before"
        )
    return Unsatisfiable(code=UnsatisfiableCode.POST_COPY_FAILED, vms=[vm.name], message=todo)


def _moved(vm: str, intent: MoveIntent) -> MoveResult:
    """The record of the move ``intent`` announced, found done from where its VM runs."""
    by = f"moved by {intent.actor} " if intent.actor else "moved "
    return MoveResult(
        vm=vm,
        source=intent.source,
        target=intent.target,
        outcome=MoveOutcome.SUCCEEDED,
        reason="RecordedLate",
        detail=f"{by}from {intent.started_at.isoformat(timespec='seconds')}"
        + (f" ({intent.reason})" if intent.reason else "")
        + "; its end and its record were not written then",
        started_at=intent.started_at,
    )
