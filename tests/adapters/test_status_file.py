"""The status file on real file systems: atomic under concurrent writers, a torn file is a
warning and treated as absent, a read-only or full state directory is a clear error."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.files.status import FileStatusStore
from reconciler.errors import TerminalError
from reconciler.model.status import ReconcileStatus


def _status(rounds: int) -> ReconcileStatus:
    return ReconcileStatus(cluster="lab", imbalance_rounds={"x86_64": rounds}, rounds=rounds)


def test_concurrent_writers_never_leave_a_torn_or_temporary_file(tmp_path: Path) -> None:
    store = FileStatusStore("lab", tmp_path)
    store.save(_status(0))
    errors: list[BaseException] = []
    stop = threading.Event()

    def write(first: int) -> None:
        try:
            for i in range(first, first + 60):
                FileStatusStore("lab", tmp_path).save(_status(i))
        except BaseException as exc:
            errors.append(exc)

    def read() -> None:
        while not stop.is_set():
            try:
                assert FileStatusStore("lab", tmp_path).load() is not None
            except BaseException as exc:
                errors.append(exc)
                return

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(n * 1000,)) for n in range(6)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    reader.join()
    assert errors == []
    assert store.load() is not None
    assert sorted(p.name for p in store.path.parent.iterdir()) == ["status.json"]


@pytest.mark.parametrize(
    "text", ["", "{not json", '{"cluster": "lab", "rounds": "many"}', "[]", '{"clus']
)
def test_a_torn_or_invalid_status_file_is_a_warning_and_treated_as_absent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    store = FileStatusStore("lab", tmp_path)
    store.path.parent.mkdir(parents=True)
    store.path.write_text(text)
    with caplog.at_level(logging.WARNING):
        assert store.load() is None
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert str(store.path) in record.getMessage()
    assert "treated as absent" in record.getMessage()
    store.save(_status(3))  # and the next save replaces it
    assert store.load() == _status(3)


@contextlib.contextmanager
def _mounted(path: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted on ``path`` with ``options``; skips where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory no write can go to: a read-only tmpfs as root, else one without write
    permission."""
    path = tmp_path / "ro"
    if os.geteuid() != 0:
        (path / "lab").mkdir(parents=True)
        path.chmod(0o555)
        (path / "lab").chmod(0o555)
        yield path
        (path / "lab").chmod(0o755)
        path.chmod(0o755)
        return
    with _mounted(path, "ro,size=64k") as mounted:
        yield mounted


def test_a_read_only_state_directory_is_a_clear_error(read_only_dir: Path) -> None:
    store = FileStatusStore("lab", read_only_dir)
    with pytest.raises(TerminalError) as caught:
        store.save(_status(1))
    err = caught.value
    assert str(store.path.parent) in err.message
    assert "read-only" in err.message.lower() or "permission denied" in err.message.lower()
    assert err.hint is not None
    assert "--state-dir" in err.hint
    assert store.load() is None  # nothing was left behind


def test_a_full_state_directory_is_a_clear_error_and_keeps_the_last_status(
    tmp_path: Path,
) -> None:
    with _mounted(tmp_path / "full", "size=64k") as full:
        store = FileStatusStore("lab", full)
        store.save(_status(1))
        filler = full / "filler"
        with contextlib.suppress(OSError), filler.open("wb") as f:
            while True:
                f.write(b"x" * 4096)
                f.flush()
        big = ReconcileStatus(
            cluster="lab", imbalance_rounds={f"arch-{i}" * 20: i for i in range(3000)}, rounds=2
        )
        with pytest.raises(TerminalError) as caught:
            store.save(big)
        assert "no space left" in caught.value.message.lower()
        assert caught.value.hint is not None
        assert store.load() == _status(1)  # the previous status, whole
        assert sorted(p.name for p in store.path.parent.iterdir()) == ["status.json"]
