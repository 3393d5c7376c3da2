"""Several processes sharing one cache directory (a service and a person's command)."""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from reconciler.adapters.git import repo as git_repo
from reconciler.adapters.git.repo import GitStateRepo
from tests.gitrepos import git, state_remote

NOTE = Path("cluster-state") / "NOTE"


def _commits(person: Path, n: int) -> list[str]:
    """``n`` commits on main, each writing its own number into NOTE."""
    out = []
    for i in range(n):
        (person / NOTE).write_text(f"{i}\n")
        git(person, "add", ".")
        git(person, "commit", "-qm", f"note {i}")
        out.append(git(person, "rev-parse", "HEAD").strip())
    git(person, "push", "-q", "origin", "main")
    return out


def test_a_checkout_keeps_its_commit_while_another_is_checked_out(tmp_path: Path) -> None:
    url, person = state_remote(tmp_path)
    first, second = _commits(person, 2)
    service = GitStateRepo(url, cache_dir=tmp_path / "cache")
    person_cmd = GitStateRepo(url, cache_dir=tmp_path / "cache")
    service.fetch()
    tree = service.checkout(first)
    other = person_cmd.checkout(second)
    assert tree != other
    assert (tree / NOTE).read_text() == "0\n"
    assert (other / NOTE).read_text() == "1\n"
    assert service.checkout(first) == tree  # the same commit reuses its tree


def _fetch_and_read(url: str, cache: str, commits: list[str], rounds: int) -> list[str]:
    repo = GitStateRepo(url, cache_dir=Path(cache))
    seen = []
    for r in range(rounds):
        repo.fetch()
        i = (r + os.getpid()) % len(commits)
        tree = repo.checkout(commits[i])
        text = (tree / NOTE).read_text()
        seen.append(f"{i}:{text.strip()}")
    return seen


def test_processes_sharing_a_cache_each_read_the_commit_they_checked_out(
    tmp_path: Path,
) -> None:
    url, person = state_remote(tmp_path)
    commits = _commits(person, 3)
    cache = tmp_path / "cache"  # not cloned yet: the processes race to clone it too
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=3, mp_context=ctx) as pool:
        jobs = [pool.submit(_fetch_and_read, url, str(cache), commits, 6) for _ in range(3)]
        results = [j.result(timeout=120) for j in jobs]
    for seen in results:
        assert len(seen) == 6
        for entry in seen:
            index, text = entry.split(":")
            assert index == text  # the tree held the files of its own commit
    assert not list(cache.glob("*.trees/.tree-*"))  # no half-written export left


def test_old_trees_are_pruned_and_the_newest_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, person = state_remote(tmp_path)
    commits = _commits(person, 5)
    repo = GitStateRepo(url, cache_dir=tmp_path / "cache")
    repo.fetch()
    trees = [repo.checkout(c) for c in commits[:4]]
    assert all(t.is_dir() for t in trees)  # all within a day: kept
    old = time.time() - 2 * git_repo.TREE_MAX_IDLE
    for t in trees:
        os.utime(t, (old, old))
    latest = repo.checkout(commits[4])
    kept = sorted(p.name for p in latest.parent.iterdir())
    assert latest.name in kept
    assert len(kept) == git_repo.KEEP_TREES
    # a pruned commit is exported again when it is asked for
    again = repo.checkout(commits[0])
    assert (again / NOTE).read_text() == "0\n"
