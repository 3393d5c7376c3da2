"""``apply`` and ``drain --apply`` without ``--yes`` and with stdin not a terminal are refused
before anything: no hold taken, no status written, no maintenance edit made (test-driver lab:
the evacuation of a drained host gives the plan moves to confirm)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.cli import main
from reconciler.config import load_desired

pytestmark = pytest.mark.libvirt
pytest.importorskip("libvirt")


def _lab_with_moves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    lab = tmp_path / "lab"
    assert main(["lab", "up", "--driver", "test", "--dir", str(lab)]) == 0
    folder = lab / "cluster-state"
    # kvm-01 in maintenance: its VMs have to leave, so the plan has moves to confirm
    assert main(["drain", "kvm-01", str(folder), "--state-dir", str(tmp_path / "look")]) == 2
    capsys.readouterr()
    return folder


def test_apply_off_a_terminal_without_yes_is_refused_and_writes_no_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _lab_with_moves(tmp_path, capsys)
    state = tmp_path / "state"
    code = main(["apply", str(folder), "--state-dir", str(state)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "stdin is not a terminal" in err
    assert "--yes" in err
    written = sorted(str(p.relative_to(state)) for p in state.rglob("*")) if state.exists() else []
    assert written == [], f"a refused apply wrote {written}"


def test_apply_off_a_terminal_without_yes_is_refused_before_it_takes_the_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from reconciler.adapters.files.lock import FileLease, cluster_lock_path

    folder = _lab_with_moves(tmp_path, capsys)
    cluster = load_desired(folder).cluster
    hosts = [(h.name, h.uri) for h in cluster.spec.hosts]
    other = FileLease(cluster_lock_path(cluster.metadata.name, hosts), command="run")
    assert other.acquire()
    try:
        code = main(["apply", str(folder), "--state-dir", str(tmp_path / "state")])
        err = capsys.readouterr().err
    finally:
        other.release()
    assert code == 1, err
    # refused for the confirmation it cannot ask, not for the hold it never tried to take
    assert "stdin is not a terminal" in err
    assert "is held by" not in err


def test_drain_apply_off_a_terminal_without_yes_edits_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lab = tmp_path / "lab"
    assert main(["lab", "up", "--driver", "test", "--dir", str(lab)]) == 0
    cluster = lab / "cluster-state" / "cluster.yaml"
    before = cluster.read_text()
    capsys.readouterr()
    code = main(
        ["drain", "kvm-01", str(cluster.parent), "--apply", "--state-dir", str(tmp_path / "s")]
    )
    err = capsys.readouterr().err
    assert code == 1, err
    assert "stdin is not a terminal" in err
    assert cluster.read_text() == before, "a refused drain --apply put the host in maintenance"
    assert not (tmp_path / "s").exists()
