"""``--coordination`` on a real etcd: a command finds the cluster held there and names the
holder; once it is free the command takes it, and gives it back when done."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.adapters.etcd.lease import ToozLease
from reconciler.cli import main
from tests.adapters.test_lease_tooz import ETCD, Etcd

pytestmark = pytest.mark.libvirt
pytest.importorskip("libvirt")


@pytest.mark.skipif(ETCD is None, reason="etcd is not installed (Debian package etcd-server)")
def test_apply_with_coordination_is_refused_while_another_holds_then_takes_and_releases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lab = tmp_path / "lab"
    assert main(["lab", "up", "--driver", "test", "--dir", str(lab)]) == 0
    folder = lab / "cluster-state"
    etcd = Etcd(tmp_path / "etcd")
    other = ToozLease(etcd.url, "lab", identity="ops-laptop", timeout=2.0)
    try:
        assert other.acquire()
        capsys.readouterr()
        args = ["apply", str(folder), "--yes", "--coordination", etcd.url]
        code = main([*args, "--state-dir", str(tmp_path / "s1")])
        err = capsys.readouterr().err
        assert code == 1
        assert "ops-laptop" in err
        other.release()
        code = main([*args, "--dry-run", "--state-dir", str(tmp_path / "s2")])
        assert code == 0
        code = main([*args, "--state-dir", str(tmp_path / "s3")])
        err = capsys.readouterr().err
        assert code != 1, err
        assert other.acquire(), "the command gave the cluster back"
    finally:
        other.close()
        etcd.close()
