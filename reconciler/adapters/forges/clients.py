"""Pull requests on GitHub, Gitea/Forgejo and GitLab: the ``Forge`` port over their REST APIs.

One HTTP client (httpx) for all three rather than each forge's own library: the calls used
are six small JSON requests per forge, httpx is already a dependency, well kept, typed, and
gives one place for timeouts, retries of nothing, and errors that never carry the token.
PyGithub, python-gitlab and the Gitea clients would be three dependencies with three error
trees for the same six calls.

The token is sent only in the forge's auth header; it is never in a URL, a message or a
repr. ``--forge-url`` is the API root: https://api.github.com (GitHub Enterprise:
https://HOST/api/v3), https://HOST/api/v1 (Gitea, Forgejo), https://HOST/api/v4 (GitLab).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from reconciler.errors import ForgeError, ForgeUnavailable
from reconciler.model.audit import Comment, PullRequest
from reconciler.redact import scrub

GITHUB_API = "https://api.github.com"
GITLAB_API = "https://gitlab.com/api/v4"
TIMEOUT = httpx.Timeout(30.0, connect=10.0)
PER_PAGE = 100
MAX_PAGES = 50
"""Comments read at most: 5,000 (a pull request with more is not looked through further)."""


class _Http:
    """One JSON client per forge; errors become ForgeError naming the call, never the token."""

    name = "forge"

    def __init__(
        self,
        api_url: str,
        project: str,
        token: str | None,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if "/" not in project.strip("/"):
            raise ForgeError(
                f"--forge-project {project!r} is not OWNER/NAME",
                hint="write the project as owner/name, e.g. infra/cluster-state",
            )
        self.project = project.strip("/")
        self._client = httpx.Client(
            base_url=api_url.rstrip("/"),
            headers={"User-Agent": "reconciler", **self._auth(token)},
            timeout=TIMEOUT,
            transport=transport,
            follow_redirects=False,
        )

    def _auth(self, token: str | None) -> dict[str, str]:
        return {"Authorization": f"token {token}"} if token else {}

    def __repr__(self) -> str:  # never the headers: they hold the token
        return f"<{type(self).__name__} {self._client.base_url} {self.project}>"

    def disconnect(self) -> None:
        """Close the HTTP connections (``close`` closes a pull request)."""
        self._client.close()

    def _call(self, method: str, path: str, *, json: Any = None, params: Any = None) -> Any:
        where = f"{self.name} {method} {scrub(str(self._client.base_url))}{path}"
        try:
            response = self._client.request(method, path, json=json, params=params)
        except httpx.HTTPError as err:
            # the network or the forge not answering: transient, retried with backoff
            raise ForgeUnavailable(
                f"{where}: {type(err).__name__}: {scrub(str(err))}",
                hint="check --forge-url and the network; retried with backoff",
            ) from None
        if response.status_code == 429 or response.status_code >= 500:
            raise ForgeUnavailable(
                f"{where}: HTTP {response.status_code}: {_detail(response)}",
                status=response.status_code,
                hint="the forge is busy or failing; retried with backoff",
            )
        if response.status_code >= 400:
            raise ForgeError(
                f"{where}: HTTP {response.status_code}: {_detail(response)}",
                status=response.status_code,
                hint=_hint(response.status_code),
            )
        return response.json() if response.content else None


def _detail(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return scrub(response.text[:200])
    if isinstance(data, dict):
        return scrub(str(data.get("message") or data.get("error") or data)[:300])
    return scrub(str(data)[:300])


def _hint(status: int) -> str | None:
    if status in (401, 403):
        return "check RECONCILER_FORGE_TOKEN: it must be valid and may write pull requests"
    if status == 404:
        return "check --forge-project and --forge-url (the API root, e.g. .../api/v3)"
    return None


def _pr(number: int, data: dict[str, Any], *, url: str, body: str) -> PullRequest:
    return PullRequest(
        number=number,
        url=str(data.get(url) or ""),
        title=str(data.get("title") or ""),
        body=str(data.get(body) or ""),
    )


class GitHubForge(_Http):
    """GitHub REST v3 (and GitHub Enterprise under /api/v3)."""

    name = "github"
    body_limit = 65_536

    def _auth(self, token: str | None) -> dict[str, str]:
        return {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            **({"Authorization": f"Bearer {token}"} if token else {}),
        }

    def _repo(self) -> str:
        return f"/repos/{self.project}"

    def find_open(self, head: str) -> PullRequest | None:
        owner = self.project.split("/")[0]
        found = self._call(
            "GET", f"{self._repo()}/pulls", params={"head": f"{owner}:{head}", "state": "open"}
        )
        for item in found or []:
            if item.get("head", {}).get("ref") == head:
                return _pr(int(item["number"]), item, url="html_url", body="body")
        return None

    def create(self, *, head: str, base: str, title: str, body: str) -> PullRequest:
        data = self._call(
            "POST",
            f"{self._repo()}/pulls",
            json={"title": title, "head": head, "base": base, "body": body},
        )
        return _pr(int(data["number"]), data, url="html_url", body="body")

    def update(self, number: int, *, title: str, body: str) -> None:
        self._call("PATCH", f"{self._repo()}/pulls/{number}", json={"title": title, "body": body})

    def comment(self, number: int, body: str) -> None:
        self._call("POST", f"{self._repo()}/issues/{number}/comments", json={"body": body})

    def comments(self, number: int) -> list[Comment]:
        """The comments of pull request ``number``, oldest first (issue comments API)."""
        out: list[Comment] = []
        for page in range(1, MAX_PAGES + 1):
            found = self._call(
                "GET",
                f"{self._repo()}/issues/{number}/comments",
                params={"per_page": PER_PAGE, "page": page},
            )
            out += [Comment(id=int(c["id"]), body=str(c.get("body") or "")) for c in found or []]
            if not found or len(found) < PER_PAGE:
                break
        return out

    def update_comment(self, number: int, comment_id: int, body: str) -> None:
        del number  # GitHub and Gitea address a comment by its id alone
        self._call("PATCH", f"{self._repo()}/issues/comments/{comment_id}", json={"body": body})

    def close(self, number: int) -> None:
        self._call("PATCH", f"{self._repo()}/pulls/{number}", json={"state": "closed"})

    def set_status(
        self, commit: str, *, state: str, context: str, description: str, url: str | None = None
    ) -> None:
        payload = {"state": state, "context": context, "description": description[:140]}
        if url:
            payload["target_url"] = url
        self._call("POST", f"{self._repo()}/statuses/{commit}", json=payload)


class GiteaForge(GitHubForge):
    """Gitea and Forgejo /api/v1: GitHub-like paths, its own auth header and no head filter."""

    name = "gitea"
    body_limit = 65_536  # not documented by Gitea; GitHub's limit keeps bodies portable

    def _auth(self, token: str | None) -> dict[str, str]:
        return {
            "Accept": "application/json",
            **({"Authorization": f"token {token}"} if token else {}),
        }

    def comments(self, number: int) -> list[Comment]:
        """The comments of pull request ``number``: Gitea's issue comments list takes only
        ``since``/``before`` and answers every comment at once."""
        found = self._call("GET", f"{self._repo()}/issues/{number}/comments")
        return [Comment(id=int(c["id"]), body=str(c.get("body") or "")) for c in found or []]

    def find_open(self, head: str) -> PullRequest | None:
        page = 1
        while True:
            found = self._call(
                "GET",
                f"{self._repo()}/pulls",
                params={"state": "open", "page": page, "limit": 50},
            )
            for item in found or []:
                if item.get("head", {}).get("ref") == head:
                    return _pr(int(item["number"]), item, url="html_url", body="body")
            if not found or len(found) < 50:
                return None
            page += 1


_GITLAB_STATES = {
    "success": "success",
    "failure": "failed",
    "error": "failed",
    "pending": "pending",
}


class GitLabForge(_Http):
    """GitLab v4 merge requests."""

    name = "gitlab"
    body_limit = 1_048_576

    def _auth(self, token: str | None) -> dict[str, str]:
        return {"PRIVATE-TOKEN": token} if token else {}

    def _mrs(self) -> str:
        return f"/projects/{quote(self.project, safe='')}/merge_requests"

    def find_open(self, head: str) -> PullRequest | None:
        found = self._call("GET", self._mrs(), params={"state": "opened", "source_branch": head})
        for item in found or []:
            if item.get("source_branch") == head:
                return _pr(int(item["iid"]), item, url="web_url", body="description")
        return None

    def create(self, *, head: str, base: str, title: str, body: str) -> PullRequest:
        data = self._call(
            "POST",
            self._mrs(),
            json={
                "source_branch": head,
                "target_branch": base,
                "title": title,
                "description": body,
                "remove_source_branch": True,
            },
        )
        return _pr(int(data["iid"]), data, url="web_url", body="description")

    def update(self, number: int, *, title: str, body: str) -> None:
        self._call("PUT", f"{self._mrs()}/{number}", json={"title": title, "description": body})

    def comment(self, number: int, body: str) -> None:
        self._call("POST", f"{self._mrs()}/{number}/notes", json={"body": body})

    def comments(self, number: int) -> list[Comment]:
        """The notes of merge request ``number`` written by people or tools (system notes,
        such as "added 1 commit", left out), oldest first."""
        out: list[Comment] = []
        for page in range(1, MAX_PAGES + 1):
            found = self._call(
                "GET",
                f"{self._mrs()}/{number}/notes",
                params={
                    "per_page": PER_PAGE,
                    "page": page,
                    "sort": "asc",
                    "order_by": "created_at",
                },
            )
            out += [
                Comment(id=int(n["id"]), body=str(n.get("body") or ""))
                for n in found or []
                if not n.get("system")
            ]
            if not found or len(found) < PER_PAGE:
                break
        return out

    def update_comment(self, number: int, comment_id: int, body: str) -> None:
        self._call("PUT", f"{self._mrs()}/{number}/notes/{comment_id}", json={"body": body})

    def close(self, number: int) -> None:
        self._call("PUT", f"{self._mrs()}/{number}", json={"state_event": "close"})

    def set_status(
        self, commit: str, *, state: str, context: str, description: str, url: str | None = None
    ) -> None:
        payload = {
            "state": _GITLAB_STATES.get(state, "failed"),
            "name": context,
            "description": description[:255],
        }
        if url:
            payload["target_url"] = url
        self._call(
            "POST", f"/projects/{quote(self.project, safe='')}/statuses/{commit}", json=payload
        )


FORGES: dict[str, type[GitHubForge] | type[GitLabForge]] = {
    "github": GitHubForge,
    "gitea": GiteaForge,
    "gitlab": GitLabForge,
}
DEFAULT_API = {"github": GITHUB_API, "gitlab": GITLAB_API}


def open_forge(
    kind: str,
    *,
    project: str,
    token: str | None,
    api_url: str | None = None,
    transport: httpx.BaseTransport | None = None,
) -> GitHubForge | GitLabForge:
    """The forge client of ``kind``; ``api_url`` defaults to the public service."""
    url = api_url or DEFAULT_API.get(kind)
    if url is None:
        raise ForgeError(
            f"--forge {kind} needs --forge-url",
            hint="pass the API root, e.g. https://gitea.example.net/api/v1",
        )
    return FORGES[kind](url, project, token, transport=transport)
