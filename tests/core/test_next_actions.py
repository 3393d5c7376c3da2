"""A round's decision as one pure function: the facts of an observation and the time in, the
round's actions out. Never acting before a complete observation nor beside another actor,
counting exactly when the caller holds the cluster or acts, the same answer for the same
facts."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.next_actions import (
    RolloutHolds,
    first_seen_stamps,
    next_actions,
    observed_facts,
)
from reconciler.model.snapshot import MoveIntent, ReconcilerState, Snapshot
from reconciler.model.status import ReconcileStatus
from tests.core.builders import NOW, desired, host, host_state, snapshot, vm

D = desired([host("h1"), host("h2"), host("h3")])
HOT = [vm(f"v{i}", "h1", cpu_used=1.8) for i in range(6)]


def observed(*, down: frozenset[str] = frozenset(), foreign: bool = False) -> Snapshot:
    vms = list(HOT)
    if foreign:
        intent = MoveIntent(source="h1", target="h2", started_at=NOW, actor="apply@elsewhere")
        vms[0] = vms[0].model_copy(update={"reconciler": ReconcilerState(intent=intent)})
    hosts = [host_state(h, reachable=h not in down) for h in ("h1", "h2", "h3")]
    return snapshot(hosts, [v for v in vms if v.host not in down])


def observed_before() -> ReconcileStatus:
    """The status of a round that observed the cluster completely an hour ago."""
    return ReconcileStatus(cluster="test").model_copy(
        update={"observed_since": NOW - timedelta(hours=1)}
    )


@settings(max_examples=40)
@given(
    down=st.frozensets(st.sampled_from(["h2", "h3"])),
    seen_before=st.booleans(),
    foreign=st.booleans(),
    act=st.booleans(),
    holds=st.booleans(),
    confirm=st.booleans(),
)
def test_a_round_acts_only_on_a_complete_observation_and_alone(
    down: frozenset[str],
    seen_before: bool,
    foreign: bool,
    act: bool,
    holds: bool,
    confirm: bool,
) -> None:
    previous = observed_before() if seen_before else None
    facts = observed_facts(
        D,
        observed(down=down, foreign=foreign),
        previous,
        now=NOW,
        actor="run@here",
        placement_changed_at=None,
    )
    actions = next_actions(facts, act=act, holds=holds, confirm=confirm, actor="run@here", now=NOW)
    if actions.act:
        assert act
        assert actions.plan.moves
        assert facts.history.observed_since is not None  # complete once, this round or before
        assert not foreign
    if act and actions.plan.moves and not actions.act:
        assert actions.refusal is not None
    if not seen_before and down and act and actions.plan.moves:
        assert not actions.act
        assert "not been observed completely" in str(actions.refusal)
    assert actions.ask == (actions.act and confirm)
    assert actions.counts == (holds or actions.act)
    again = next_actions(facts, act=act, holds=holds, confirm=confirm, actor="run@here", now=NOW)
    assert again == actions  # the same facts and time: the same actions


def test_an_imbalanced_cluster_observed_completely_is_acted_on() -> None:
    facts = observed_facts(D, observed(), None, now=NOW, actor=None, placement_changed_at=None)
    actions = next_actions(facts, act=True, holds=True, confirm=False, actor=None, now=NOW)
    assert actions.plan.moves
    assert actions.act
    assert actions.refusal is None


def test_rollouts_whose_records_cannot_be_read_hold_every_move_back() -> None:
    facts = observed_facts(D, observed(), None, now=NOW, actor=None, placement_changed_at=None)
    holds = RolloutHolds(unreadable="the branch is gone")
    actions = next_actions(
        facts, act=True, holds=True, confirm=False, actor=None, now=NOW, rollouts=holds
    )
    assert not actions.act
    assert actions.refusal == "the rollouts' records could not be read: the branch is gone"


def test_a_host_held_out_by_a_rollout_is_drained() -> None:
    facts = observed_facts(D, observed(), None, now=NOW, actor=None, placement_changed_at=None)
    holds = RolloutHolds(out=("h1",), keep_out=("h1", "h2"))
    actions = next_actions(
        facts, act=True, holds=True, confirm=False, actor=None, now=NOW, rollouts=holds
    )
    assert actions.plan.moves
    assert {m.source for m in actions.plan.moves} == {"h1"}
    assert "h1" not in {m.target for m in actions.plan.moves}
    moved = {m.vm for m in [*actions.plan.moves, *actions.plan.deferred]}
    assert moved <= {v.name for v in HOT}


def test_vms_there_at_the_first_complete_observation_are_stamped_old_later_ones_new() -> None:
    facts = observed_facts(D, observed(), None, now=NOW, actor=None, placement_changed_at=None)
    stamps = first_seen_stamps(facts.snapshot, facts.history, NOW)
    assert {r.first_seen for _, r in stamps} == {NOW}
    later = facts.snapshot.model_copy(update={"taken_at": NOW + timedelta(minutes=5)})
    stamps = first_seen_stamps(later, facts.history, NOW + timedelta(minutes=5))
    assert {r.first_seen for _, r in stamps} == {NOW + timedelta(minutes=5)}
    incomplete = observed_facts(
        D, observed(down=frozenset({"h2"})), None, now=NOW, actor=None, placement_changed_at=None
    )
    assert first_seen_stamps(incomplete.snapshot, incomplete.history, NOW) == []
