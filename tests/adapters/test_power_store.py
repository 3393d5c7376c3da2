"""The power book on a real file system: saved and read back whole, atomic under concurrent
writers, a torn file a warning read as absent. (A read-only or full state directory: the same
``JsonStore`` as the status, proven in test_status_file.py.)"""

from __future__ import annotations

import logging
import stat
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reconciler.adapters.files.power import FilePowerStore
from reconciler.model.power import PowerAction, PowerBook, PowerIntent, StandbyHost

T0 = datetime(2025, 3, 3, 2, 0, tzinfo=UTC)


def book(n: int = 0) -> PowerBook:
    return PowerBook(
        cluster="lab",
        standby={"kvm-03": StandbyHost(since=T0, why=f"demand 31% of 3 hosts, round {n}")},
        booting={"kvm-04": T0 + timedelta(minutes=n)},
        intents={
            "kvm-05": PowerIntent(
                host="kvm-05", action=PowerAction.OFF, started_at=T0, why="consolidation"
            )
        },
        failed={"kvm-06": "the Redfish BMC of kvm-06 answered 401"},
    )


def test_a_book_is_read_back_as_saved(tmp_path: Path) -> None:
    store = FilePowerStore("lab", tmp_path)
    assert store.load() is None
    store.save(book(1))
    assert store.path == tmp_path / "lab" / "power.json"
    assert FilePowerStore("lab", tmp_path).load() == book(1)
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o640
    assert '"kind": "PowerBook"' in store.path.read_text()


def test_concurrent_writers_never_leave_a_torn_or_temporary_file(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def write(first: int) -> None:
        try:
            for i in range(first, first + 30):
                FilePowerStore("lab", tmp_path).save(book(i))
                assert FilePowerStore("lab", tmp_path).load() is not None
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(n * 100,)) for n in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    assert errors == []
    assert sorted(p.name for p in (tmp_path / "lab").iterdir()) == ["power.json"]


@pytest.mark.parametrize("text", ['{"kind": "PowerBook", "cluster": "lab", "standby": {"kvm', "[]"])
def test_a_torn_or_foreign_file_is_a_warning_and_read_as_absent(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = FilePowerStore("lab", tmp_path)
    store.path.parent.mkdir(parents=True)
    store.path.write_text(text)
    with caplog.at_level(logging.WARNING):
        assert store.load() is None
    assert str(store.path) in caplog.text
    assert "no longer knows which hosts it powered off" in caplog.text
    store.save(book())
    assert store.load() == book()
