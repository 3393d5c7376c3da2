"""``reconciler run``'s HTTP endpoints, on the standard library's threading HTTP server.

- ``GET /metrics``: the loop's Prometheus registry (not the process-global one);
- ``GET /healthz``: 200 while healthy, 503 with the reason when stalled, as JSON;
- ``POST /webhook``: a forge's push event. GitHub's ``X-Hub-Signature-256`` and Gitea's
  ``X-Gitea-Signature`` (HMAC-SHA256 of the body) and GitLab's ``X-Gitlab-Token`` (the secret
  itself) are compared in constant time with the secret; anything missing or wrong is 401 and
  triggers nothing. A valid push (to the watched branch, when one is given) triggers a round.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from reconciler.errors import ConfigError

log = logging.getLogger(__name__)

MAX_BODY = 5 * 1024 * 1024
"""GitHub caps webhook payloads at 25 MB; a push event is far smaller than this."""


def parse_listen(text: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9187`` for IPv6) into a bind address."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(
            f"--listen {text!r} is not host:port", hint="write e.g. 127.0.0.1:9187 or [::1]:9187"
        )
    return host.strip("[]") or "0.0.0.0", int(port)


def signature_valid(secret: bytes, headers: dict[str, str], body: bytes) -> str | None:
    """The forge whose signature header is present and valid, or None."""
    digest = hmac.new(secret, body, hashlib.sha256).hexdigest()
    github = headers.get("x-hub-signature-256")
    if github is not None:
        return (
            "github" if hmac.compare_digest(github.encode(), f"sha256={digest}".encode()) else None
        )
    gitea = headers.get("x-gitea-signature") or headers.get("x-forgejo-signature")
    if gitea is not None:
        return "gitea" if hmac.compare_digest(gitea.encode(), digest.encode()) else None
    gitlab = headers.get("x-gitlab-token")
    if gitlab is not None:
        return "gitlab" if hmac.compare_digest(gitlab.encode(), secret) else None
    return None


def push_ref(forge: str, headers: dict[str, str], body: bytes) -> tuple[bool, str | None]:
    """Whether the event is a push, and the ref it pushed to (when the payload says)."""
    event = (
        headers.get("x-github-event")
        or headers.get("x-gitea-event")
        or headers.get("x-forgejo-event")
        or headers.get("x-gitlab-event")
        or ""
    )
    if event.lower() not in ("push", "push hook"):
        return False, None
    try:
        payload = json.loads(body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        return True, None
    ref = payload.get("ref") if isinstance(payload, dict) else None
    return True, ref if isinstance(ref, str) else None


class HttpServer:
    def __init__(
        self,
        listen: tuple[str, int],
        *,
        registry: CollectorRegistry,
        health: Callable[[], tuple[bool, dict[str, object]]],
        on_push: Callable[[str], None],
        secret: str | None,
        branch: str | None = None,
    ) -> None:
        self.registry = registry
        self.health = health
        self.on_push = on_push
        self.secret = secret.encode() if secret else None
        self.branch = branch
        handler = _handler(self)
        try:
            self.server = ThreadingHTTPServer(listen, handler)
        except OSError as err:
            raise ConfigError(
                f"cannot listen on {listen[0]}:{listen[1]}: {err.strerror}",
                hint="pick a free port with --listen, or stop the process that holds it",
            ) from err
        self.server.daemon_threads = True
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, name="http"
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def webhook(self, headers: dict[str, str], body: bytes) -> tuple[HTTPStatus, str]:
        if self.secret is None:
            return HTTPStatus.UNAUTHORIZED, "webhooks are off: set RECONCILER_WEBHOOK_SECRET\n"
        forge = signature_valid(self.secret, headers, body)
        if forge is None:
            log.warning("webhook refused: missing or wrong signature")
            return HTTPStatus.UNAUTHORIZED, "missing or wrong signature\n"
        is_push, ref = push_ref(forge, headers, body)
        if not is_push:
            return HTTPStatus.OK, "not a push event; ignored\n"
        if self.branch and ref is not None and ref != f"refs/heads/{self.branch}":
            return HTTPStatus.OK, f"push to {ref}, not {self.branch}; ignored\n"
        log.info("webhook: %s push to %s", forge, ref or "?")
        self.on_push(f"webhook:{forge}")
        return HTTPStatus.ACCEPTED, "round triggered\n"


def _handler(app: HttpServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "reconciler"
        protocol_version = "HTTP/1.1"

        def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server names)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(HTTPStatus.OK, generate_latest(app.registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                healthy, report = app.health()
                status = HTTPStatus.OK if healthy else HTTPStatus.SERVICE_UNAVAILABLE
                body = (json.dumps(report) + "\n").encode()
                self._send(status, body, "application/json")
            else:
                self._send(
                    HTTPStatus.NOT_FOUND, b"try /metrics, /healthz or /webhook\n", "text/plain"
                )

        do_HEAD = do_GET  # noqa: N815

        def do_POST(self) -> None:  # noqa: N802
            if self.path.split("?", 1)[0] != "/webhook":
                self._send(HTTPStatus.NOT_FOUND, b"POST only to /webhook\n", "text/plain")
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY:
                self.close_connection = True
                self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, b"body too large\n", "text/plain")
                return
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, text = app.webhook(headers, body)
            self._send(status, text.encode(), "text/plain; charset=utf-8")

        def log_message(self, format: str, *args: object) -> None:
            log.debug("http: " + format, *args)

    return Handler
