"""``drain``/``undrain --repo``: the maintenance edit as a commit (or a proposal branch), the
edited folder validated first; nothing invalid is ever pushed."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.cli import main
from tests.gitrepos import git, state_remote

pytestmark = pytest.mark.libvirt
pytest.importorskip("libvirt")


def _remote(tmp_path: Path) -> tuple[str, Path]:
    lab = tmp_path / "lab"
    assert main(["lab", "up", "--driver", "test", "--dir", str(lab)]) == 0
    return state_remote(tmp_path, lab / "cluster-state")


def _head_file(person: Path, path: str, ref: str = "origin/main") -> str:
    git(person, "fetch", "--quiet", "origin")
    return git(person, "show", f"{ref}:{path}")


def test_drain_repo_commits_the_edit_and_undrain_takes_it_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, person = _remote(tmp_path)
    before = _head_file(person, "cluster-state/cluster.yaml")
    common = ["--repo", url, "--cache-dir", str(tmp_path / "cache")]
    code = main(["drain", "kvm-01", "cluster-state", *common, "--state-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code in (0, 2), err
    assert "in maintenance" in err
    after = _head_file(person, "cluster-state/cluster.yaml")
    assert "maintenance: true" in after
    message = git(person, "log", "-1", "--format=%B", "origin/main")
    assert "Reconciler-Trigger: maintenance" in message
    assert main(["undrain", "kvm-01", "cluster-state", *common]) == 0
    assert _head_file(person, "cluster-state/cluster.yaml") == before


def test_drain_repo_refuses_an_edit_that_leaves_the_folder_invalid_and_pushes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, person = _remote(tmp_path)
    rules = person / "cluster-state" / "rules.yaml"
    text = rules.read_text()
    pin = (
        "    - name: keep-here\n      type: pin\n      vms: {names: [vm-01]}\n"
        "      hosts: {names: [kvm-01]}\n"
    )
    if "rules: []" in text:
        text = text.replace("rules: []", "rules:\n" + pin)
    else:
        text = text.rstrip("\n") + "\n" + pin
    rules.write_text(text)
    git(person, "commit", "--quiet", "-am", "pin vm-01")
    git(person, "push", "--quiet", "origin", "main")
    head = git(person, "rev-parse", "HEAD").strip()
    code = main(
        ["drain", "kvm-01", "cluster-state", "--repo", url, "--cache-dir", str(tmp_path / "c")]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "keep-here" in err or "pin" in err
    assert "nothing was written" in err
    git(person, "fetch", "--quiet", "origin")
    assert git(person, "rev-parse", "origin/main").strip() == head


def test_drain_propose_pushes_a_branch_and_leaves_main_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RECONCILER_FORGE_TOKEN", raising=False)
    monkeypatch.delenv("RECONCILER_FORGE", raising=False)
    url, person = _remote(tmp_path)
    head = git(person, "rev-parse", "HEAD").strip()
    common = ["cluster-state", "--repo", url, "--propose", "--cache-dir", str(tmp_path / "c")]
    assert main(["undrain", "kvm-01", *common]) == 0
    code = main(["drain", "kvm-01", *common, "--state-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code in (0, 2), err
    git(person, "fetch", "--quiet", "origin")
    assert git(person, "rev-parse", "origin/main").strip() == head
    branches = git(person, "branch", "-r")
    assert "reconciler/maintenance/" in branches
