"""Which of the reconciler's own earlier moves placement.yaml does not follow yet."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from reconciler.core.intents import foreign
from reconciler.core.late_moves import unrecorded_moves
from reconciler.model.snapshot import InFlight, MoveIntent, ReconcilerState, VmState
from tests.core.builders import NOW, host_state, snapshot, vm

MOVED = NOW - timedelta(hours=1)
HOSTS = [host_state("h0"), host_state("h1")]


def moved(on: str = "h1", **record: object) -> VmState:
    v = vm("a", on)
    state = ReconcilerState.model_validate(
        {"last_moved_at": MOVED, "last_moved_from": "h0", "last_moved_to": "h1", **record}
    )
    return v.model_copy(update={"reconciler": state})


def test_a_move_after_the_last_placement_change_is_owed() -> None:
    [r] = unrecorded_moves({"a": "h0"}, snapshot(HOSTS, [moved()]), MOVED - timedelta(seconds=1))
    assert (r.vm, r.source, r.target, r.started_at) == ("a", "h0", "h1", MOVED)


@pytest.mark.parametrize(
    "changed_at", [MOVED, MOVED + timedelta(seconds=1), None], ids=["same", "after", "unknown"]
)
def test_a_placement_changed_at_or_after_the_move_or_unknown_owes_nothing(
    changed_at: datetime | None,
) -> None:
    assert unrecorded_moves({"a": "h0"}, snapshot(HOSTS, [moved()]), changed_at) == []


BEFORE = MOVED - timedelta(days=1)


def test_a_vm_placed_elsewhere_unplaced_or_not_on_its_target_owes_nothing() -> None:
    snap = snapshot(HOSTS, [moved()])
    assert unrecorded_moves({"a": "h1"}, snap, BEFORE) == []  # already followed
    assert unrecorded_moves({}, snap, BEFORE) == []  # not placed: nothing to revert
    assert unrecorded_moves({"a": "h2"}, snap, BEFORE) == []  # a person put it elsewhere
    assert unrecorded_moves({"a": "h0"}, snapshot(HOSTS, [moved(on="h0")]), BEFORE) == []


def test_a_vm_in_flight_seen_twice_or_with_an_intent_owes_nothing_yet() -> None:
    twice = snapshot(
        HOSTS, [moved(), moved(on="h0")], [InFlight(name="a", uuid="u", hosts=["h0", "h1"])]
    )
    assert unrecorded_moves({"a": "h0"}, twice, BEFORE) == []
    intent = MoveIntent(plan_id="p", source="h1", target="h0", started_at=NOW)
    assert unrecorded_moves({"a": "h0"}, snapshot(HOSTS, [moved(intent=intent)]), BEFORE) == []


def test_a_move_recorded_late_names_who_made_it() -> None:
    [r] = unrecorded_moves(
        {"a": "h0"}, snapshot(HOSTS, [moved(last_moved_by="apply@ops-laptop")]), BEFORE
    )
    assert r.detail.startswith("moved by apply@ops-laptop at ")
    [unnamed] = unrecorded_moves({"a": "h0"}, snapshot(HOSTS, [moved()]), BEFORE)
    assert unnamed.detail.startswith("moved at ")


def test_another_actors_intent_is_live_while_in_flight_or_young() -> None:
    intent = MoveIntent(
        plan_id="p", source="h0", target="h1", started_at=NOW - timedelta(hours=1), actor="b"
    )
    old = vm("a", "h0").model_copy(update={"reconciler": ReconcilerState(intent=intent)})
    assert foreign(snapshot(HOSTS, [old]), "me", NOW) == []  # left behind an hour ago
    flying = snapshot(
        HOSTS, [old, vm("a", "h1")], [InFlight(name="a", uuid="u", hosts=["h0", "h1"])]
    )
    assert foreign(flying, "me", NOW) == [
        "b is moving a h0 -> h1 (since 2025-03-01T11:00:00+00:00)"
    ]
    young = intent.model_copy(update={"started_at": NOW - timedelta(minutes=1)})
    fresh = old.model_copy(update={"reconciler": ReconcilerState(intent=young)})
    assert len(foreign(snapshot(HOSTS, [fresh]), "me", NOW)) == 1
    assert foreign(snapshot(HOSTS, [fresh]), "b", NOW) == []  # its own
