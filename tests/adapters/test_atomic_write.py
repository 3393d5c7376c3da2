"""The one atomic writer behind the status file, the recovery state and the cluster files it
edits: a failure at any step leaves the old file whole and no temporary file, the mode is the
one asked for (the recovery state, which holds domain XML, is its owner's only), and the
rename reaches the directory."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from reconciler.adapters.files.recovery import FileRecoveryStore
from reconciler.adapters.files.status import FileStatusStore
from reconciler.adapters.files.text import rewrite_file
from reconciler.errors import TerminalError
from reconciler.model.recovery import RecoveryState
from reconciler.model.status import ReconcileStatus


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_each_file_gets_its_mode(tmp_path: Path) -> None:
    status, recovery = FileStatusStore("lab", tmp_path), FileRecoveryStore("lab", tmp_path)
    status.save(ReconcileStatus(cluster="lab"))
    recovery.save(RecoveryState(cluster="lab"))
    assert _mode(status.path) == 0o644
    assert _mode(recovery.path) == 0o600
    placement = tmp_path / "placement.yaml"
    placement.write_text("a\n")
    placement.chmod(0o640)
    assert rewrite_file(placement, lambda t: t + "b\n")
    assert placement.read_text() == "a\nb\n"
    assert _mode(placement) == 0o640


@pytest.mark.parametrize("step", ["write", "fsync", "chmod", "replace"])
def test_a_failure_at_any_step_keeps_the_old_file_and_leaves_no_temporary_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    store = FileRecoveryStore("lab", tmp_path)
    old = RecoveryState(cluster="lab")
    store.save(old)

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    if step == "write":
        monkeypatch.setattr(os, "fdopen", lambda fd, mode: _BrokenFile(fd), raising=True)
    else:
        monkeypatch.setattr(os, step, broken)
    with pytest.raises(TerminalError) as caught:
        store.save(RecoveryState(cluster="lab", intents={}))
    assert "no space left" in caught.value.message.lower()
    assert caught.value.hint is not None
    assert "--state-dir" in caught.value.hint
    monkeypatch.undo()
    assert store.load() == old
    assert [p.name for p in store.path.parent.iterdir()] == ["recovery.json"]


class _BrokenFile:
    """A file whose write fails as on a full disk; closes its descriptor."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> _BrokenFile:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def write(self, data: bytes) -> int:
        raise OSError(28, "No space left on device")


def test_the_rename_is_flushed_with_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    FileRecoveryStore("lab", tmp_path).save(RecoveryState(cluster="lab"))
    assert synced == ["file", "dir"]
