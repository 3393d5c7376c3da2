"""Symbolic links in the state repository that lead outside it: the commit is refused with
the file and how to fix it (a project error, not a traceback), and nothing outside the
repository is read or written. Real git: a bare remote over file://."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reconciler.adapters.git.repo import GitStateRepo
from reconciler.errors import DocumentError
from tests.e2e.test_plan_cli import NOW, reconciler, write_scenario
from tests.gitrepos import git, state_remote


def _tree(root: Path) -> dict[str, tuple[int, float]]:
    """Every file under ``root`` with its size and modification time."""
    out = {}
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            info = path.stat()
            out[str(path.relative_to(root))] = (info.st_size, info.st_mtime)
    return out


def _push_link(person: Path, name: str, target: str) -> str:
    (person / name).symlink_to(target)
    git(person, "add", name)
    git(person, "commit", "-qm", f"link {name}")
    git(person, "push", "-q", "origin", "main")
    return git(person, "rev-parse", "HEAD").strip()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the repository, with a secret the link points at."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.yaml").write_text("token: do-not-read\n")
    return folder


@pytest.mark.parametrize("absolute", [True, False])
def test_a_link_out_of_the_repository_refuses_the_commit_naming_the_file(
    tmp_path: Path, outside: Path, absolute: bool
) -> None:
    url, person = state_remote(tmp_path)
    target = str(outside / "secret.yaml") if absolute else "../../outside/secret.yaml"
    head = _push_link(person, "cluster-state/secret.yaml", target)
    before = _tree(outside)
    repo = GitStateRepo(url, cache_dir=tmp_path / "cache")
    repo.fetch()
    with pytest.raises(DocumentError) as caught:
        repo.checkout(head)
    err = caught.value
    assert err.file == "cluster-state/secret.yaml"
    assert err.message.startswith(f"cluster-state/secret.yaml in commit {head[:12]} of ")
    assert f"is a symbolic link to {target}, outside the repository" in err.message
    assert err.hint is not None
    assert "replace the link with a copy of the file" in err.hint
    assert _tree(outside) == before  # nothing written there
    assert "do-not-read" not in str(err)
    trees = tmp_path / "cache" / f"{repo.path.name}.trees"
    assert not any(trees.iterdir())  # no partial checkout left


def test_a_link_inside_the_repository_is_checked_out(tmp_path: Path) -> None:
    url, person = state_remote(tmp_path)
    head = _push_link(person, "cluster-state/extra.yaml", "policy.yaml")
    repo = GitStateRepo(url, cache_dir=tmp_path / "cache")
    repo.fetch()
    tree = repo.checkout(head)
    link = tree / "cluster-state" / "extra.yaml"
    assert os.readlink(link) == "policy.yaml"


def test_plan_with_such_a_repository_ends_with_the_error_not_a_traceback(
    tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, snapshot = write_scenario("drain_maintenance", tmp_path / "scenario")
    url, person = state_remote(tmp_path, folder)
    _push_link(person, "cluster-state/passwd.yaml", "/etc/passwd")
    run = reconciler(
        capsys, "plan", "--repo", url, "--cache-dir", tmp_path / "cache",
        "--snapshot", snapshot, "--now", NOW, "--state-dir", tmp_path / "st",
    )  # fmt: skip
    assert run.code == 1
    assert "Traceback" not in run.err
    assert run.err.startswith("error: cluster-state/passwd.yaml in commit "), run.err
    assert "is a symbolic link to /etc/passwd, outside the repository" in run.err
    assert "hint: replace the link" in run.err
