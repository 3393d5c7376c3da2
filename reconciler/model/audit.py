"""The audit trail: commits of the state repository and the moves they record."""

from __future__ import annotations

from datetime import datetime

from reconciler.model.base import Frozen


class RepoCommit(Frozen):
    """One commit of the state repository, with its trailers."""

    sha: str
    author: str
    email: str
    date: datetime
    subject: str
    body: str = ""
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
