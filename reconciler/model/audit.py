"""The audit trail: commits of the state repository and the moves they record."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from reconciler.model.base import ApiVersion, Frozen


class RepoCommit(Frozen):
    """One commit of the state repository, with its trailers."""

    sha: str
    author: str
    email: str
    date: datetime
    subject: str
    body: str = ""
    committer: str = ""
    """Who made this commit object: a person's amend or rebase makes it theirs."""
    committer_email: str = ""
    trailers: dict[str, list[str]] = {}
    """Trailer key (lower case) -> its values, in order."""

    def trailer(self, key: str) -> str | None:
        """The last value of trailer ``key`` (case-insensitive), None when absent."""
        values = self.trailers.get(key.lower())
        return values[-1] if values else None


class PullRequest(Frozen):
    """An open proposal on a forge (a GitHub/Gitea pull request, a GitLab merge request)."""

    number: int
    url: str = ""
    title: str = ""
    body: str = ""


class Comment(Frozen):
    """A comment on a pull request (a GitLab merge-request note)."""

    id: int
    body: str = ""


class AuditMove(Frozen):
    """One move named in a commit message: ``- vm: source -> target (Reason, rule R): detail``."""

    vm: str
    source: str
    target: str
    reason: str
    rule: str | None = None
    detail: str = ""


class AuditRolloutStep(Frozen):
    """One step of a rollout begun or ended, from its commit's Reconciler-Rollout-* trailers."""

    rollout: str
    host: str | None = Field(default=None, description="None: a step before or after.")
    step: str
    outcome: str = Field(description="started, passed, succeeded or failed.")


class AuditEntry(Frozen):
    """One commit of the audit trail: who, when, why, and the moves it proposed or recorded."""

    commit: str
    author: str
    email: str
    date: datetime
    subject: str
    kind: Literal["proposed", "executed", "rollout"] = Field(
        description="proposed: a proposal's commit (merging it approved the moves); "
        "executed: an audit commit written after the moves ran; rollout: a rollout's step "
        "begun or ended."
    )
    plan_id: str | None = None
    source: str | None = Field(
        default=None, description="Reconciler-Source: the desired-state commit planned from."
    )
    trigger: str | None = Field(default=None, description="merge, schedule, drift, ...")
    actor: str | None = None
    moves: list[AuditMove] = Field(default_factory=list)
    rollout: AuditRolloutStep | None = Field(
        default=None, description="The rollout step of a rollout entry."
    )


class MoveHistory(Frozen):
    """``reconciler history --format json``: the audit trail read from the git log."""

    api_version: ApiVersion = "placement/v1alpha1"
    kind: Literal["MoveHistory"] = "MoveHistory"
    repository: str
    branch: str
    entries: list[AuditEntry] = Field(default_factory=list, description="Newest first.")


def short_id(value: str) -> str:
    """A plan id or commit for people: 12 hex digits, without the ``sha256:`` prefix."""
    return value.removeprefix("sha256:")[:12]
