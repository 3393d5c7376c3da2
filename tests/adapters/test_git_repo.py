"""The state repository adapter against real git: a bare remote over file://."""

from __future__ import annotations

import gc
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reconciler.adapters.git.repo import GitStateRepo, clone_dir
from reconciler.errors import PushRejected, RemoteUnreachable
from reconciler.redact import scrub
from tests.gitrepos import PERSON, child_processes, git, open_fds, state_remote


@pytest.fixture
def remote(tmp_path: Path) -> tuple[str, Path]:
    return state_remote(tmp_path)


def test_fetch_checkout_reads_the_branch_head(remote: tuple[str, Path], tmp_path: Path) -> None:
    url, person = remote
    repo = GitStateRepo(url, cache_dir=tmp_path / "cache")
    repo.fetch()
    head = repo.head("main")
    assert head == git(person, "rev-parse", "HEAD").strip()
    tree = repo.checkout(head)
    assert (tree / "cluster-state" / "placement.yaml").read_text().startswith("# yaml-language")
    assert repo.head("no-such-branch") is None
    # a person's new commit is seen after the next fetch
    (person / "cluster-state" / "NOTE").write_text("x")
    git(person, "add", ".")
    git(person, "commit", "-qm", "note")
    git(person, "push", "-q", "origin", "main")
    assert repo.head("main") == head
    repo.fetch()
    assert repo.head("main") == git(person, "rev-parse", "HEAD").strip()
    assert (repo.checkout(repo.head("main") or "") / "cluster-state" / "NOTE").exists()


def test_commit_push_with_lease_and_trailers(remote: tuple[str, Path], tmp_path: Path) -> None:
    url, person = remote
    repo = GitStateRepo(url, cache_dir=tmp_path / "cache")
    repo.fetch()
    base = repo.head("main") or ""
    sha = repo.commit_files(
        parent=base,
        files={"cluster-state/placement.yaml": "changed\n"},
        message="Move web-1\n\n- web-1: kvm-01 -> kvm-02 (Balance)",
        trailers={"Reconciler-Plan": "abc123", "Reconciler-Source": base},
    )
    repo.push("reconciler/lab", sha, expected=None)
    git(person, "fetch", "-q")
    assert git(person, "show", "origin/reconciler/lab:cluster-state/placement.yaml") == "changed\n"
    # only placement.yaml differs from the base
    changed = git(person, "diff", "--name-only", base, "origin/reconciler/lab").split()
    assert changed == ["cluster-state/placement.yaml"]
    (record,) = repo.log(f"{base}..{sha}")
    assert record.trailer("Reconciler-Plan") == "abc123"
    assert record.trailer("reconciler-source") == base
    assert record.author == "reconciler"
    assert "- web-1: kvm-01 -> kvm-02 (Balance)" in record.body
    assert repo.log("main", since=datetime.now(UTC) + timedelta(days=1)) == []
    # pushing a new branch over an existing one is refused: compare-and-swap
    with pytest.raises(PushRejected):
        repo.push("reconciler/lab", base, expected=None)
    # the person pushes first: our push with the value we saw is rejected, theirs kept
    git(person, "checkout", "-q", "-b", "mine", "origin/reconciler/lab")
    git(person, "commit", "-q", "--allow-empty", "-m", "a person's change")
    git(person, "push", "-q", "origin", "mine:reconciler/lab")
    theirs = git(person, "rev-parse", "HEAD").strip()
    again = repo.commit_files(parent=base, files={"a": "b"}, message="again")
    with pytest.raises(PushRejected, match="moved since it was read"):
        repo.push("reconciler/lab", again, expected=sha)
    assert git(person, "ls-remote", "origin", "reconciler/lab").split()[0] == theirs
    # deleting with the right lease works
    repo.push("reconciler/lab", None, expected=theirs)
    assert git(person, "ls-remote", "origin", "reconciler/lab") == ""


def test_credentials_never_appear_in_errors(tmp_path: Path) -> None:
    url = "https://reconciler:s3cr3t-token@127.0.0.1:9/state.git"
    repo = GitStateRepo(url, cache_dir=tmp_path)
    assert "s3cr3t" not in repo.display_url
    with pytest.raises(RemoteUnreachable) as info:  # transient: the next round fetches again
        repo.fetch()
    assert "s3cr3t" not in str(info.value)
    assert "***@127.0.0.1" in str(info.value)
    assert scrub("ssh://git:pw@h/x and https://t@h/y") == "ssh://***@h/x and https://***@h/y"


def test_cache_dir_per_url(tmp_path: Path) -> None:
    assert clone_dir("/a/b", tmp_path) == clone_dir("/a/../a/b", tmp_path)
    assert clone_dir("/a/b", tmp_path) != clone_dir("/a/c", tmp_path)
    assert clone_dir("/a/b", tmp_path).parent == tmp_path


def test_descriptors_and_children_stay_flat_over_many_rounds(
    remote: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = remote
    repo = GitStateRepo(url, cache_dir=tmp_path / "cache")

    def one_round(i: int) -> None:
        repo.fetch()
        head = repo.head("main") or ""
        repo.checkout(head)
        repo.show(head, "cluster-state/placement.yaml")
        sha = repo.commit_files(parent=head, files={"f": str(i)}, message=f"round {i}")
        repo.push("rounds", sha, expected=repo.head("rounds"))
        repo.log("origin/rounds", grep_trailer="Reconciler-Plan")

    for i in range(3):  # warm up: the clone, imports, caches
        one_round(i)
    gc.collect()
    fds, children = open_fds(), child_processes()
    for i in range(3, 43):
        one_round(i)
    gc.collect()
    assert open_fds() <= fds
    assert child_processes() <= children


def test_changed_at_is_when_a_path_last_changed_merges_counting_from_their_merge(
    remote: tuple[str, Path], tmp_path: Path
) -> None:
    url, person = remote
    placement = "cluster-state/placement.yaml"

    def commit(at: str, *args: str) -> None:
        subprocess.run(
            ["git", *PERSON, *args],
            cwd=person,
            check=True,
            capture_output=True,
            env={**os.environ, "GIT_COMMITTER_DATE": at, "GIT_AUTHOR_DATE": at},
        )

    # a branch edits placement early; main moves on; the branch is merged later
    git(person, "checkout", "-q", "-b", "edit")
    (person / placement).write_text((person / placement).read_text() + "# edited\n")
    commit("2026-01-01T10:00:00+00:00", "commit", "-qam", "edit placement")
    git(person, "checkout", "-q", "main")
    (person / "cluster-state" / "NOTE").write_text("x")
    git(person, "add", ".")
    commit("2026-01-02T10:00:00+00:00", "commit", "-qm", "note")
    commit("2026-01-03T10:00:00+00:00", "merge", "-q", "--no-ff", "edit", "-m", "merge edit")
    (person / "cluster-state" / "NOTE").write_text("y")
    commit("2026-01-04T10:00:00+00:00", "commit", "-qam", "another note")
    git(person, "push", "-q", "origin", "main")
    repo = GitStateRepo(url, cache_dir=tmp_path / "cache")
    repo.fetch()
    head = repo.head("main") or ""
    assert repo.changed_at(head, placement) == datetime(2026, 1, 3, 10, tzinfo=UTC)
    assert repo.changed_at(head, "cluster-state/NOTE") == datetime(2026, 1, 4, 10, tzinfo=UTC)
    assert repo.changed_at(head, "cluster-state/absent.yaml") is None
