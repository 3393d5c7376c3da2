"""Branch heads read through GitPython: no process started, git's answers, and git asked
where GitPython would not read the refs as git does."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from reconciler.adapters.git.repo import GitStateRepo
from tests.gitrepos import git, state_remote


@pytest.fixture
def remote(tmp_path: Path) -> tuple[str, Path]:
    return state_remote(tmp_path)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The argv of every process started while the test runs, from when it asks."""
    argvs: list[Any] = []
    real = subprocess.Popen.__init__

    def noting(self: subprocess.Popen[bytes], args: Any, *rest: Any, **kw: Any) -> None:
        argvs.append(args)
        real(self, args, *rest, **kw)

    monkeypatch.setattr(subprocess.Popen, "__init__", noting)
    return argvs


def _repo(url: str, tmp_path: Path) -> GitStateRepo:
    repo = GitStateRepo(url, cache_dir=tmp_path / "cache")
    repo.fetch()
    repo.head("main")  # cloned, and GitPython imported (which runs `git version` once)
    return repo


def test_a_branch_head_is_read_without_starting_git(
    remote: tuple[str, Path], tmp_path: Path, started: list[Any]
) -> None:
    url, person = remote
    repo = _repo(url, tmp_path)
    clone = repo.path
    tip = git(person, "rev-parse", "HEAD").strip()
    started.clear()
    assert repo.head("main") == tip
    assert repo.head("HEAD") == tip  # origin/HEAD: a symbolic ref, followed
    assert repo.head("no-such-branch") is None
    assert repo.head("a..b") is None  # not a ref name
    assert repo.resolve("main") == tip
    assert started == []
    # the same from packed-refs, as a fetch's gc leaves them
    subprocess.run(["git", "pack-refs", "--all"], cwd=clone, check=True)
    assert not (clone / ".git" / "refs" / "remotes" / "origin" / "main").exists()
    started.clear()
    assert repo.head("main") == tip
    assert started == []


def test_a_ref_gitpython_cannot_parse_is_read_by_git(
    remote: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = remote
    repo = _repo(url, tmp_path)
    broken = repo.path / ".git" / "refs" / "remotes" / "origin" / "broken"
    broken.write_text("")  # a ref a crash left empty: git ignores it
    assert repo.head("broken") is None
    broken.write_text("not an object name\n")
    assert repo.head("broken") is None


def test_a_callers_repository_in_the_environment_changes_nothing(
    remote: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in a git hook, which runs with GIT_DIR and may have GIT_COMMON_DIR: GitPython would
    read that repository's refs, git through the runner never sees them."""
    url, person = remote
    repo = _repo(url, tmp_path)
    work = tmp_path / "other"
    git(tmp_path, "init", "--quiet", str(work))
    git(work, "commit", "--quiet", "--allow-empty", "-m", "another repository")
    git(work, "update-ref", "refs/remotes/origin/main", "HEAD")
    other = work / ".git"
    tip = git(person, "rev-parse", "HEAD").strip()
    for name in ("GIT_DIR", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY"):
        value = str(other / "objects") if name == "GIT_OBJECT_DIRECTORY" else str(other)
        monkeypatch.setenv(name, value)
    assert repo.head("main") == tip


def test_a_sha256_repository_is_read_by_git(tmp_path: Path) -> None:
    """GitPython reads SHA-1 names only: a clone of a SHA-256 remote has its heads read by git."""
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", "--object-format=sha256", str(bare))
    person = tmp_path / "person"
    git(tmp_path, "init", "--quiet", "--object-format=sha256", "-b", "main", str(person))
    (person / "cluster-state").mkdir()
    (person / "cluster-state" / "cluster.yaml").write_text("kind: Cluster\n")
    git(person, "add", ".")
    git(person, "commit", "--quiet", "-m", "The cluster")
    git(person, "push", "--quiet", str(bare), "main")
    tip = git(person, "rev-parse", "HEAD").strip()
    assert len(tip) == 64
    repo = GitStateRepo(f"file://{bare}", cache_dir=tmp_path / "cache")
    repo.fetch()
    assert repo.head("main") == tip
    assert repo.show(tip, "cluster-state/cluster.yaml") == "kind: Cluster\n"
    assert (repo.checkout(tip) / "cluster-state" / "cluster.yaml").is_file()
