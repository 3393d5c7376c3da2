"""Intents resolved only for the VMs that carry one: the same snapshot and resolutions as
resolving every VM's sightings.

A round resolves intents on every sighting (15,000 at 1,000 hosts), and almost never finds
one: ``intents.resolved`` groups only the names with an intent on one of their sightings, and
``foreign`` counts sightings only when another actor's intent is there. Checked here against
the two as they were written before, on generated clusters mixing VMs without intents with
moves stopped in every shape (on their source, their target, both, shut off, lost as
migrated, of this actor or another, young or old).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core import backoff, duplicates, intents
from reconciler.model.snapshot import (
    FailedMove,
    InFlight,
    MoveIntent,
    ReconcilerState,
    Snapshot,
    VmRunState,
    VmState,
)
from reconciler.model.status import Duplicate, MoveResult
from tests.core.builders import NOW, host_state
from tests.core.builders import vm as a_vm


def straight_foreign(
    snapshot: Snapshot, actor: str | None, now: datetime, *, flying_counts: bool = True
) -> dict[str, str]:
    """VM name -> the line of its live intent of another actor (``foreign``); without
    ``flying_counts``, of its intent written within ``FOREIGN_LIVE`` alone."""
    flying: set[str] = set()
    if flying_counts:
        seen: dict[str, int] = {}
        for vm in snapshot.vms:
            seen[vm.name] = seen.get(vm.name, 0) + 1
        flying = {f.name for f in snapshot.in_flight} | {n for n, c in seen.items() if c > 1}
    out: dict[str, str] = {}
    for vm in snapshot.vms:
        intent = vm.reconciler.intent
        if intent is None or intent.actor is None or intent.actor == actor:
            continue
        if vm.name in flying or now - intent.started_at < intents.FOREIGN_LIVE:
            out[vm.name] = (
                f"{intent.actor} is moving {vm.name} {intent.source} -> {intent.target} "
                f"(since {intent.started_at.isoformat(timespec='seconds')})"
            )
    return out


def straight_resolved(
    snapshot: Snapshot, now: datetime, actor: str | None = None
) -> tuple[Snapshot, list[intents.Resolution]]:
    """``snapshot`` with every settled intent resolved, and the records to write for them; a
    live intent of another actor than ``actor`` (``foreign``) is not settled, nor one of its
    stopped moves' shapes while its intent is younger than ``FOREIGN_LIVE``."""
    live = straight_foreign(snapshot, actor, now)
    # A stopped move's shapes are on two hosts by nature: another actor's is left alone while
    # its intent is young (that actor may be between two of its steps), and settled as any
    # other once it is older (that actor is gone), or it would hold the cluster for good.
    young = straight_foreign(snapshot, actor, now, flying_counts=False)
    sightings: dict[str, list[VmState]] = {}
    for vm in snapshot.vms:
        sightings.setdefault(vm.name, []).append(vm)
    in_flight = {f.name for f in snapshot.in_flight}
    out: list[intents.Resolution] = []
    replaced: dict[tuple[str, str], VmState] = {}
    halves: set[str] = set()
    for name, seen in sightings.items():
        if any(v.state_reason in intents.POST_COPY_REASONS for v in seen):
            continue  # held by a post-copy, going on or failed: see post_copy_failures
        lost = intents._lost_leaving_a_copy(seen) if name not in young else None
        if lost is not None:  # the copy goes; the source's sighting is then lost as below
            source, left = lost
            summary = (
                f"its post-copy to {left.host} was lost (shut off as migrated on {source.host}); "
                f"the copy {left.host}'s daemon left defined there, shut off, is removed"
            )
            out.append(
                intents.Resolution(
                    name, source.uuid, source.host, source.reconciler, summary, left.host
                )
            )
            halves.add(name)
            replaced[(name, source.host)] = intents._held_where_it_is(source)
            continue
        if intents._ended_out_of_sight(seen):
            replaced[(name, seen[0].host)] = intents._held_where_it_is(seen[0])
            continue
        if name in young:
            continue  # another actor's move under way: theirs to settle
        half = (
            intents._half_cold_move(seen)
            or intents._settled_live_move(seen, now)
            or intents._started_again_on_source(seen)
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
            moved = intents._moved(vm.name, intent)
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
        out.append(intents.Resolution(vm.name, vm.uuid, vm.host, state, summary, moved=moved))
        replaced[(vm.name, vm.host)] = vm.model_copy(update={"reconciler": state})
    if not replaced:
        return snapshot, []
    discarded = {(r.vm, r.discard_on) for r in out if r.discard_on is not None}
    vms = [replaced.get((v.name, v.host), v) for v in snapshot.vms]
    vms = [v for v in vms if (v.name, v.host) not in discarded]
    flights = [f for f in snapshot.in_flight if f.name not in halves]
    return snapshot.model_copy(update={"vms": vms, "in_flight": flights}), out


def straight_found(snapshot: Snapshot) -> list[Duplicate]:
    """The VMs of ``snapshot`` running on two hosts, then those defined on two, by name."""
    by_uuid: dict[str, list[VmState]] = {}
    for vm in snapshot.vms:
        by_uuid.setdefault(vm.uuid, []).append(vm)
    out: list[Duplicate] = []
    for uuid, copies in by_uuid.items():
        hosts = {v.host for v in copies}
        if len(hosts) < 2:
            continue
        names = "/".join(sorted({v.name for v in copies}))
        running: list[str] = sorted({v.host for v in copies if duplicates.live(v)})
        if len(running) > 1:
            out.append(Duplicate(vm=names, uuid=uuid, hosts=running, running=True))
            continue
        defined: list[str] = sorted({v.host for v in copies if v.persistent})
        if len(defined) > 1 and not duplicates._moving(copies):
            out.append(Duplicate(vm=names, uuid=uuid, hosts=defined, running=False))
    return sorted(out, key=lambda d: (not d.running, d.vm, d.uuid))


def straight_without_future_records(
    snapshot: Snapshot, limit: datetime
) -> tuple[Snapshot, list[str]]:
    """``snapshot`` with every record time after ``limit`` dropped, and a line per drop."""
    lines: list[str] = []
    vms: list[VmState] = []
    changed = False
    for seen in snapshot.vms:
        vm, r = seen, seen.reconciler
        update: dict[str, object] = {}
        if r.first_seen is not None and r.first_seen > limit:
            update["first_seen"] = None
        if r.last_moved_at is not None and r.last_moved_at > limit:
            update |= {"last_moved_at": None, "last_moved_from": None, "last_moved_to": None}
        if r.last_failure is not None and r.last_failure.at > limit:
            update["last_failure"] = None
        if r.intent is not None and r.intent.started_at > limit:
            update["intent"] = None
        if update:
            changed = True
            lines.append(f"{vm.name} on {vm.host}: {', '.join(sorted(update))}")
            vm = vm.model_copy(update={"reconciler": r.model_copy(update=update)})
        vms.append(vm)
    if not changed:
        return snapshot, []
    return snapshot.model_copy(update={"vms": vms}), lines


HOSTS = ("h0", "h1", "h2")


@st.composite
def sightings(draw: st.DrawFn) -> Snapshot:
    """VMs without intents, and VMs with one seen on one or two hosts in any state."""
    vms: list[VmState] = []
    flights: list[InFlight] = []
    for i in range(draw(st.integers(min_value=0, max_value=8))):
        name = f"vm-{i}"
        hosts = draw(st.lists(st.sampled_from(HOSTS), min_size=1, max_size=2, unique=True))
        intent = None
        if draw(st.booleans()):
            source, target = draw(st.permutations(HOSTS))[:2]
            intent = MoveIntent(
                plan_id=draw(st.sampled_from([None, "p"])),
                source=source,
                target=target,
                started_at=NOW - timedelta(minutes=draw(st.integers(min_value=-5, max_value=30))),
                reason=draw(st.sampled_from([None, "Balance"])),
                actor=draw(st.sampled_from([None, "me", "other"])),
            )
        for host in hosts:
            seen = a_vm(name, host).model_copy(
                update={
                    "state": draw(st.sampled_from([VmRunState.RUNNING, VmRunState.SHUTOFF])),
                    "state_reason": draw(
                        st.sampled_from([None, "migrated", "post-copy", intents.POST_COPY_FAILED])
                    ),
                    "reconciler": ReconcilerState(
                        intent=intent if draw(st.booleans()) or len(hosts) == 1 else None,
                        first_seen=draw(st.sampled_from([None, NOW, NOW - timedelta(hours=1)])),
                        last_moved_at=draw(st.sampled_from([None, NOW + timedelta(minutes=9)])),
                    ),
                }
            )
            vms.append(seen)
        if len(hosts) == 2 and draw(st.booleans()):
            flights.append(InFlight(name=name, uuid=f"uuid-{name}", hosts=hosts))
    order = draw(st.permutations(range(len(vms))))
    return Snapshot(
        cluster="test",
        taken_at=NOW,
        hosts=[host_state(h) for h in HOSTS],
        vms=[vms[k] for k in order],
        in_flight=flights,
    )


@settings(max_examples=300, deadline=None)
@given(sightings(), st.sampled_from([None, "me", "other"]))
def test_resolved_is_what_resolving_every_vm_gives(snapshot: Snapshot, actor: str | None) -> None:
    fast, fast_out = intents.resolved(snapshot, NOW, actor)
    slow, slow_out = straight_resolved(snapshot, NOW, actor)
    assert fast_out == slow_out
    assert fast.model_dump_json() == slow.model_dump_json()
    assert (fast is snapshot) == (slow is snapshot)
    assert intents.foreign(snapshot, actor, NOW) == sorted(
        set(straight_foreign(snapshot, actor, NOW).values())
    )


@settings(max_examples=300, deadline=None)
@given(sightings(), st.integers(min_value=-10, max_value=40))
def test_records_dated_later_and_duplicates_are_what_reading_every_vm_gives(
    snapshot: Snapshot, minutes: int
) -> None:
    limit = NOW - timedelta(minutes=minutes)
    fast, fast_lines = intents.without_future_records(snapshot, limit)
    slow, slow_lines = straight_without_future_records(snapshot, limit)
    assert fast_lines == slow_lines
    assert fast.model_dump_json() == slow.model_dump_json()
    assert (fast is snapshot) == (slow is snapshot)
    assert duplicates.found(snapshot) == straight_found(snapshot)
