"""The loop on fakes: schedule, triggers, modes and windows, backoff, stall and resume, stop."""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from reconciler.engine import triggers
from reconciler.engine.loop import Loop, LoopSettings
from reconciler.engine.metrics import Metrics
from reconciler.errors import ConfigError, HostUnreachable
from reconciler.model.policy import BalancePolicy, Mode, Window
from reconciler.model.status import MoveOutcome, ReconcileStatus, RoundOutcome
from tests.engine.loop_fakes import START, FakeRound, FakeTime, Policies, policy, status


class Leader:
    def __init__(self, held: bool = True, confirms: bool = True) -> None:
        self.held = held
        self.confirms = confirms

    def confirm(self) -> bool:
        return self.confirms

    def holder(self) -> str | None:
        return None if self.held else "other@host"


def make(
    value: BalancePolicy | Exception,
    script: list[Any] | None = None,
    *,
    jitter: float = 0.0,
    **kw: Any,
) -> tuple[Loop, FakeTime, FakeRound, Policies]:
    t = FakeTime()
    rnd = FakeRound(t.clock, script or [])
    pol = Policies(value)
    loop = Loop(
        cluster="lab",
        run_round=rnd,
        load_policy=pol,
        clock=t.clock,
        metrics=Metrics("lab"),
        sleep=t.sleep,
        rng=random.Random(7),
        settings=LoopSettings(jitter=jitter),
        **kw,
    )
    return loop, t, rnd, pol


def run_until(loop: Loop, rnd: FakeRound, calls: int, limit: int = 500) -> None:
    for _ in range(limit):
        if len(rnd.calls) >= calls:
            return
        loop.step()
    raise AssertionError(f"only {len(rnd.calls)} rounds after {limit} steps")


def sample(loop: Loop, name: str, **labels: str) -> float:
    value = loop.metrics.registry.get_sample_value(name, {"cluster": "lab", **labels})
    return 0.0 if value is None else value


def gaps(rnd: FakeRound) -> list[float]:
    return [(b.at - a.at).total_seconds() for a, b in zip(rnd.calls, rnd.calls[1:], strict=False)]


def test_a_round_at_start_then_every_interval_measured_from_the_end_of_the_last() -> None:
    loop, _, rnd, _ = make(policy(Mode.OBSERVE, timedelta(minutes=10)))
    run_until(loop, rnd, 4)
    assert rnd.calls[0].at == START
    assert rnd.calls[0].trigger == "start"
    assert gaps(rnd) == [601.0, 601.0, 601.0]  # each fake round takes 1 s
    assert [c.trigger for c in rnd.calls[1:]] == ["schedule"] * 3


def test_jitter_stays_within_its_fraction_and_varies() -> None:
    loop, _, rnd, _ = make(policy(Mode.OBSERVE, timedelta(minutes=10)), jitter=0.1)
    run_until(loop, rnd, 30)
    spacing = [g - 1 for g in gaps(rnd)]
    assert all(540 <= g <= 660 for g in spacing), spacing
    assert len({round(g) for g in spacing}) > 5


def test_a_trigger_runs_a_round_at_once_and_restarts_the_interval() -> None:
    loop, t, rnd, _ = make(policy(Mode.OBSERVE, timedelta(minutes=10)))
    t.at(START + timedelta(minutes=3), lambda: loop.wakeup.trigger(triggers.DESIRED_CHANGED))
    t.at(START + timedelta(minutes=3), lambda: loop.wakeup.trigger(triggers.WEBHOOK))
    run_until(loop, rnd, 3)
    assert rnd.calls[1].at == START + timedelta(minutes=3)
    assert rnd.calls[1].trigger == "desired-state-changed+webhook"  # a burst is one round
    assert rnd.calls[2].at == START + timedelta(minutes=13, seconds=1)


def test_policy_is_read_again_before_every_round() -> None:
    loop, _, rnd, pol = make(policy(Mode.OBSERVE, timedelta(minutes=10)))
    run_until(loop, rnd, 2)
    pol.value = policy(Mode.OBSERVE, timedelta(minutes=1))
    run_until(loop, rnd, 5)
    # the round already scheduled keeps its time; the next interval is the new one
    assert gaps(rnd) == [601.0, 601.0, 61.0, 61.0]
    assert pol.loads >= 4


def test_observe_never_acts_nor_proposes() -> None:
    proposals: list[int] = []
    loop, _, rnd, _ = make(policy(Mode.OBSERVE), propose=lambda: proposals.append(1))
    run_until(loop, rnd, 3)
    assert not any(c.act for c in rnd.calls)
    assert proposals == []


def test_propose_keeps_the_proposal_current_after_each_ready_round() -> None:
    proposals: list[int] = []
    not_ready = status(START, observed=False)
    calls: list[int] = []
    loop, _, rnd, _ = make(
        policy(Mode.PROPOSE), [not_ready], propose=lambda: proposals.append(len(calls))
    )
    rnd.on_call = lambda: calls.append(1)
    run_until(loop, rnd, 3)
    assert not any(c.act for c in rnd.calls)
    assert proposals == [2, 3]  # none after the round that had not observed everything


def test_apply_acts_only_after_a_complete_observation() -> None:
    not_ready = status(START, observed=False)
    failed = status(START, outcome=RoundOutcome.FAILED)
    loop, _, rnd, _ = make(policy(Mode.APPLY), [not_ready, failed])
    run_until(loop, rnd, 5)
    assert [c.act for c in rnd.calls] == [False, False, False, True, True]
    # once observed, the acting round follows at once, not an interval later
    assert rnd.calls[3].trigger == "observed"
    assert (rnd.calls[3].at - rnd.calls[2].at).total_seconds() == 1.0


def test_apply_outside_its_window_proposes_and_acts_when_the_window_opens() -> None:
    window = Window(schedule="0 22 * * *", duration=timedelta(hours=2))  # 22:00-24:00 UTC
    proposals: list[int] = []
    loop, _, rnd, _ = make(
        policy(Mode.APPLY, timedelta(hours=4), [window]), propose=lambda: proposals.append(1)
    )
    run_until(loop, rnd, 6)
    opening = START.replace(hour=22)
    inside = [c for c in rnd.calls if opening <= c.at < opening + timedelta(hours=2)]
    assert [c.at for c in rnd.calls if c.trigger == "window"] == [opening]
    assert all(c.act for c in inside[1:])  # the first one inside still has to observe
    assert not any(c.act for c in rnd.calls if not opening <= c.at < opening + timedelta(hours=2))
    assert len(proposals) >= 2


def test_transient_errors_back_off_exponentially_then_recover() -> None:
    health: list[dict[str, object]] = []

    def recovered() -> ReconcileStatus:
        health.append(loop.health.report())
        return status(t.clock.now())

    errors: list[Any] = [HostUnreachable("host b does not answer")] * 4
    loop, t, rnd, _ = make(policy(Mode.OBSERVE), [*errors, recovered])
    run_until(loop, rnd, 5)
    assert health[0]["healthy"] is False
    assert health[0]["message"] == "4 rounds in a row failed: host b does not answer"
    backoffs = t.sleeps[:4]
    for n, wait in enumerate(backoffs):
        assert 2**n <= wait <= 2**n + 1, backoffs
    assert loop.health.healthy
    assert sample(loop, "reconciler_reconciles_total", result="error") == 4
    assert sample(loop, "reconciler_reconciles_total", result="ok") == 1


def test_backoff_is_capped() -> None:
    loop, t, rnd, _ = make(policy(Mode.OBSERVE), [HostUnreachable("x")] * 12)
    loop.settings.backoff_max = 30
    run_until(loop, rnd, 13)
    assert max(t.sleeps[:12]) <= 31
    assert t.sleeps[10] >= 30


def test_invalid_policy_stops_acting_keeps_reporting_and_resumes_when_fixed() -> None:
    proposals: list[int] = []
    loop, t, rnd, pol = make(policy(Mode.APPLY), propose=lambda: proposals.append(1))
    run_until(loop, rnd, 3)
    assert rnd.calls[-1].act
    pol.value = ConfigError("policy.yaml:3:9: spec.mode: 'aply' is not observe|propose|apply")
    loop.wakeup.trigger(triggers.DESIRED_CHANGED)
    run_until(loop, rnd, 6)
    assert [c.act for c in rnd.calls[3:]] == [False, False, False]  # report-only rounds
    assert not loop.health.healthy
    assert "'aply'" in str(loop.health.report()["message"])
    assert sample(loop, "reconciler_reconciles_total", result="error") == 3
    pol.value = policy(Mode.APPLY)
    t.at(t.clock.now() + timedelta(seconds=5), lambda: loop.wakeup.trigger("fixed"))
    run_until(loop, rnd, 7)
    assert rnd.calls[6].trigger == "fixed"
    assert rnd.calls[6].act
    assert loop.health.healthy


def test_invalid_window_is_a_stall_naming_the_window() -> None:
    # validation refuses it; a daemon whose zone database lacks a zone meets it all the same
    bad = Window.model_construct(
        schedule="0 22 * * *", duration=timedelta(hours=1), timezone="Mars/Base"
    )
    loop, _, rnd, _ = make(policy(Mode.APPLY, windows=[bad]))
    run_until(loop, rnd, 2)
    assert not any(c.act for c in rnd.calls)
    assert "spec.windows[0].timezone" in str(loop.health.report()["message"])


def test_round_reported_stalled_is_unhealthy_and_not_proposed() -> None:
    proposals: list[int] = []
    loop, _, rnd, _ = make(
        policy(Mode.PROPOSE),
        [status(START, stalled="AllHostsUnreachable")],
        propose=lambda: proposals.append(1),
    )
    run_until(loop, rnd, 1)
    assert loop.health.report()["reason"] == "AllHostsUnreachable"
    assert proposals == []
    run_until(loop, rnd, 2)
    assert loop.health.healthy


def test_standby_runs_no_round_until_it_holds_the_lease() -> None:
    leader = Leader(held=False)
    loop, t, rnd, _ = make(policy(Mode.APPLY), leadership=leader)
    for _ in range(20):
        loop.step()
    assert rnd.calls == []
    assert loop.health.report()["state"] == "standby"
    assert sample(loop, "reconciler_leader") == 0
    leader.held = True
    during: list[tuple[object, float]] = []
    rnd.on_call = lambda: during.append(
        (loop.health.report()["state"], sample(loop, "reconciler_leader"))
    )
    loop.wakeup.trigger(triggers.LEADER)
    run_until(loop, rnd, 1)
    assert rnd.calls[0].trigger == "leader"
    assert sample(loop, "reconciler_leader") == 1
    # while its first round runs, /healthz no longer says standby (the gauge already says 1)
    assert during[0] == ("starting", 1)
    assert loop.health.report()["state"] == "ok"


def test_a_lease_not_confirmed_before_acting_makes_the_round_observe_only() -> None:
    leader = Leader(confirms=False)
    loop, _, rnd, _ = make(policy(Mode.APPLY), leadership=leader)
    run_until(loop, rnd, 4)
    assert not any(c.act for c in rnd.calls)


def test_a_round_that_could_not_confirm_the_lease_is_tried_again_soon_then_less_often() -> None:
    leader = Leader(confirms=False)
    loop, t, rnd, _ = make(policy(Mode.APPLY, timedelta(hours=1)), leadership=leader)
    run_until(loop, rnd, 5)  # the first round observes; the next ones should have acted
    assert [c.trigger for c in rnd.calls[2:]] == ["lease-retry"] * 3
    assert gaps(rnd)[1:] == [6.0, 11.0, 21.0]  # 5 s, doubled each time (each round takes 1 s)
    leader.confirms = True
    run_until(loop, rnd, 6)
    assert rnd.calls[5].act
    run_until(loop, rnd, 7)
    assert gaps(rnd)[-1] == 3601.0  # confirmed again: the interval stands


def test_migrations_are_counted_once_per_round_result() -> None:
    moved = status(START, moves=[MoveOutcome.SUCCEEDED, MoveOutcome.SUCCEEDED, MoveOutcome.FAILED])
    loop, _, rnd, _ = make(policy(Mode.APPLY), [moved, moved])
    run_until(loop, rnd, 2)
    assert sample(loop, "reconciler_migrations_total", outcome="succeeded") == 2
    assert sample(loop, "reconciler_migrations_total", outcome="failed") == 1
    assert sample(loop, "reconciler_migrations_total", outcome="aborted") == 0


def test_stop_lets_the_round_in_flight_settle_then_releases_and_returns() -> None:
    in_round = threading.Event()
    finish = threading.Event()
    released: list[bool] = []
    seen_stop: list[bool] = []
    calls: list[bool] = []
    loop: Loop

    def slow_round(trigger: str, act: bool) -> ReconcileStatus:
        calls.append(act)
        if len(calls) < 3:
            return status(START)
        in_round.set()
        finish.wait(10)
        seen_stop.append(loop.round_stop.is_set())
        return status(START)

    loop = Loop(
        cluster="lab",
        run_round=slow_round,
        load_policy=lambda: policy(Mode.APPLY, timedelta(milliseconds=10)),
        clock=FakeTimeClock(),
        metrics=Metrics("lab"),
        release=lambda: released.append(True),
    )
    runner = threading.Thread(target=loop.run)
    runner.start()
    assert in_round.wait(10)
    loop.stop()
    time.sleep(0.05)
    assert runner.is_alive()  # still settling the moves in flight
    assert released == []
    finish.set()
    runner.join(10)
    assert not runner.is_alive()
    assert seen_stop == [True]
    assert released == [True]
    assert len(calls) == 3  # nothing started after the stop


class FakeTimeClock:
    def now(self) -> Any:
        from datetime import UTC, datetime

        return datetime.now(UTC)


@pytest.mark.parametrize("mode", [Mode.OBSERVE, Mode.PROPOSE])
def test_metrics_ok_rounds_are_counted(mode: Mode) -> None:
    loop, _, rnd, _ = make(policy(mode))
    run_until(loop, rnd, 3)
    assert sample(loop, "reconciler_reconciles_total", result="ok") == 3
    assert sample(loop, "reconciler_reconcile_duration_seconds_count") == 3


def test_a_rollout_in_progress_brings_the_next_round_forward() -> None:
    from reconciler.model.status import RolloutState

    def waiting(seconds: int, phase: str = "InProgress") -> ReconcileStatus:
        def make_status() -> ReconcileStatus:
            now = START + timedelta(seconds=1)
            base = status(now)
            state = RolloutState(
                rollout="r", phase=phase, next_look=START + timedelta(seconds=seconds)
            )
            return base.model_copy(update={"rollouts": [state]})

        return make_status()

    script: list[Any] = [waiting(30), waiting(30, "Stopped")]
    loop, _, rnd, _ = make(policy(Mode.OBSERVE, timedelta(minutes=10)), script)
    run_until(loop, rnd, 3)
    assert rnd.calls[1].at == START + timedelta(seconds=30)
    assert rnd.calls[1].trigger == "rollout"
    # a stopped rollout waits for a person: the interval again
    assert rnd.calls[2].at == START + timedelta(seconds=30 + 1 + 600)
    assert sample(loop, "reconciler_rollout_phase", rollout="r", phase="Stopped") == 1
    assert sample(loop, "reconciler_rollout_phase", rollout="r", phase="InProgress") == 0


def test_a_round_runs_inside_its_turn_and_its_wait_is_not_its_duration() -> None:
    """A fleet bounds the rounds running at once: each round (policy read included) runs
    inside ``turn``, and the time spent waiting for it is not counted as the round's."""
    inside: list[bool] = []
    state = {"in": False}
    holder: dict[str, Any] = {}

    @contextlib.contextmanager
    def turn() -> Iterator[None]:
        holder["t"].clock.advance(30)  # waited 30 s for a turn
        state["in"] = True
        try:
            yield
        finally:
            state["in"] = False

    loop, t, rnd, pol = make(policy(Mode.OBSERVE, timedelta(minutes=10)), turn=turn)
    holder["t"] = t
    rnd.on_call = lambda: inside.append(state["in"])
    run_until(loop, rnd, 3)
    assert inside == [True, True, True]
    assert sample(loop, "reconciler_reconcile_duration_seconds_sum") == 3.0  # 1 s each
