"""A run round whose hold cannot be re-checked before acting starts nothing, says so, and is
tried again soon rather than at the next interval."""

from __future__ import annotations

import logging
import threading

import pytest

from reconciler.cli.acting import confirming
from reconciler.engine.leadership import LeaseKeeper
from reconciler.engine.triggers import Wakeup
from reconciler.model.plan import Plan


class Lease:
    def __init__(self) -> None:
        self.confirms = True

    def acquire(self) -> bool:
        return True

    def confirm(self) -> bool:
        return self.confirms

    def holder(self) -> str | None:
        return "other-instance"

    def release(self) -> None: ...


def plan() -> Plan:
    return Plan.model_validate_json(
        '{"cluster": "lab", "plan_id": "sha256:0123456789abcdef", '
        '"created_at": "2026-01-01T00:00:00Z"}'
    )


def test_an_unconfirmed_hold_acts_on_nothing_says_so_and_wakes_the_loop_soon(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lease, wakeup = Lease(), Wakeup()
    keeper = LeaseKeeper(lease, wakeup, threading.Event(), retry_period=60)
    assert keeper.acquire(0)
    wakeup.take()  # the leader's own wakeup
    confirm = confirming(keeper, wakeup, "lab", retry=0.05)
    assert confirm(plan())
    assert not wakeup.event.wait(0.2), "a confirmed hold schedules nothing"
    lease.confirms = False
    with caplog.at_level(logging.WARNING):
        assert not confirm(plan())
    assert "could not be confirmed (held by other-instance)" in caplog.text
    assert wakeup.event.wait(30), "the round is tried again soon"  # its timer: 0.05 s
    assert wakeup.take() == ["hold"]
    keeper.stop()
