"""The audit commit of an executed batch, on the fake state repository and on real git."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.adapters.git.repo import GitStateRepo
from reconciler.engine.audit import STATUS_FILE, record_batch
from reconciler.engine.transaction import RetryPolicy
from reconciler.errors import PushRejected
from reconciler.model.status import MoveOutcome, MoveResult
from tests.engine.test_propose import FakeRepo
from tests.gitrepos import git, state_remote

RESULTS = [
    MoveResult(vm="web-1", source="kvm-01", target="kvm-02", outcome=MoveOutcome.SUCCEEDED,
               reason="Balance", detail="kvm-01 is 30 points above kvm-02"),
    MoveResult(vm="db-1", source="kvm-02", target="kvm-03", outcome=MoveOutcome.SKIPPED,
               reason="Drift", detail="stale: db-1 no longer runs on kvm-02"),
]  # fmt: skip
PLACEMENT = "kind: Placement\nspec:\n  vms:\n    web-1: kvm-01  # keep\n"


def record(repo: object, **kw: object) -> str:
    args: dict[str, object] = {
        "branch": "main", "cluster": "lab", "folder": "cluster-state", "results": RESULTS,
        "own_moves": {"web-1": "kvm-02"}, "status_json": "{}\n", "plan_id": "p1",
        "source": "c0", "trigger": "merge", "actor": "reconciler@host-1",
    }  # fmt: skip
    args.update(kw)
    return record_batch(repo, **args).commit  # type: ignore[arg-type]


class RacingRepo(FakeRepo):
    """A person pushes to main between our read and our push, ``races`` times."""

    races: int = 0

    def push(self, branch: str, commit: str | None, *, expected: str | None) -> None:
        if self.races > 0:
            self.races -= 1
            self.person_commits(branch)
        super().push(branch, commit, expected=expected)


def test_a_lost_race_records_on_top_of_the_new_head_once() -> None:
    repo = RacingRepo()
    repo.commits_["c0"] = (None, "ada", {"cluster-state/placement.yaml": PLACEMENT}, {})
    repo.races = 2
    sha = record(repo)
    parent, _, files, trailers = repo.commits_[sha]
    assert parent is not None
    assert parent.startswith("p")  # on top of the person's commit
    assert repo.branches["main"] == sha
    assert trailers["Reconciler-Trigger"] == "merge"
    assert files[f"cluster-state/{STATUS_FILE}"] == "{}\n"
    assert repo.pushes == 1


def test_a_branch_that_keeps_moving_gives_up() -> None:
    repo = RacingRepo()
    repo.races = 10
    with pytest.raises(PushRejected, match="kept moving"):
        record(repo, retry=RetryPolicy(attempts=3, sleep=lambda _: None), own_moves={})


def test_audit_commit_on_real_git_reads_back_as_history(tmp_path: Path) -> None:
    url, person = state_remote(tmp_path)
    repo = GitStateRepo(url, cache_dir=tmp_path / "cache")
    repo.fetch()
    main = repo.head("main") or ""
    sha = record(repo, source=main)
    git(person, "pull", "-q", "origin", "main")
    text = (person / "cluster-state" / "placement.yaml").read_text()
    assert "    web-1: kvm-02\n" in text
    assert text.startswith("# yaml-language-server")
    (entry,) = repo.log(f"{main}..{sha}")
    assert entry.trailer("Reconciler-Source") == main
    assert entry.trailer("Reconciler-Actor") == "reconciler@host-1"
    assert "- web-1: kvm-01 -> kvm-02 (Balance): kvm-01 is 30 points above kvm-02" in entry.body
    assert "db-1: kvm-02 -> kvm-03 skipped" in entry.body
