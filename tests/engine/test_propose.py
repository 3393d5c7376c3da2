"""The rolling proposal on in-memory fakes of the StateRepo and Forge ports."""

from __future__ import annotations

import itertools
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.engine.propose import Outcome, Proposal, propose
from reconciler.errors import PushRejected
from reconciler.model.audit import PullRequest, RepoCommit

NOW = datetime(2025, 3, 1, tzinfo=UTC)


@dataclass
class FakeRepo:
    """Commits as (parent, author, files, trailers); branches as name -> sha."""

    branches: dict[str, str] = field(default_factory=lambda: {"main": "c0"})
    commits_: dict[str, tuple[str | None, str, dict[str, str], dict[str, str]]] = field(
        default_factory=lambda: {"c0": (None, "ada", {}, {})}
    )
    counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    pushes: int = 0
    author: tuple[str, str] = ("reconciler", "reconciler@localhost")
    committers: dict[str, tuple[str, str]] = field(default_factory=dict)

    def fetch(self) -> None: ...

    def head(self, branch: str) -> str | None:
        return self.branches.get(branch)

    def show(self, commit: str, path: str) -> str | None:
        return self.commits_[commit][2].get(path)

    def commits(self, rev: str) -> list[RepoCommit]:
        base, tip = rev.split("..")
        out = []
        sha: str | None = tip
        while sha is not None and sha != base:
            parent, author, _, trailers = self.commits_[sha]
            committer = self.committers.get(
                sha, self.author if author == "reconciler" else (author, "ada@example.net")
            )
            out.append(
                RepoCommit(
                    sha=sha,
                    author=author,
                    committer=committer[0],
                    committer_email=committer[1],
                    email="",
                    date=NOW,
                    subject="",
                    trailers={k.lower(): [v] for k, v in trailers.items()},
                )
            )
            sha = parent
        return out

    def commit_files(
        self, *, parent: str, files: dict[str, str], message: str, trailers: dict[str, str]
    ) -> str:
        sha = f"c{next(self.counter)}"
        self.commits_[sha] = (parent, "reconciler", dict(files), dict(trailers))
        return sha

    def push(self, branch: str, commit: str | None, *, expected: str | None) -> None:
        if self.branches.get(branch) != expected:
            raise PushRejected("moved")
        self.pushes += 1
        if commit is None:
            del self.branches[branch]
        else:
            self.branches[branch] = commit

    def remote_head(self, branch: str) -> str:
        return self.branches.get(branch, "")

    def changed_at(self, commit: str, path: str) -> datetime | None:
        return None  # commit times are not kept here

    def parents(self, commit: str) -> list[str]:
        parent = self.commits_[commit][0]
        return [] if parent is None else [parent]

    def checkout(self, commit: str) -> Path:
        """The files of ``commit`` and its ancestors (nearest wins) in a folder of their own."""
        root = Path(tempfile.mkdtemp(prefix=f"fake-{commit}-"))
        chain: list[str] = []
        sha: str | None = commit
        while sha is not None:
            chain.append(sha)
            sha = self.commits_[sha][0]
        for sha in reversed(chain):
            for path, text in self.commits_[sha][2].items():
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_text(text, encoding="utf-8")
        return root

    def person_amends(self, branch: str) -> None:
        """A person's ``git commit --amend`` of the head: the trailers stay, the committer is
        the person now."""
        head = self.branches[branch]
        parent, author, files, trailers = self.commits_[head]
        sha = f"a{next(self.counter)}"
        self.commits_[sha] = (parent, author, {**files, "x": "edited"}, dict(trailers))
        self.committers[sha] = ("Ada Person", "ada@example.net")
        self.branches[branch] = sha

    def person_commits(self, branch: str) -> None:
        sha = f"p{next(self.counter)}"
        self.commits_[sha] = (self.branches[branch], "Ada Person", {}, {})
        self.branches[branch] = sha


@dataclass
class FakeForge:
    body_limit: int = 65_536
    prs: dict[int, PullRequest] = field(default_factory=dict)
    heads: dict[int, str] = field(default_factory=dict)
    closed: set[int] = field(default_factory=set)
    comments: list[tuple[int, str]] = field(default_factory=list)

    def find_open(self, head: str) -> PullRequest | None:
        for n, pr in self.prs.items():
            if self.heads[n] == head and n not in self.closed:
                return pr
        return None

    def create(self, *, head: str, base: str, title: str, body: str) -> PullRequest:
        n = len(self.prs) + 1
        self.prs[n] = PullRequest(number=n, title=title, body=body)
        self.heads[n] = head
        return self.prs[n]

    def update(self, number: int, *, title: str, body: str) -> None:
        self.prs[number] = PullRequest(number=number, title=title, body=body)

    def comment(self, number: int, body: str) -> None:
        self.comments.append((number, body))

    def close(self, number: int) -> None:
        self.closed.add(number)

    def set_status(
        self, commit: str, *, state: str, context: str, description: str, url: str | None = None
    ) -> None: ...


def proposal(plan_id: str, text: str | None = "vms: changed\n", source: str = "c0") -> Proposal:
    return Proposal(
        cluster="lab",
        base="main",
        source=source,
        plan_id=plan_id,
        placement_path="cluster-state/placement.yaml",
        placement_text=text,
        title=f"title {plan_id}",
        body=f"body {plan_id}",
        message="msg",
    )


def test_create_then_current_then_update_then_close() -> None:
    repo, forge = FakeRepo(), FakeForge()
    first = propose(repo, forge, proposal("p1"))
    assert first.outcome is Outcome.CREATED
    assert repo.branches["reconciler/lab"] == first.commit
    assert repo.show(first.commit or "", "cluster-state/placement.yaml") == "vms: changed\n"
    assert repo.commits_[first.commit or ""][3] == {
        "Reconciler-Plan": "p1",
        "Reconciler-Source": "c0",
    }
    again = propose(repo, forge, proposal("p1"))
    assert again.outcome is Outcome.CURRENT
    assert repo.pushes == 1
    assert len(forge.prs) == 1
    changed = propose(repo, forge, proposal("p2", "vms: other\n"))
    assert changed.outcome is Outcome.UPDATED
    assert forge.prs[1].body == "body p2"
    assert repo.commits_[changed.commit or ""][0] == "c0"  # one commit on the base, replaced
    empty = propose(repo, forge, proposal("p3", None))
    assert empty.outcome is Outcome.NOTHING
    assert forge.closed == {1}
    assert "nothing to change" in forge.comments[-1][1]
    assert "reconciler/lab" not in repo.branches
    assert propose(repo, forge, proposal("p3", None)).outcome is Outcome.NOTHING
    assert len(forge.comments) == 1


def test_a_persons_commit_blocks_and_is_commented_once() -> None:
    repo, forge = FakeRepo(), FakeForge()
    propose(repo, forge, proposal("p1"))
    repo.person_commits("reconciler/lab")
    theirs = repo.branches["reconciler/lab"]
    for plan_id in ("p2", "p3", None):
        result = propose(repo, forge, proposal(plan_id or "p4", None if plan_id is None else "x"))
        assert result.outcome is Outcome.BLOCKED
        assert "Ada Person" in result.detail
    assert repo.branches["reconciler/lab"] == theirs
    assert len(forge.comments) == 1
    assert "stopped updating" in forge.comments[0][1]
    assert 1 not in forge.closed


def test_a_persons_amend_that_keeps_the_trailer_still_blocks() -> None:
    repo, forge = FakeRepo(), FakeForge()
    propose(repo, forge, proposal("p1"))
    repo.person_amends("reconciler/lab")
    theirs = repo.branches["reconciler/lab"]
    assert repo.commits_[theirs][3]["Reconciler-Plan"] == "p1", "the trailer was kept"
    result = propose(repo, forge, proposal("p2"))
    assert result.outcome is Outcome.BLOCKED
    assert "Ada Person" in result.detail
    assert repo.branches["reconciler/lab"] == theirs


def test_forge_none_only_pushes_and_a_lost_race_raises() -> None:
    repo = FakeRepo()
    assert propose(repo, None, proposal("p1")).outcome is Outcome.UPDATED
    assert propose(repo, None, proposal("p1")).outcome is Outcome.CURRENT
    repo.branches["reconciler/lab"] = "c0"  # someone reset it meanwhile: our lease fails

    class Racing(FakeRepo):
        def head(self, branch: str) -> str | None:
            return None if branch == "reconciler/lab" else super().head(branch)

    racing = Racing(branches=dict(repo.branches), commits_=dict(repo.commits_))
    with pytest.raises(PushRejected):
        propose(racing, None, proposal("p2"))
