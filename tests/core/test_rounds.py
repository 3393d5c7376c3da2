"""The decisions at the end of a round, without the engine: the status it leaves, the previous
status it trusts, the placement entries that follow its moves and the snapshot after them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.core.rounds import (
    SKEW_TOLERANCE,
    RoundFacts,
    RoundFailure,
    placement_updates,
    round_status,
    snapshot_after_moves,
    status_not_ready,
    trusted_status,
)
from reconciler.model.base import HostName, VmName
from reconciler.model.plan import Move, Plan, Reason
from reconciler.model.status import (
    ConditionType,
    MoveOutcome,
    MoveResult,
    ReconcileStatus,
    RoundOutcome,
    RoundResult,
)
from tests.core.builders import NOW, desired, host, host_state, snapshot, vm

D = desired([host("h0"), host("h1")], interval="10m")
LATER = NOW + timedelta(seconds=30)


def move(name: str, source: str = "h0", target: str = "h1") -> Move:
    return Move(
        vm=VmName(name),
        source=HostName(source),
        target=HostName(target),
        memory=0,
        vcpus=1,
        reason=Reason.BALANCE,
        detail="test",
        wave=0,
    )


def result(name: str, outcome: MoveOutcome, target: str = "h1") -> MoveResult:
    return MoveResult(
        vm=name, source="h0", target=target, outcome=outcome, reason="Balance", detail="x"
    )


def plan(moves: list[Move], deferred: list[Move] | None = None, **fields: object) -> Plan:
    return Plan.model_validate(
        {
            "planId": "sha256:1",
            "cluster": "test",
            "createdAt": NOW,
            "moves": moves,
            "deferred": deferred or [],
            **fields,
        }
    )


def status_of(facts: RoundFacts, previous: ReconcileStatus | None = None) -> ReconcileStatus:
    return round_status(
        D, previous, facts, started=NOW, finished=LATER, trigger="manual", revision=None
    )


def conditions(status: ReconcileStatus) -> dict[ConditionType, tuple[bool, str]]:
    return {c.type: (c.status, c.reason) for c in status.conditions}


SNAP = snapshot([host_state("h0"), host_state("h1")], [vm("a", "h0"), vm("b", "h0")])


# --- the status --------------------------------------------------------------------------------


def test_a_round_with_nothing_to_move_is_in_sync_and_ready() -> None:
    status = status_of(RoundFacts(plan=plan([]), snapshot=SNAP))
    assert status.last_result is not None
    assert status.last_result.outcome is RoundOutcome.IN_SYNC
    assert conditions(status) == {
        ConditionType.READY: (True, "InSync"),
        ConditionType.RECONCILING: (False, "InSync"),
        ConditionType.STALLED: (False, "Progressing"),
    }
    assert status.rounds == 1
    assert status.next_round_at == LATER + timedelta(minutes=10)
    assert status.observed_since == SNAP.taken_at  # the first complete observation


def test_a_plan_not_acted_on_is_planned_and_reconciling() -> None:
    status = status_of(RoundFacts(plan=plan([move("a")]), snapshot=SNAP))
    assert status.last_result is not None
    assert status.last_result.outcome is RoundOutcome.PLANNED
    assert status.last_result.message == "1 move(s) planned, none run"
    assert conditions(status)[ConditionType.READY] == (False, "Planned")
    assert conditions(status)[ConditionType.RECONCILING] == (True, "MovesPending")


def test_every_move_done_with_none_deferred_is_applied_and_ready() -> None:
    facts = RoundFacts(
        plan=plan([move("a")]), results=[result("a", MoveOutcome.SUCCEEDED)], acted=True
    )
    status = status_of(facts)
    assert status.last_result is not None
    assert (status.last_result.outcome, status.last_result.message) == (
        RoundOutcome.APPLIED,
        "1 moved",
    )
    assert conditions(status)[ConditionType.READY] == (True, "Applied")


def test_moves_deferred_to_later_rounds_keep_an_applied_round_reconciling() -> None:
    facts = RoundFacts(
        plan=plan([move("a")], deferred=[move("b")]),
        results=[result("a", MoveOutcome.SUCCEEDED)],
        acted=True,
    )
    status = status_of(facts)
    assert conditions(status)[ConditionType.READY] == (False, "Applied")
    assert conditions(status)[ConditionType.RECONCILING] == (True, "MovesPending")


@pytest.mark.parametrize("interrupted", [False, True])
def test_a_move_not_done_makes_the_round_partial(interrupted: bool) -> None:
    facts = RoundFacts(
        plan=plan([move("a"), move("b")]),
        results=[result("a", MoveOutcome.SUCCEEDED), result("b", MoveOutcome.ABORTED)],
        acted=True,
        interrupted=interrupted,
    )
    status = status_of(facts)
    assert status.last_result is not None
    assert status.last_result.outcome is RoundOutcome.PARTIAL
    assert status.last_result.message == (
        "1 moved, 0 failed, 0 skipped, 1 aborted" + (" (interrupted)" if interrupted else "")
    )


@pytest.mark.parametrize(("transient", "stalled"), [(True, False), (False, True)])
def test_a_failed_round_is_stalled_unless_its_error_is_transient(
    transient: bool, stalled: bool
) -> None:
    failure = RoundFailure(
        reason="HostUnreachable", message="h1 does not answer", transient=transient
    )
    status = status_of(RoundFacts(failure=failure, plan=plan([move("a")])))
    assert status.last_result is not None
    assert status.last_result.outcome is RoundOutcome.FAILED
    assert status.last_result.message == "h1 does not answer"
    assert conditions(status) == {
        ConditionType.READY: (False, "HostUnreachable"),
        ConditionType.RECONCILING: (False, "HostUnreachable"),
        ConditionType.STALLED: (stalled, "HostUnreachable"),
    }


def test_a_round_follows_the_previous_status() -> None:
    first = status_of(RoundFacts(plan=plan([]), snapshot=SNAP))
    partial = SNAP.model_copy(
        update={"hosts": [host_state("h0"), host_state("h1", reachable=False)]}
    )
    second = round_status(
        D,
        first,
        RoundFacts(plan=plan([], imbalanceRounds={"x86_64": 2}), snapshot=partial),
        started=LATER,
        finished=LATER + timedelta(seconds=1),
        trigger="timer",
        revision="abc",
    )
    assert second.rounds == 2
    assert second.observed_since == first.observed_since
    assert second.observed_revision == "abc"
    assert second.imbalance_rounds == {"x86_64": 2}
    assert second.last_result is not None
    assert second.last_result.trigger == "timer"
    ready = second.condition(ConditionType.READY)
    assert ready is not None
    assert ready.last_transition == LATER  # Ready since the first round: unchanged


def test_an_incomplete_first_observation_starts_no_observed_since() -> None:
    partial = SNAP.model_copy(
        update={"hosts": [host_state("h0"), host_state("h1", reachable=False)]}
    )
    assert status_of(RoundFacts(plan=plan([]), snapshot=partial)).observed_since is None


def test_not_ready_changes_ready_only() -> None:
    status = status_of(RoundFacts(plan=plan([]), snapshot=SNAP))
    later = LATER + timedelta(minutes=1)
    failed = status_not_ready(status, "RecordFailed", "record not written", later)
    assert conditions(failed)[ConditionType.READY] == (False, "RecordFailed")
    ready = failed.condition(ConditionType.READY)
    assert ready is not None
    assert (ready.message, ready.last_transition) == ("record not written", later)
    others = [c for c in failed.conditions if c.type is not ConditionType.READY]
    assert others == [c for c in status.conditions if c.type is not ConditionType.READY]


# --- the previous status -------------------------------------------------------------------


def _finished_at(at_offset: timedelta) -> ReconcileStatus:
    return ReconcileStatus(
        cluster="test",
        last_result=RoundResult(
            started_at=NOW + at_offset,
            finished_at=NOW + at_offset,
            trigger="manual",
            outcome=RoundOutcome.IN_SYNC,
            message="",
        ),
    )


@given(st.integers(min_value=-86400, max_value=86400))
def test_a_status_is_trusted_exactly_when_nothing_in_it_is_beyond_the_skew_tolerance(
    seconds: int,
) -> None:
    status = _finished_at(timedelta(seconds=seconds))
    trusted = trusted_status(status, NOW)
    assert (trusted is status) == (timedelta(seconds=seconds) <= SKEW_TOLERANCE)
    assert trusted in (status, None)


def test_no_status_is_no_status() -> None:
    assert trusted_status(None, NOW) is None


def test_a_future_observation_date_is_enough_to_distrust_a_status() -> None:
    status = ReconcileStatus(cluster="test", last_observed_at=NOW + timedelta(hours=1))
    assert trusted_status(status, NOW) is None


# --- placement and the snapshot after the moves ---------------------------------------------


def test_listed_vms_that_moved_follow_and_adopted_drift_is_written() -> None:
    d = desired([host("h0"), host("h1")], placement={"a": "h0", "b": "h0", "c": "h0", "d": "h1"})
    p = plan(
        [move("a"), move("b")],
        deferred=[move("d", "h1", "h0")],
        placement={"a": "h1", "b": "h1", "c": "h1", "d": "h0", "e": "h1"},
    )
    results = [result("a", MoveOutcome.SUCCEEDED), result("b", MoveOutcome.FAILED)]
    writes, adopted = placement_updates(d, p, results)
    # a moved; b failed (its entry stays); c runs elsewhere without a move (adopted); d is
    # deferred; e is not listed
    assert writes == {"a": "h1", "c": "h1"}
    assert adopted == {"c": "h1"}


def test_the_snapshot_after_the_moves_has_each_moved_vm_on_its_target() -> None:
    results = [result("a", MoveOutcome.SUCCEEDED), result("b", MoveOutcome.FAILED)]
    after = snapshot_after_moves(SNAP, results)
    assert {v.name: v.host for v in after.vms} == {"a": "h1", "b": "h0"}
    assert after.hosts == SNAP.hosts  # no huge pages: the rooms are as they were


def test_without_a_move_done_the_snapshot_is_the_same() -> None:
    assert snapshot_after_moves(SNAP, [result("a", MoveOutcome.FAILED)]) is SNAP


# --- the load over the window -------------------------------------------------------------------


def _load(**fields: object) -> dict[str, object]:
    return {"source": "samples", "basis": "window", "window": 600, "statistic": "mean", **fields}


@pytest.mark.parametrize(
    ("load", "expected"),
    [
        (None, None),
        (_load(), (True, "Window")),
        (_load(basis="sample", note="a short sample"), (True, "ShortSample")),
        (_load(unknownVms=["a"], unknownHosts=["h0"]), (False, "WindowMissing")),
        (_load(unknownHosts=["h1"]), (False, "WindowMissing")),
        (_load(problem="Prometheus did not answer"), (False, "LoadSourceFailed")),
        (
            _load(unknownVms=["x"], unknownHosts=["h0"], outOfRange={"x": "1e+06 cores"}),
            (False, "OutOfRange"),
        ),
    ],
)
def test_load_known_says_whether_balance_may_read_every_host(
    load: dict[str, object] | None, expected: tuple[bool, str] | None
) -> None:
    status = status_of(RoundFacts(plan=plan([], load=load), snapshot=SNAP))
    assert conditions(status).get(ConditionType.LOAD_KNOWN) == expected
    if expected is not None and not expected[0]:
        found = status.condition(ConditionType.LOAD_KNOWN)
        assert found is not None
        assert found.message
