"""Fakes for the loop: a clock and sleep that advance virtual time, a scripted round."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from reconciler.model.base import API_VERSION, Metadata
from reconciler.model.policy import BalancePolicy, BalancePolicySpec, Mode, Window
from reconciler.model.status import (
    Condition,
    ConditionType,
    MoveOutcome,
    MoveResult,
    ReconcileStatus,
    RoundOutcome,
    RoundResult,
)

START = datetime(2025, 3, 3, 12, 0, tzinfo=UTC)  # a Monday


class FakeClock:
    def __init__(self, now: datetime = START) -> None:
        self._now = now
        self.lock = threading.Lock()

    def now(self) -> datetime:
        with self.lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self._now += timedelta(seconds=seconds)

    def set(self, when: datetime) -> None:
        with self.lock:
            self._now = max(self._now, when)


@dataclass
class FakeTime:
    """Sleep in virtual time; ``at(when, action)`` runs an action (a trigger) mid-sleep."""

    clock: FakeClock = field(default_factory=FakeClock)
    sleeps: list[float] = field(default_factory=list)
    events: list[tuple[datetime, Callable[[], None]]] = field(default_factory=list)

    def at(self, when: datetime, action: Callable[[], None]) -> None:
        self.events.append((when, action))
        self.events.sort(key=lambda e: e[0])

    def sleep(self, seconds: float, wake: threading.Event) -> None:
        self.sleeps.append(seconds)
        if wake.is_set():
            return
        end = self.clock.now() + timedelta(seconds=seconds)
        while self.events and self.events[0][0] <= end:
            when, action = self.events.pop(0)
            self.clock.set(when)
            action()
            same_instant = self.events and self.events[0][0] == when
            if wake.is_set() and not same_instant:
                return
        self.clock.set(end)


def policy(
    mode: Mode = Mode.APPLY,
    interval: timedelta = timedelta(minutes=10),
    windows: list[Window] | None = None,
) -> BalancePolicy:
    return BalancePolicy(
        api_version=API_VERSION,
        kind="BalancePolicy",
        metadata=Metadata(name="p"),
        spec=BalancePolicySpec(mode=mode, interval=interval, windows=windows),
    )


def status(
    now: datetime,
    *,
    observed: bool = True,
    outcome: RoundOutcome = RoundOutcome.IN_SYNC,
    moves: list[MoveOutcome] | None = None,
    stalled: str | None = None,
) -> ReconcileStatus:
    conditions = []
    if stalled is not None:
        conditions.append(
            Condition(
                type=ConditionType.STALLED,
                status=True,
                reason=stalled,
                message="stalled",
                last_transition=now,
            )
        )
    return ReconcileStatus(
        cluster="lab",
        observed_since=now if observed else None,
        last_observed_at=now if observed else None,
        conditions=conditions,
        last_result=RoundResult(
            started_at=now,
            finished_at=now,
            trigger="t",
            outcome=outcome,
            moves=[
                MoveResult(vm=f"vm{i}", source="a", target="b", outcome=o, reason="Balance")
                for i, o in enumerate(moves or [])
            ],
        ),
    )


@dataclass
class Call:
    at: datetime
    trigger: str
    act: bool


@dataclass
class FakeRound:
    """``run_round``: records calls; ``script`` gives each call's result or error in turn."""

    clock: FakeClock
    script: list[ReconcileStatus | Exception | Callable[[], ReconcileStatus]] = field(
        default_factory=list
    )
    calls: list[Call] = field(default_factory=list)
    seconds: float = 1.0
    on_call: Callable[[], None] | None = None

    def __call__(self, trigger: str, act: bool) -> ReconcileStatus:
        self.calls.append(Call(self.clock.now(), trigger, act))
        if self.on_call is not None:
            self.on_call()
        self.clock.advance(self.seconds)
        item = self.script.pop(0) if self.script else status(self.clock.now())
        if isinstance(item, Exception):
            raise item
        if callable(item):
            return item()
        return item


class Policies:
    """``load_policy`` returning the current policy, or raising the current error."""

    def __init__(self, value: BalancePolicy | Exception) -> None:
        self.value = value
        self.loads = 0

    def __call__(self) -> BalancePolicy:
        self.loads += 1
        if isinstance(self.value, Exception):
            raise self.value
        return self.value
