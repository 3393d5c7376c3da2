"""The backtest: recorded snapshots replayed under a policy, holdRounds, cooldown and batch at
work along the sequence."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler import config
from reconciler.core import backtest
from reconciler.model.desired import DesiredState
from reconciler.model.snapshot import Snapshot
from tests.gitrepos import ROOT
from tests.impact.world import T0, snapshot

EXAMPLE = config.load_desired(ROOT / "cluster-state")


def with_policy(**spec: Any) -> DesiredState:
    policy = EXAMPLE.policy.model_copy(update={"spec": EXAMPLE.policy.spec.model_copy(update=spec)})
    return EXAMPLE.model_copy(update={"policy": policy})


def flapping(n: int, every: timedelta = timedelta(minutes=15)) -> list[Snapshot]:
    """kvm-01's batch VMs busy in every other snapshot: the spread flips around the threshold."""
    return [
        snapshot(T0 + i * every, cpu={"batch-1": 6.0, "batch-2": 6.0} if i % 2 else {})
        for i in range(n)
    ]


def run(desired_base: DesiredState, desired_head: DesiredState, snaps: list[Snapshot]) -> Any:
    until = snaps[-1].taken_at
    return backtest.replay(desired_base, desired_head, snaps, since=T0, until=until)


def test_a_flapping_load_moves_less_under_a_higher_hold_rounds() -> None:
    snaps = flapping(24)
    result = run(with_policy(hold_rounds=1), with_policy(hold_rounds=2), snaps)
    assert result.snapshots == 24
    assert result.base.rounds == result.head.rounds == 24  # one round per 15m snapshot
    assert result.base.moves > 0
    assert result.head.moves == 0  # never over the threshold two rounds in a row
    assert result.base.peak_spread["x86_64"] > 20
    assert len(result.rows) == 24


def test_cooldown_keeps_moved_vms_from_moving_back_and_forth() -> None:
    # the busy pair alternates: without a cooldown the replay chases it every round
    busy = [{"batch-1": 6.0, "batch-2": 6.0}, {"app-1": 6.0, "cache-1": 6.0}]
    snaps = [snapshot(T0 + i * timedelta(minutes=15), cpu=busy[i % 2]) for i in range(24)]
    short = with_policy(hold_rounds=1, cooldown=timedelta(0), min_uptime=timedelta(0))
    long = with_policy(hold_rounds=1, cooldown=timedelta(hours=6), min_uptime=timedelta(0))
    result = run(short, long, snaps)
    assert result.base.acted >= 20  # nearly every round moves something
    assert result.head.moves * 3 < result.base.moves
    # six hours of rounds: a VM the long cooldown moved is not moved again
    assert result.head.moves <= len(snaps[0].vms)


def test_batch_limits_each_round_and_quiet_periods_count_as_rounds() -> None:
    hot = snapshot(T0, cpu={"batch-1": 5.0, "batch-2": 5.0, "app-1": 2.0})  # under hostLimit
    # one recorded snapshot, then nothing new for an hour: rounds every 15m on it
    result = backtest.replay(
        with_policy(hold_rounds=2, batch=1),
        with_policy(hold_rounds=2, batch=4),
        [hot],
        since=T0,
        until=T0 + timedelta(hours=1),
    )
    assert result.base.rounds == result.head.rounds == 5
    rows = result.rows
    assert [r.recorded for r in rows] == [True, False, False, False, False]
    acted = [r.base.acted if r.base is not None else None for r in rows]
    assert acted[:2] == [False, True]  # holdRounds 2: seen once, then acted upon
    assert all(r.base is None or r.base.moves <= 1 for r in rows)
    assert result.head.moves >= result.base.moves


def test_moves_the_recording_made_are_not_taken_as_facts(tmp_path: Path) -> None:
    """A later snapshot shows batch-1 moved by the reconciler that ran: under a policy that
    never balances, the replay keeps it where it was."""
    from reconciler.model.snapshot import ReconcilerState

    first = snapshot(T0, cpu={"batch-1": 6.0, "batch-2": 6.0})
    moved = snapshot(
        T0 + timedelta(minutes=15),
        cpu={"batch-1": 6.0, "batch-2": 6.0},
        hosts={"batch-1": "kvm-02"},
        records={"batch-1": ReconcilerState(moves=1, last_moved_at=T0)},
    )
    never = with_policy(threshold=100)
    result = backtest.replay(never, never, [first, moved], since=T0, until=moved.taken_at)
    last = result.rows[-1].base
    assert last is not None
    assert last.spread["x86_64"] == result.rows[0].base.spread["x86_64"]  # type: ignore[union-attr]


@settings(max_examples=15, deadline=None)
@given(st.lists(st.booleans(), min_size=2, max_size=12), st.integers(1, 4))
def test_a_higher_hold_rounds_never_moves_more(busy: list[bool], hold: int) -> None:
    snaps = [
        snapshot(T0 + i * timedelta(minutes=15), cpu={"batch-1": 6.0, "batch-2": 6.0} if b else {})
        for i, b in enumerate(busy)
    ]
    result = run(with_policy(hold_rounds=hold), with_policy(hold_rounds=hold + 1), snaps)
    assert result.head.acted <= result.base.acted or result.head.moves <= result.base.moves
    assert result.base.rounds == result.head.rounds == len(busy)
