"""Reading a branch of the state repository (``checkout_head``): the one way every command
with ``--repo`` checks out the head of its branch, against a real remote over file://, and
the same words for each way it can go wrong, whichever command asked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.adapters.git.repo import GitStateRepo
from reconciler.cli import main
from reconciler.engine.transaction import checkout_commit, checkout_head
from reconciler.errors import ConfigError
from tests.gitrepos import ROOT, git, state_remote


@pytest.fixture
def remote(tmp_path: Path) -> tuple[str, Path]:
    return state_remote(tmp_path)


def _repo(url: str, tmp_path: Path) -> GitStateRepo:
    return GitStateRepo(url, cache_dir=tmp_path / "cache")


def test_the_head_of_the_branch_and_the_folder_in_it(
    remote: tuple[str, Path], tmp_path: Path
) -> None:
    url, person = remote
    repo = _repo(url, tmp_path)
    done = checkout_head(repo, "main", "cluster-state", display="the repo")
    assert done.commit == git(person, "rev-parse", "HEAD").strip()
    assert done.folder == done.root / "cluster-state"
    assert (done.folder / "cluster.yaml").is_file()
    # a person's push is read at the next checkout: it fetches first
    git(person, "commit", "--quiet", "--allow-empty", "-m", "later")
    git(person, "push", "--quiet", "origin", "main")
    later = checkout_head(repo, "main", "./cluster-state/", display="the repo")
    assert later.commit == git(person, "rev-parse", "HEAD").strip()
    assert later.folder == later.root / "cluster-state"


def test_what_is_wrong_is_said_the_same_way(remote: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = remote
    repo = _repo(url, tmp_path)
    with pytest.raises(ConfigError) as outside:
        checkout_head(repo, "main", "../elsewhere", display="the repo")
    assert outside.value.message == "PATH ../elsewhere must be a folder inside the repository"
    assert not (tmp_path / "cache").exists()  # refused before anything was fetched
    with pytest.raises(ConfigError) as absolute:
        checkout_head(repo, "main", "/srv/state", display="the repo")
    assert "PATH /srv/state must be a folder inside" in absolute.value.message
    with pytest.raises(ConfigError) as branch:
        checkout_head(repo, "nope", "cluster-state", display="the repo")
    assert branch.value.message == "the repo has no branch 'nope'"
    assert branch.value.hint == "pass the branch that holds the cluster folders with --branch"
    with pytest.raises(ConfigError) as folder:
        checkout_head(repo, "main", "elsewhere", display="the repo")
    head = repo.head("main") or ""
    assert folder.value.message == f"the repo has no folder elsewhere at main ({head[:12]})"
    assert folder.value.hint == "pass the cluster folder inside the repository as PATH"
    missing = checkout_head(repo, "main", "elsewhere", display="the repo", present=False)
    assert missing.folder == missing.root / "elsewhere"
    with pytest.raises(ConfigError) as revision:
        checkout_commit(repo, head, "elsewhere", display="r", at="v1", context=" (--base)")
    assert revision.value.message == f"r has no folder elsewhere at v1 ({head[:12]}) (--base)"


@pytest.mark.parametrize(
    "command",
    [
        ["validate", "PATH"],
        ["plan", "PATH", "--snapshot", "snapshot.json"],
        ["propose", "PATH", "--forge", "none"],
        ["history", "PATH"],
        ["drain", "kvm-01", "PATH"],
        ["undrain", "kvm-01", "PATH"],
        ["impact", "PATH", "--base", "main", "--head", "main"],
    ],
    ids=lambda command: command[0],
)
def test_every_command_refuses_a_path_outside_the_repository(
    command: list[str], remote: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = remote
    argv = ["../elsewhere" if arg == "PATH" else arg for arg in command]
    assert main([*argv, "--repo", url, "--cache-dir", str(tmp_path / "cache")]) == 1
    err = capsys.readouterr().err
    assert "PATH ../elsewhere must be a folder inside the repository" in err, err
    assert "write it relative to the repository root" in err


def test_a_fleet_refuses_a_path_outside_the_repository(
    remote: tuple[str, Path], tmp_path: Path
) -> None:
    """``run --clusters`` over a repository used to serve no cluster at all, for ever."""
    url, _ = remote
    argv = [sys.executable, "-m", "reconciler", "run", "../elsewhere", "--clusters", "*"]
    argv += ["--repo", url, "--cache-dir", str(tmp_path / "cache")]
    argv += ["--state-dir", str(tmp_path / "state"), "--listen", "off"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=60, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail("run served nothing for a minute instead of refusing the PATH")
    assert done.returncode == 1, done.stderr
    assert "PATH ../elsewhere must be a folder inside the repository" in done.stderr
