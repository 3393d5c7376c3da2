"""The plan's passes over every sighting choose what their straightforward forms choose.

Checked against the plain form each replaced, on random clusters: the rules' name index taken
from the model's own, the VMs balance may move read from the sightings the model was made
from, the checks of single sightings (backoffs, holds on going back, moves that ended out
of sight, failed post-copies) run on the sightings of note alone, and the state the
heuristic's steps left kept instead of replayed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from unittest.mock import patch

from hypothesis import given
from hypothesis import strategies as st

from reconciler.core import backoff, intents, joint, load_plan, planner
from reconciler.core.load_view import Unknown
from reconciler.core.planner import _balance_movable, of_note
from reconciler.core.selectors import Index, Item
from reconciler.core.state import Model, State, build
from reconciler.core.steps import Step
from reconciler.core.units import is_fixed
from reconciler.core.vm_facts import balance_holds
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.rules import Selector
from reconciler.model.snapshot import FailedMove, MoveIntent, ReconcilerState, Snapshot, VmState
from tests.core.builders import NOW
from tests.core.strategies import Case, cases
from tests.core.test_fast_paths import KEYS, NAMES, SETTINGS, labels_st, selectors_st


@SETTINGS
@given(
    st.dictionaries(st.sampled_from(NAMES), labels_st, max_size=6),
    st.lists(selectors_st, min_size=1, max_size=4),
)
def test_an_index_given_its_names_selects_what_one_making_them_selects(
    items: dict[str, dict[str, str]], selectors: list[Selector]
) -> None:
    indexed = [Item(i * 3, name, labels) for i, (name, labels) in enumerate(items.items())]
    plain = Index(indexed, KEYS)
    given_names = Index(indexed, KEYS, {name: i for i, name, _ in indexed})
    for selector in selectors:
        assert given_names.select(selector) == plain.select(selector)


records = st.builds(
    ReconcilerState,
    last_moved_at=st.sampled_from([None, NOW - timedelta(minutes=5), NOW - timedelta(days=9)]),
    last_moved_from=st.sampled_from([None, "h0", "h1"]),
    last_reason=st.sampled_from([None, "Balance", "Drain", "Pin"]),
    backoff=st.integers(0, 3),
    last_failure=st.sampled_from(
        [None, FailedMove(at=NOW - timedelta(hours=1), source="h0", target="h1", error="x")]
    ),
    intent=st.sampled_from(
        [
            None,
            MoveIntent(source="h0", target="h1", started_at=NOW - timedelta(minutes=1)),
            MoveIntent(source="h1", target="h2", started_at=NOW - timedelta(hours=2)),
        ]
    ),
)
reasons = st.sampled_from(["", "", "booted", "migrated", "post-copy failed", "post-copy"])


def _movable_plainly(
    model: Model,
    state: State,
    snapshot: Snapshot,
    history: History,
    moved: set[int],
    desired: DesiredState,
    unknown: Unknown,
    blocked: frozenset[int],
) -> list[bool]:
    """Per VM: its first sighting in (name, host) order looked up by name, every test made."""
    seen: dict[str, VmState] = {}
    for vm in snapshot.vms:
        other = seen.get(vm.name)
        if other is None or vm.host < other.host:
            seen[vm.name] = vm
    hold = balance_holds(desired.policy.spec, history, snapshot.taken_at, NOW)
    out = []
    for info in model.vms:
        v = info.index
        obs = seen.get(info.name)
        out.append(
            not info.shadow
            and v not in moved
            and v not in model.rules.pinned
            and not is_fixed(state, v)
            and info.name not in unknown.vms
            and model.observed[v] not in blocked
            and obs is not None
            and hold(obs) is None
        )
    return out


@SETTINGS
@given(cases(), st.data())
def test_the_vms_balance_may_move_are_those_a_lookup_by_name_finds(
    case: Case, data: st.DataObject
) -> None:
    desired, snap, history = case
    again: bool = data.draw(st.booleans())
    if snap.vms and again:  # seen again, maybe on a host left out
        stray = data.draw(st.sampled_from(snap.vms))
        update = {
            "host": data.draw(st.sampled_from(["h0", "a-gone", "zz-gone"])),
            "reconciler": data.draw(records),
        }
        snap = snap.model_copy(update={"vms": [*snap.vms, stray.model_copy(update=update)]})
    model, state = build(desired, snap)
    n = len(model.vms)
    moved = data.draw(st.sets(st.integers(0, max(n - 1, 0)))) if n else set()
    names = sorted({vm.name for vm in model.vms}) or ["none"]
    unknown = Unknown(data.draw(st.frozensets(st.sampled_from(names))), {}, None)
    blocked = data.draw(st.frozensets(st.integers(0, max(len(model.hosts) - 1, 0))))
    found = _balance_movable(model, state, snap, history, moved, NOW, desired, unknown, blocked)
    assert found == _movable_plainly(model, state, snap, history, moved, desired, unknown, blocked)


@SETTINGS
@given(cases(), st.data())
def test_the_checks_of_single_sightings_find_in_those_of_note_what_they_find_in_all(
    case: Case, data: st.DataObject
) -> None:
    desired, snap, _ = case
    vms = [
        vm.model_copy(update={"reconciler": data.draw(records), "state_reason": data.draw(reasons)})
        for vm in snap.vms
    ]
    snap = snap.model_copy(update={"vms": vms})
    noted = of_note(snap)
    cooldown = desired.policy.spec.cooldown
    assert backoff.held(noted, cooldown, NOW) == backoff.held(snap, cooldown, NOW)
    if not noted.vms:
        assert intents.out_of_sight_held(snap) is snap
        assert intents.post_copy_failures(snap) == []
    model, _ = build(desired, snap)
    movable = data.draw(st.lists(st.booleans(), min_size=len(model.vms), max_size=len(model.vms)))
    assert load_plan.may_go_back(model, noted, cooldown, NOW, movable) == load_plan.may_go_back(
        model, snap, cooldown, NOW, movable
    )


@SETTINGS
@given(cases())
def test_a_plan_keeping_the_state_its_steps_left_is_the_plan_replaying_them(case: Case) -> None:
    """When the exact search swaps nothing in, the planner keeps the state the heuristic's
    steps left instead of replaying them on a copy of the observed one: the same plan."""
    desired, snap, history = case
    real = joint.improve

    def replayed(*args: Any) -> tuple[list[Step], bool | None]:
        steps, optimal = real(*args)
        return list(steps), optimal  # never the same list: the planner replays them

    kept = planner.plan(desired, snap, history, now=NOW)
    with patch.object(planner, "improve", replayed):
        again = planner.plan(desired, snap, history, now=NOW)
    assert kept.model_dump() == again.model_dump()
