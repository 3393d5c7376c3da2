"""``reconciler run``'s HTTP endpoints, on the standard library's threading HTTP server.

- ``GET /metrics``: the loop's Prometheus registry (not the process-global one);
- ``GET /healthz``: 200 while healthy, 503 with the reason when stalled, as JSON;
- ``POST /webhook``: a forge's push event. GitHub's ``X-Hub-Signature-256`` and Gitea's
  ``X-Gitea-Signature`` (HMAC-SHA256 of the body) and GitLab's ``X-Gitlab-Token`` (the secret
  itself) are compared in constant time with the secret; anything missing or wrong is 401 and
  triggers nothing. A valid push (to the watched branch, when one is given) triggers a round.
  A delivery is triggered once: the forge's delivery id (GitHub's ``X-GitHub-Delivery``,
  Gitea's and Forgejo's ``X-Gitea-Delivery``/``X-Forgejo-Delivery``, GitLab's
  ``Idempotency-Key`` or else ``X-Gitlab-Event-UUID``) of the last ``MAX_DELIVERIES`` signed
  deliveries is kept, and one seen already (a replay, a forge's retry) is answered 200 and
  triggers nothing.

The endpoints face the network (a forge must reach ``/webhook``), so each connection is bounded:
a read that waits longer than ``read_timeout`` closes it, a connection older than
``connection_deadline`` is shut down however slowly it trickles, at most ``max_connections`` are
served at once (one thread each; the rest are answered 503 and closed at once), a body is
refused from its Content-Length before it is read (and so is a request with two of them, or a
Transfer-Encoding), a webhook's signature is checked before its body is parsed, and a body
nested deeper than the parser goes is 400. A client that goes away is one line in the log,
never a traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import socket
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from reconciler.errors import ConfigError

log = logging.getLogger(__name__)

MAX_BODY = 5 * 1024 * 1024
"""GitHub caps webhook payloads at 25 MB; a push event is far smaller than this."""
READ_TIMEOUT: Final = 10.0
"""Seconds a connection may wait for the client's next bytes before it is closed."""
CONNECTION_DEADLINE: Final = 30.0
"""Seconds a connection may last in all, however slowly its client sends."""
MAX_CONNECTIONS: Final = 64
"""Connections served at once (a thread each); Prometheus and a forge need a few."""
MAX_DELIVERIES: Final = 4096
"""Delivery ids remembered to recognize a replay: far more than a forge retries within hours."""
_DELIVERY_HEADERS: Final = {
    "github": ("x-github-delivery",),
    "gitea": ("x-gitea-delivery", "x-forgejo-delivery", "x-gogs-delivery", "x-github-delivery"),
    "gitlab": ("idempotency-key", "x-gitlab-event-uuid"),
}
"""Per forge, the headers that name one delivery, kept the same when it is sent again."""
_BUSY: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 31\r\n"
    b"Retry-After: 1\r\nConnection: close\r\n\r\ntoo many connections; try again\n"
)


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
    except RecursionError as err:  # nesting deeper than the parser's recursion limit
        raise TooDeep("the body nests deeper than a push event does") from err
    ref = payload.get("ref") if isinstance(payload, dict) else None
    return True, ref if isinstance(ref, str) else None


class TooDeep(ValueError):
    """A webhook body the JSON parser cannot follow to its end."""


def delivery_id(forge: str, headers: dict[str, str]) -> str | None:
    """The id the forge gave this delivery (the same on a retry or a redelivery), or None."""
    for name in _DELIVERY_HEADERS.get(forge, ()):
        value = headers.get(name, "").strip()
        if value:
            return value
    return None


class _Deliveries:
    """The ids of the last ``limit`` deliveries (hashed: an id is any header's text)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def first(self, forge: str, delivery: str) -> bool:
        """True the first time ``delivery`` of ``forge`` is seen, False for a replay."""
        key = hashlib.sha256(f"{forge}\0{delivery}".encode()).hexdigest()
        with self._lock:
            if key in self._seen:
                self._seen.move_to_end(key)
                return False
            self._seen[key] = None
            while len(self._seen) > self.limit:
                self._seen.popitem(last=False)
            return True


def _shown(delivery: str) -> str:
    """A delivery id fit for a log line and an answer."""
    text = "".join(c for c in delivery[:80] if c.isalnum() or c in "-_.:")
    return text or "?"


class _BoundedServer(ThreadingHTTPServer):
    """A thread per connection, at most ``max_connections`` of them, none older than
    ``deadline``; errors of a connection go to the log, never to stderr."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog; socketserver's 5 makes a burst wait seconds

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        max_connections: int,
        deadline: float,
    ) -> None:
        super().__init__(address, handler)
        self.max_connections = max_connections
        self.deadline = deadline
        self._lock = threading.Lock()
        self._open: dict[socket.socket, float] = {}
        self._full = False

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            busy = len(self._open) >= self.max_connections
            if not busy:
                self._open[request] = time.monotonic()
                self._full = False
            warn, self._full = busy and not self._full, self._full or busy
        if busy:
            if warn:
                log.warning(
                    "http: %d connections open, the most served at once; refusing more with 503",
                    self.max_connections,
                )
            self._refuse(request)
            return
        super().process_request(request, client_address)

    def _refuse(self, request: socket.socket) -> None:
        with contextlib.suppress(OSError):
            request.setblocking(False)
            request.send(_BUSY)
        self.shutdown_request(request)

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._open.pop(request, None)
        super().shutdown_request(request)

    def service_actions(self) -> None:
        """Between accepts (every poll interval): shut down connections past the deadline,
        which wakes their threads from a read or write that would otherwise go on."""
        now = time.monotonic()
        with self._lock:
            late = [s for s, start in self._open.items() if now - start > self.deadline]
        for sock in late:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        peer = client_address[0] if isinstance(client_address, tuple) else client_address
        if isinstance(error, ConnectionError | TimeoutError):
            log.info("http: client %s went away: %s", peer, error.__class__.__name__)
        else:
            log.error("http: request from %s failed: %r", peer, error)

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._open)


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
        status: Callable[[], dict[str, object]] | None = None,
        read_timeout: float = READ_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        connection_deadline: float = CONNECTION_DEADLINE,
        max_deliveries: int = MAX_DELIVERIES,
    ) -> None:
        self.registry = registry
        self.deliveries = _Deliveries(max_deliveries)
        self.health = health
        self.on_push = on_push
        self.secret = secret.encode() if secret else None
        self.branch = branch
        self.status = status
        """/status: what a fleet instance holds and is assigned (None: no /status)."""
        handler = _handler(self, read_timeout)
        try:
            self.server = _BoundedServer(
                listen, handler, max_connections=max_connections, deadline=connection_deadline
            )
        except OSError as err:
            raise ConfigError(
                f"cannot listen on {listen[0]}:{listen[1]}: {err.strerror}",
                hint="pick a free port with --listen, or stop the process that holds it",
            ) from err
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
        delivery = delivery_id(forge, headers)
        if delivery is not None and not self.deliveries.first(forge, delivery):
            log.warning(
                "webhook: %s delivery %s was seen already; ignored", forge, _shown(delivery)
            )
            return (
                HTTPStatus.OK,
                f"delivery {_shown(delivery)} was seen already (a replay); ignored\n",
            )
        try:
            is_push, ref = push_ref(forge, headers, body)
        except TooDeep as err:
            log.warning("webhook refused: %s", err)
            return HTTPStatus.BAD_REQUEST, f"{err}\n"
        if not is_push:
            return HTTPStatus.OK, "not a push event; ignored\n"
        if self.branch and ref is not None and ref != f"refs/heads/{self.branch}":
            return HTTPStatus.OK, f"push to {ref}, not {self.branch}; ignored\n"
        log.info("webhook: %s push to %s", forge, ref or "?")
        self.on_push(f"webhook:{forge}")
        return HTTPStatus.ACCEPTED, "round triggered\n"


_ALLOWED: Final = {
    "/metrics": "GET, HEAD",
    "/healthz": "GET, HEAD",
    "/status": "GET, HEAD",
    "/webhook": "POST",
}


def _handler(app: HttpServer, read_timeout: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "reconciler"
        protocol_version = "HTTP/1.1"
        timeout = read_timeout  # every read of the connection; StreamRequestHandler sets it

        def _send(
            self,
            status: HTTPStatus,
            body: bytes,
            content_type: str,
            headers: dict[str, str] | None = None,
        ) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _not_allowed(self, path: str) -> bool:
            """Answer 405 when ``path`` exists but not for this method."""
            allowed = _ALLOWED.get(path)
            if allowed is None or self.command in allowed.split(", "):
                return False
            self.close_connection = True  # a body we will not read may follow
            self._send(
                HTTPStatus.METHOD_NOT_ALLOWED,
                f"{path} answers {allowed}\n".encode(),
                "text/plain",
                {"Allow": allowed},
            )
            return True

        def do_GET(self) -> None:  # noqa: N802 (http.server names)
            path = self.path.split("?", 1)[0]
            if self._not_allowed(path):
                return
            if path == "/metrics":
                self._send(HTTPStatus.OK, generate_latest(app.registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                healthy, report = app.health()
                status = HTTPStatus.OK if healthy else HTTPStatus.SERVICE_UNAVAILABLE
                body = (json.dumps(report) + "\n").encode()
                self._send(status, body, "application/json")
            elif path == "/status" and app.status is not None:
                body = (json.dumps(app.status(), sort_keys=True) + "\n").encode()
                self._send(HTTPStatus.OK, body, "application/json")
            else:
                self._send(
                    HTTPStatus.NOT_FOUND, b"try /metrics, /healthz or /webhook\n", "text/plain"
                )

        do_HEAD = do_GET  # noqa: N815

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0]
            if self._not_allowed(path):
                return
            if path != "/webhook":
                self.close_connection = True
                self._send(HTTPStatus.NOT_FOUND, b"POST only to /webhook\n", "text/plain")
                return
            lengths = self.headers.get_all("Content-Length") or []
            if len(lengths) > 1:  # which one frames the body is for an attacker to exploit
                self.close_connection = True
                self._send(HTTPStatus.BAD_REQUEST, b"more than one Content-Length\n", "text/plain")
                return
            text = (lengths[0] if lengths else "0").strip()
            if not text.isdigit() or self.headers.get("Transfer-Encoding"):
                self.close_connection = True
                self._send(HTTPStatus.BAD_REQUEST, b"a body needs a Content-Length\n", "text/plain")
                return
            if int(text) > MAX_BODY:  # decided from the header: the body is never read
                self.close_connection = True
                self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, b"body too large\n", "text/plain")
                return
            body = self.rfile.read(int(text))
            if len(body) < int(text):  # the client closed before sending it all
                self.close_connection = True
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, text = app.webhook(headers, body)
            self._send(status, text.encode(), "text/plain; charset=utf-8")

        def log_message(self, format: str, *args: object) -> None:
            log.debug("http: " + format, *args)

    return Handler
