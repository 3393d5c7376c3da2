"""A rollout's records in the state directory: kept across processes, never overwritten by a
writer that read older ones, never taken for none when torn."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.adapters.files.rollout_progress import FileRolloutProgress
from reconciler.errors import TerminalError
from reconciler.model.rollout_progress import StepOutcome, StepRecord

T = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)


def rec(step: str) -> StepRecord:
    return StepRecord(host="h0", step=step, outcome=StepOutcome.STARTED, at=T, by="a")


def test_records_are_appended_and_read_back_by_another_process(tmp_path: Path) -> None:
    store = FileRolloutProgress("lab", tmp_path)
    progress = store.load("r")
    assert progress.records == []
    progress = store.append(progress, rec("drain"))
    progress = store.append(progress, rec("command/x"))
    again = FileRolloutProgress("lab", tmp_path).load("r")
    assert [r.step for r in again.records] == ["drain", "command/x"]
    assert store.path("r") == tmp_path / "lab" / "rollouts" / "r.json"
    assert store.logs("r") == tmp_path / "lab" / "rollouts" / "r"


def test_a_writer_that_read_older_records_is_refused(tmp_path: Path) -> None:
    one = FileRolloutProgress("lab", tmp_path)
    stale = one.load("r")
    one.append(stale, rec("drain"))
    with pytest.raises(TerminalError, match="changed meanwhile"):
        one.append(stale, rec("drain"))
    assert len(one.load("r").records) == 1


def test_torn_records_are_an_error_not_none(tmp_path: Path) -> None:
    store = FileRolloutProgress("lab", tmp_path)
    store.path("r").parent.mkdir(parents=True)
    store.path("r").write_text('{"cluster": "lab"')
    with pytest.raises(TerminalError, match="not JSON"):
        store.load("r")
