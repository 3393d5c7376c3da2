"""``drain`` and ``undrain`` on a test-driver lab: a minimal edit, the evacuation plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.cli import main
from reconciler.config import load_desired

pytestmark = pytest.mark.libvirt
pytest.importorskip("libvirt")


def test_drain_marks_the_host_shows_its_evacuation_and_undrain_moves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lab = tmp_path / "lab"
    assert main(["lab", "up", "--driver", "test", "--dir", str(lab)]) == 0
    folder = lab / "cluster-state"
    cluster = folder / "cluster.yaml"
    cluster.write_text("# kept: a note for people\n" + cluster.read_text())
    capsys.readouterr()
    code = main(["drain", "kvm-01", str(folder), "--state-dir", str(tmp_path / "s")])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert "kvm-01 is in maintenance" in err
    assert "Maintenance" in out
    hosts = {h.name: h for h in load_desired(folder).cluster.spec.hosts}
    assert hosts["kvm-01"].maintenance
    assert not hosts["kvm-02"].maintenance
    assert cluster.read_text().startswith("# kept: a note for people\n")
    assert main(["undrain", "kvm-01", str(folder)]) == 0
    assert not {h.name: h for h in load_desired(folder).cluster.spec.hosts}["kvm-01"].maintenance
    assert main(["drain", "kvm-99", str(folder)]) == 1
    assert "one of: kvm-01" in capsys.readouterr().err
