"""The hold a cluster declares in cluster.yaml (spec.hold), taken by every acting command plus
this machine's lock: a folder ``apply`` takes the declared git lease, is refused while another
actor holds it (naming it) or while this machine's lock is held, refuses when the lease cannot
be reached (saying which and why), and acts under the lock alone only with --local-lock-only,
which says loudly what it bypasses. Judged from the lease's ref in the repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from reconciler.adapters.etcd.lease import ToozLease
from reconciler.adapters.files.lock import FileLease, cluster_lock_path
from reconciler.adapters.files.text import rewrite_file
from reconciler.adapters.git.lease import GitLease, lease_ref
from reconciler.cli import main
from reconciler.config import load_desired
from tests.adapters.test_lease_tooz import ETCD, Etcd

pytestmark = pytest.mark.libvirt
pytest.importorskip("libvirt")


def lab_folder(tmp_path: Path, hold: str) -> Path:
    """The test-driver lab's cluster folder, its cluster.yaml declaring ``hold``."""
    lab = tmp_path / "lab"
    assert main(["lab", "up", "--driver", "test", "--dir", str(lab)]) == 0
    folder = lab / "cluster-state"
    rewrite_file(
        folder / "cluster.yaml", lambda text: text.replace("spec:\n", f"spec:\n  hold: {hold}\n", 1)
    )
    return folder


def bare(tmp_path: Path) -> str:
    path = tmp_path / "state.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(path)], check=True)
    return f"file://{path}"


def ref(url: str) -> str:
    done = subprocess.run(
        ["git", "ls-remote", url, lease_ref("lab")], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def apply(folder: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["apply", str(folder), "--yes", "--state-dir", str(tmp_path / "state"), *extra]


def test_a_folder_apply_takes_the_declared_git_lease_and_is_refused_while_another_holds_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = bare(tmp_path)
    folder = lab_folder(tmp_path, f"{{repository: {url}}}")
    other = GitLease(url, "lab", tmp_path / "other.git", identity="run@kvm-admin-1")
    assert other.acquire()
    capsys.readouterr()
    code = main(apply(folder, tmp_path))
    err = capsys.readouterr().err
    assert code == 1
    assert "is held by run@kvm-admin-1 (since " in err
    assert f"), through the git lease of {url} (cluster.yaml spec.hold)" in err
    other.release()
    assert ref(url), "the lease's ref is there, released"
    before = ref(url)
    code = main(apply(folder, tmp_path))
    err = capsys.readouterr().err
    assert code != 1, err
    assert ref(url) != before, "the folder apply took the declared lease (and gave it back)"
    assert other.acquire(), "given back"
    other.release()


def test_an_unreachable_declared_lease_refuses_and_only_the_override_acts_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"file://{tmp_path}/gone.git"
    folder = lab_folder(tmp_path, f"{{repository: {url}}}")
    capsys.readouterr()
    code = main(apply(folder, tmp_path))
    err = capsys.readouterr().err
    assert code == 1
    assert (
        f"cluster 'lab' could not be held: the git lease of {url} (cluster.yaml spec.hold) "
        "could not be taken: cannot read the lease" in err
    )
    assert "--local-lock-only" in err
    code = main(apply(folder, tmp_path, "--local-lock-only"))
    err = capsys.readouterr().err
    assert code != 1, err
    assert (
        "WARNING: --local-lock-only: holding cluster 'lab' by this machine's lock alone, "
        f"bypassing the git lease of {url} (cluster.yaml spec.hold): an actor on another "
        "machine may move the same VMs at the same time" in err
    )


def test_this_machines_lock_is_taken_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = bare(tmp_path)
    folder = lab_folder(tmp_path, f"{{repository: {url}}}")
    desired = load_desired(folder)
    hosts = [(h.name, h.uri) for h in desired.cluster.spec.hosts]
    local = FileLease(cluster_lock_path("lab", hosts), command="run")
    assert local.acquire()
    try:
        capsys.readouterr()
        # a repository source, the declared lease free: the lock of this machine still stops it
        code = main(apply(folder, tmp_path))
        err = capsys.readouterr().err
        assert code == 1
        assert "is held by run (pid" in err
        assert "through this machine's lock" in err
        assert ref(url) == "", "the declared lease was not even asked"
    finally:
        local.release()


@pytest.mark.skipif(ETCD is None, reason="etcd is not installed (Debian package etcd-server)")
def test_a_declared_etcd_lease_is_taken_whatever_the_command_was_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    etcd = Etcd(tmp_path / "etcd")
    other = ToozLease(etcd.url, "lab", identity="ops-laptop", timeout=2.0)
    try:
        folder = lab_folder(tmp_path, f"{{etcd: {etcd.url}}}")
        assert other.acquire()
        capsys.readouterr()
        code = main(apply(folder, tmp_path))
        err = capsys.readouterr().err
        assert code == 1
        assert "held by ops-laptop" in err
        assert f"through the etcd lease at {etcd.url} (cluster.yaml spec.hold)" in err
        other.release()
        code = main(apply(folder, tmp_path))
        assert code != 1, capsys.readouterr().err
        assert other.acquire(), "the command gave the cluster back"
    finally:
        other.close()
        etcd.close()
