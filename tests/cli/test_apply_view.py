"""What a person sees during apply: a progress bar per migration on a terminal, plain lines
elsewhere, a summary at the end."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console

from reconciler.cli.apply_view import View
from reconciler.engine.execute import Event
from reconciler.engine.ports import MigrationProgress
from reconciler.engine.round import RoundReport
from reconciler.model.base import HostName, VmName
from reconciler.model.plan import Move, Reason
from reconciler.model.status import (
    MoveOutcome,
    MoveResult,
    ReconcileStatus,
    RoundOutcome,
    RoundResult,
)

MIB = 1024**2
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
MOVE = Move(
    vm=VmName("web-1"),
    source=HostName("kvm-01"),
    target=HostName("kvm-02"),
    memory=64 * MIB,
    vcpus=1,
    reason=Reason.BALANCE,
    detail="balance",
    wave=0,
)
DONE = MoveResult(
    vm="web-1",
    source="kvm-01",
    target="kvm-02",
    outcome=MoveOutcome.SUCCEEDED,
    reason="Balance",
    seconds=0.8,
    downtime_ms=30.0,
    data_bytes=64 * MIB,
)


def events(view: View) -> None:
    view.event(Event("start", MOVE))
    view.event(
        Event(
            "progress",
            MOVE,
            progress=MigrationProgress(vm="web-1", data_total=64 * MIB, data_processed=32 * MIB),
        )
    )
    view.event(Event("done", MOVE, result=DONE))
    view.close()


def test_a_terminal_gets_a_progress_bar_per_migration() -> None:
    out = io.StringIO()
    view = View(
        json_output=False,
        placement={},
        console=Console(file=out, force_terminal=True, width=120),
    )
    events(view)
    text = out.getvalue()
    assert "web-1 kvm-01 -> kvm-02 succeeded" in text
    assert "64.0 MiB" in text or "64.0/64.0 MiB" in text


def test_elsewhere_one_plain_line_per_decision_and_a_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    view = View(json_output=False, placement={}, console=Console(file=io.StringIO()))
    events(view)
    status = ReconcileStatus(
        cluster="lab",
        last_result=RoundResult(
            started_at=T0,
            finished_at=T0 + timedelta(seconds=2),
            trigger="manual",
            outcome=RoundOutcome.APPLIED,
            moves=[DONE],
        ),
    )
    view.summary(RoundReport(status=status, results=[DONE], acted=True))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "migrating web-1: kvm-01 -> kvm-02 (Balance)"
    assert lines[1].startswith("succeeded web-1: kvm-01 -> kvm-02 in 0.8s")
    assert any(
        "1 moved, 0 failed, 0 skipped, 0 aborted; 2.0s, 64MiB sent, downtime total 30 ms" in line
        for line in lines
    )
