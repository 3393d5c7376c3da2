"""The queue of audit records not written yet, in the state directory: kept across a
restart, owner-only, removed when empty, and never overwritten when it cannot be read."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from reconciler.adapters.files.record_queue import FILE_NAME, FileRecordQueue
from reconciler.model.acting import QueuedRecord, Record


def queued(n: int) -> QueuedRecord:
    return QueuedRecord(
        id=f"id-{n}",
        record=Record(cluster="lab", plan_id=f"p{n}", revision="c0", results=[], placement={}),
    )


def test_records_are_kept_in_order_across_a_new_instance_and_the_file_goes_when_empty(
    tmp_path: Path,
) -> None:
    FileRecordQueue("lab", tmp_path).save([queued(1), queued(2)])
    path = tmp_path / "lab" / FILE_NAME
    assert path.stat().st_mode & 0o777 == 0o600
    again = FileRecordQueue("lab", tmp_path)
    assert [q.id for q in again.load()] == ["id-1", "id-2"]
    again.save([])
    assert not path.exists()
    assert again.load() == []


@pytest.mark.parametrize("text", ["{not json", '{"records": [{"id": 1}]}', "\udcff"])
def test_a_queue_that_cannot_be_read_is_set_aside_for_a_person_not_overwritten(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "lab" / FILE_NAME
    path.parent.mkdir()
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    queue = FileRecordQueue("lab", tmp_path)
    with caplog.at_level(logging.WARNING):
        assert queue.load() == []
    aside = path.with_name(FILE_NAME + ".unreadable")
    assert aside.read_bytes() == text.encode("utf-8", "surrogateescape")
    assert "for a person to read" in caplog.text
    queue.save([queued(3)])
    assert [q.id for q in queue.load()] == ["id-3"]
    assert aside.exists()
