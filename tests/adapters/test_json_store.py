"""The one JSON file store behind the status, the recovery state and the ledger of leftover
volumes: each is flushed to disk with its directory, a file that is not its document is a
warning and absent, one that cannot be written is the project's error (the ledger's owner keeps
going on its note in memory). The cluster files a round edits raise the project's error too."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.adapters.files.json_store import JsonStore
from reconciler.adapters.files.recovery import FileRecoveryStore
from reconciler.adapters.files.status import FileStatusStore
from reconciler.adapters.files.text import TextFile
from reconciler.adapters.libvirt.leftovers import Leftover, Leftovers
from reconciler.adapters.libvirt.volumes import Volume
from reconciler.errors import ReconcilerError, TerminalError
from reconciler.model.recovery import RecoveryState
from reconciler.model.status import ReconcileStatus

VOLUME = Volume(
    target="vda", pool="local", name="web-1.img", capacity=1, allocation=1, format=None, path="/x"
)
UUID = "6f1c1d5e-0000-4000-8000-000000000001"


def _ledger(path: Path) -> None:
    Leftovers(path).expect("kvm-02", [VOLUME], UUID)


def _status(path: Path) -> None:
    FileStatusStore("lab", path.parent).save(ReconcileStatus(cluster="lab"))


def _recovery(path: Path) -> None:
    FileRecoveryStore("lab", path.parent).save(RecoveryState(cluster="lab"))


@pytest.mark.parametrize("write", [_ledger, _status, _recovery])
def test_every_state_file_is_flushed_to_disk_with_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write: Callable[[Path], None]
) -> None:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    write(tmp_path / "lab" / "x.json")
    assert synced == ["file", "dir"]
    assert not [p for p in (tmp_path / "lab").iterdir() if p.name.endswith(".tmp")]


def test_the_ledger_is_read_back_by_the_next_process(tmp_path: Path) -> None:
    path = tmp_path / "leftover-volumes.json"
    _ledger(path)
    assert Leftovers(path).entries() == [Leftover("kvm-02", "local", "web-1.img", UUID)]


@pytest.mark.parametrize("text", ["", "{not json", "[1, 2]", '{"host": "kvm-02"}', "\xff"])
def test_a_ledger_that_is_not_one_is_a_warning_and_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    path = tmp_path / "leftover-volumes.json"
    path.write_bytes(text.encode("latin-1"))
    with caplog.at_level(logging.WARNING):
        ledger = Leftovers(path)
    assert ledger.entries() == []
    (record,) = caplog.records
    assert str(path) in record.getMessage()
    assert "treated as absent" in record.getMessage()


def test_a_ledger_that_cannot_be_written_keeps_its_note_in_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    ledger = Leftovers(blocker / "leftover-volumes.json")  # its folder cannot be made
    with caplog.at_level(logging.WARNING):
        ledger.expect("kvm-02", [VOLUME], UUID)
    assert ledger.entries() == [Leftover("kvm-02", "local", "web-1.img", UUID)]
    assert any("cannot write the leftover volumes record" in m for m in caplog.messages)


def test_a_store_that_cannot_write_raises_the_projects_error_naming_the_folder(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    store: JsonStore[list[int]] = JsonStore(
        blocker / "x.json",
        what="thing",
        parse=list,
        dump=str,
        mode=0o644,
        if_unreadable="",
    )
    with pytest.raises(TerminalError, match=f"cannot write the thing in {blocker}"):
        store.save([1])


def test_a_cluster_file_that_cannot_be_written_is_the_projects_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    placement = tmp_path / "placement.yaml"
    placement.write_text("a\n")

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(ReconcilerError, match="No space left on device") as caught:
        TextFile(placement).replace(lambda t: t + "b\n")
    assert not isinstance(caught.value.__cause__, ReconcilerError)
    assert placement.read_text() == "a\n"
