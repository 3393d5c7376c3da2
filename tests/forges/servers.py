"""Local HTTP servers that follow each forge's published REST API for the calls we use.

API-faithful local servers, not the real services: paths, methods, auth headers, required
and allowed JSON fields and response shapes follow the public docs of GitHub REST v3, Gitea
/api/v1 and GitLab v4; anything else answers 404/422 as the real API would, so a wrong
request shape fails a test. Each server keeps its pull requests, comments and statuses in
memory and records every request.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOKEN = "forge-test-token-7f3a"

Route = tuple[str, str, Callable[..., tuple[int, Any]]]


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class FakeForge:
    """Shared state: pull requests by number, comments, statuses, recorded requests."""

    owner: str = "infra"
    repo: str = "state"
    prs: dict[int, dict[str, Any]] = field(default_factory=dict)
    comments: dict[int, list[str]] = field(default_factory=dict)
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    api_prefix: str = ""
    body_limit: int = 65_536
    comment_ids: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Comment id -> (pull request number, index in ``comments``)."""

    def add_comment(self, number: int, body: str) -> int:
        self.comments.setdefault(number, []).append(body)
        comment_id = 9000 + len(self.comment_ids)
        self.comment_ids[comment_id] = (number, len(self.comments[number]) - 1)
        return comment_id

    def comment_list(self, number: int) -> list[dict[str, Any]]:
        return [
            {"id": cid, "body": self.comments[n][i]}
            for cid, (n, i) in sorted(self.comment_ids.items())
            if n == number
        ]

    def routes(self) -> list[Route]:
        raise NotImplementedError

    def authorized(self, headers: dict[str, str]) -> bool:
        raise NotImplementedError

    def open_prs(self) -> list[dict[str, Any]]:
        return [p for p in self.prs.values() if p["state"] in ("open", "opened")]


def _need(body: Any, required: set[str], allowed: set[str]) -> tuple[int, Any] | None:
    if not isinstance(body, dict):
        return 400, {"message": "Problems parsing JSON"}
    missing = required - body.keys()
    unknown = body.keys() - allowed - required
    if missing or unknown:
        return 422, {
            "message": "Validation Failed",
            "missing": sorted(missing),
            "unknown": sorted(unknown),
        }
    return None


class GitHubServer(FakeForge):
    """GitHub REST v3: docs.github.com/rest/pulls, issues/comments, commits/statuses."""

    def authorized(self, headers: dict[str, str]) -> bool:
        return headers.get("authorization") == f"Bearer {TOKEN}" and headers.get(
            "accept", ""
        ).startswith("application/vnd.github")

    def _base(self) -> str:
        return f"{self.api_prefix}/repos/{self.owner}/{self.repo}"

    def _pr_json(self, pr: dict[str, Any]) -> dict[str, Any]:
        return {
            **pr,
            "html_url": f"https://github.test/{self.owner}/{self.repo}/pull/{pr['number']}",
        }

    def routes(self) -> list[Route]:
        b = re.escape(self._base())
        return [
            ("GET", rf"{b}/pulls", self.list_pulls),
            ("POST", rf"{b}/pulls", self.create_pull),
            ("PATCH", rf"{b}/pulls/(\d+)", self.update_pull),
            ("POST", rf"{b}/issues/(\d+)/comments", self.create_comment),
            ("GET", rf"{b}/issues/(\d+)/comments", self.list_comments),
            ("PATCH", rf"{b}/issues/comments/(\d+)", self.update_comment),
            ("POST", rf"{b}/statuses/([0-9a-f]{{40}})", self.create_status),
        ]

    def list_comments(self, req: Request, number: str) -> tuple[int, Any]:
        """docs.github.com/rest/issues/comments#list-issue-comments: per_page (max 100), page."""
        if int(number) not in self.prs:
            return 404, {"message": "Not Found"}
        per_page = min(int(req.query.get("per_page", 30)), 100)
        page = int(req.query.get("page", 1))
        items = self.comment_list(int(number))
        return 200, items[(page - 1) * per_page : page * per_page]

    def update_comment(self, req: Request, comment_id: str) -> tuple[int, Any]:
        """docs.github.com/rest/issues/comments#update-an-issue-comment: PATCH, body only."""
        bad = _need(req.body, {"body"}, set())
        if bad:
            return bad
        where = self.comment_ids.get(int(comment_id))
        if where is None:
            return 404, {"message": "Not Found"}
        if len(req.body["body"]) > self.body_limit:
            return 422, {"message": "Validation Failed"}
        number, index = where
        self.comments[number][index] = req.body["body"]
        return 200, {"id": int(comment_id), "body": req.body["body"]}

    def list_pulls(self, req: Request) -> tuple[int, Any]:
        state = req.query.get("state", "open")
        head = req.query.get("head")
        out = [
            self._pr_json(p)
            for p in self.prs.values()
            if (state == "all" or p["state"] == state)
            and (head is None or f"{self.owner}:{p['head']['ref']}" == head)
        ]
        return 200, out

    def create_pull(self, req: Request) -> tuple[int, Any]:
        bad = _need(req.body, {"title", "head", "base"}, {"body", "draft", "maintainer_can_modify"})
        if bad:
            return bad
        if len(req.body.get("body") or "") > self.body_limit:
            return 422, {"message": "Validation Failed", "errors": [{"field": "body"}]}
        if any(p["head"]["ref"] == req.body["head"] for p in self.open_prs()):
            return 422, {"message": "A pull request already exists"}
        number = len(self.prs) + len(self.comments) + 1
        pr = {
            "number": number,
            "state": "open",
            "title": req.body["title"],
            "body": req.body.get("body"),
            "head": {"ref": req.body["head"]},
            "base": {"ref": req.body["base"]},
        }
        self.prs[number] = pr
        return 201, self._pr_json(pr)

    def update_pull(self, req: Request, number: str) -> tuple[int, Any]:
        bad = _need(req.body, set(), {"title", "body", "state", "base"})
        if bad:
            return bad
        pr = self.prs.get(int(number))
        if pr is None:
            return 404, {"message": "Not Found"}
        if len(req.body.get("body") or "") > self.body_limit:
            return 422, {"message": "Validation Failed"}
        pr.update(req.body)
        return 200, self._pr_json(pr)

    def create_comment(self, req: Request, number: str) -> tuple[int, Any]:
        bad = _need(req.body, {"body"}, set())
        if bad:
            return bad
        if int(number) not in self.prs:
            return 404, {"message": "Not Found"}
        comment_id = self.add_comment(int(number), req.body["body"])
        return 201, {"id": comment_id, "body": req.body["body"]}

    def create_status(self, req: Request, sha: str) -> tuple[int, Any]:
        bad = _need(req.body, {"state"}, {"target_url", "description", "context"})
        if bad:
            return bad
        if req.body["state"] not in ("error", "failure", "pending", "success"):
            return 422, {"message": "Validation Failed"}
        self.statuses.setdefault(sha, []).append(req.body)
        return 201, req.body


class GiteaServer(GitHubServer):
    """Gitea/Forgejo /api/v1 (the swagger at /api/swagger): `token` auth, no head filter."""

    def authorized(self, headers: dict[str, str]) -> bool:
        return headers.get("authorization") == f"token {TOKEN}"

    def list_pulls(self, req: Request) -> tuple[int, Any]:
        if "head" in req.query:
            return 422, {"message": "unknown parameter head"}
        page, limit = int(req.query.get("page", 1)), int(req.query.get("limit", 30))
        state = req.query.get("state", "open")
        items = [
            self._pr_json(p) for p in self.prs.values() if state == "all" or p["state"] == state
        ]
        return 200, items[(page - 1) * limit : page * limit]

    def update_pull(self, req: Request, number: str) -> tuple[int, Any]:
        return super().update_pull(req, number)

    def list_comments(self, req: Request, number: str) -> tuple[int, Any]:
        """Gitea's issueGetComments takes only ``since`` and ``before``: every comment."""
        unknown = set(req.query) - {"since", "before"}
        if unknown:
            return 422, {"message": f"unknown parameters {sorted(unknown)}"}
        if int(number) not in self.prs:
            return 404, {"message": "Not Found"}
        return 200, self.comment_list(int(number))


class GitLabServer(FakeForge):
    """GitLab v4: docs.gitlab.com/api/merge_requests, api/notes, api/commits (statuses)."""

    def authorized(self, headers: dict[str, str]) -> bool:
        return headers.get("private-token") == TOKEN

    def _base(self) -> str:
        return f"{self.api_prefix}/projects/{self.owner}%2F{self.repo}"

    def routes(self) -> list[Route]:
        b = re.escape(self._base())
        return [
            ("GET", rf"{b}/merge_requests", self.list_mrs),
            ("POST", rf"{b}/merge_requests", self.create_mr),
            ("PUT", rf"{b}/merge_requests/(\d+)", self.update_mr),
            ("POST", rf"{b}/merge_requests/(\d+)/notes", self.create_note),
            ("GET", rf"{b}/merge_requests/(\d+)/notes", self.list_notes),
            ("PUT", rf"{b}/merge_requests/(\d+)/notes/(\d+)", self.update_note),
            ("POST", rf"{b}/statuses/([0-9a-f]{{40}})", self.create_status),
        ]

    def _mr_json(self, mr: dict[str, Any]) -> dict[str, Any]:
        return {
            **mr,
            "web_url": f"https://gitlab.test/{self.owner}/{self.repo}/-/merge_requests/{mr['iid']}",
        }

    def list_mrs(self, req: Request) -> tuple[int, Any]:
        state = req.query.get("state", "all")
        source = req.query.get("source_branch")
        return 200, [
            self._mr_json(m)
            for m in self.prs.values()
            if (state == "all" or m["state"] == state) and source in (None, m["source_branch"])
        ]

    def create_mr(self, req: Request) -> tuple[int, Any]:
        bad = _need(
            req.body,
            {"source_branch", "target_branch", "title"},
            {"description", "remove_source_branch", "labels"},
        )
        if bad:
            return bad
        if any(m["source_branch"] == req.body["source_branch"] for m in self.open_prs()):
            return 409, {
                "message": ["Another open merge request already exists for this source branch"]
            }
        iid = len(self.prs) + 1
        mr = {
            "iid": iid,
            "state": "opened",
            "title": req.body["title"],
            "description": req.body.get("description"),
            "source_branch": req.body["source_branch"],
            "target_branch": req.body["target_branch"],
        }
        self.prs[iid] = mr
        return 201, self._mr_json(mr)

    def update_mr(self, req: Request, iid: str) -> tuple[int, Any]:
        bad = _need(req.body, set(), {"title", "description", "state_event", "target_branch"})
        if bad:
            return bad
        mr = self.prs.get(int(iid))
        if mr is None:
            return 404, {"message": "404 Not found"}
        body = dict(req.body)
        if body.pop("state_event", None) == "close":
            mr["state"] = "closed"
        mr.update(body)
        return 200, self._mr_json(mr)

    def create_note(self, req: Request, iid: str) -> tuple[int, Any]:
        bad = _need(req.body, {"body"}, set())
        if bad:
            return bad
        if int(iid) not in self.prs:
            return 404, {"message": "404 Not found"}
        note_id = self.add_comment(int(iid), req.body["body"])
        return 201, {"id": note_id, "body": req.body["body"], "system": False}

    def list_notes(self, req: Request, iid: str) -> tuple[int, Any]:
        """docs.gitlab.com/api/notes#list-all-merge-request-notes: per_page (max 100), page;
        system notes ("added 1 commit") are among them."""
        if int(iid) not in self.prs:
            return 404, {"message": "404 Not found"}
        per_page = min(int(req.query.get("per_page", 20)), 100)
        page = int(req.query.get("page", 1))
        system = [{"id": 1, "body": "added 1 commit", "system": True}]
        items = system + [{**c, "system": False} for c in self.comment_list(int(iid))]
        return 200, items[(page - 1) * per_page : page * per_page]

    def update_note(self, req: Request, iid: str, note_id: str) -> tuple[int, Any]:
        """docs.gitlab.com/api/notes#modify-existing-merge-request-note: PUT, body."""
        bad = _need(req.body, {"body"}, set())
        if bad:
            return bad
        where = self.comment_ids.get(int(note_id))
        if where is None or where[0] != int(iid):
            return 404, {"message": "404 Not found"}
        self.comments[where[0]][where[1]] = req.body["body"]
        return 200, {"id": int(note_id), "body": req.body["body"], "system": False}

    def create_status(self, req: Request, sha: str) -> tuple[int, Any]:
        bad = _need(req.body, {"state"}, {"name", "description", "target_url", "ref", "context"})
        if bad:
            return bad
        if req.body["state"] not in ("pending", "running", "success", "failed", "canceled"):
            return 400, {"message": "state is invalid"}
        self.statuses.setdefault(sha, []).append(req.body)
        return 201, req.body


def _handler(forge: FakeForge) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet tests
            pass

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            path = parts.path
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = "<invalid>"
            req = Request(self.command, path, query, headers, body)
            forge.requests.append(req)
            status: int
            data: Any
            if not forge.authorized(headers):
                status, data = 401, {"message": "Bad credentials"}
            else:
                status, data = 404, {"message": "Not Found"}
                for method, pattern, fn in forge.routes():
                    match = re.fullmatch(pattern, path)
                    if match and method == self.command:
                        if (
                            self.command in ("POST", "PATCH", "PUT")
                            and headers.get("content-type") != "application/json"
                        ):
                            status, data = 415, {"message": "Unsupported Media Type"}
                        else:
                            status, data = fn(req, *match.groups())
                        break
            out = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve  # noqa: N815 - http.server

    return Handler


@contextmanager
def serving(forge: FakeForge) -> Iterator[str]:
    """Run ``forge`` on 127.0.0.1 in a thread; yields its API root URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(forge))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{forge.api_prefix}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
