"""The HTTP endpoints over real HTTP on an ephemeral port: metrics, health, signed webhooks."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from reconciler.adapters.http.server import HttpServer, parse_listen
from reconciler.engine.health import Health
from reconciler.engine.metrics import Metrics
from reconciler.errors import ConfigError
from tests.waiting import waited

SECRET = "s3cret"
PUSH = json.dumps({"ref": "refs/heads/main", "after": "abc"}).encode()


class App:
    def __init__(self) -> None:
        self.metrics = Metrics("lab")
        self.health = Health()
        self.pushes: list[str] = []
        self.server = HttpServer(
            ("127.0.0.1", 0),
            registry=self.metrics.registry,
            health=lambda: (self.health.healthy, self.health.report()),
            on_push=self.pushes.append,
            secret=SECRET,
            branch="main",
        )
        host, port = self.server.address
        self.url = f"http://{host}:{port}"


@pytest.fixture
def app() -> Iterator[App]:
    a = App()
    a.server.start()
    try:
        yield a
    finally:
        a.server.stop()


def _hmac(body: bytes, secret: str = SECRET) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def test_metrics_carry_the_shared_names(app: App) -> None:
    app.metrics.set_leader(True)
    r = httpx.get(f"{app.url}/metrics")
    assert r.status_code == 200
    assert 'reconciler_leader{cluster="lab"} 1.0' in r.text
    assert 'reconciler_reconciles_total{cluster="lab",result="ok"} 0.0' in r.text
    assert 'reconciler_migrations_total{cluster="lab",outcome="aborted"} 0.0' in r.text
    assert "python_gc" not in r.text  # our registry, not the global one


def test_healthz_is_503_with_the_reason_when_stalled(app: App) -> None:
    assert httpx.get(f"{app.url}/healthz").status_code == 200
    app.health.stalled("InvalidPolicy", "policy.yaml:3: spec.mode 'aply'")
    r = httpx.get(f"{app.url}/healthz")
    assert r.status_code == 503
    assert r.json()["reason"] == "InvalidPolicy"
    assert "'aply'" in r.json()["message"]


@pytest.mark.parametrize(
    ("headers", "forge"),
    [
        ({"X-Hub-Signature-256": f"sha256={_hmac(PUSH)}", "X-GitHub-Event": "push"}, "github"),
        ({"X-Gitea-Signature": _hmac(PUSH), "X-Gitea-Event": "push"}, "gitea"),
        ({"X-Gitlab-Token": SECRET, "X-Gitlab-Event": "Push Hook"}, "gitlab"),
    ],
)
def test_a_signed_push_triggers_a_round(app: App, headers: dict[str, str], forge: str) -> None:
    r = httpx.post(f"{app.url}/webhook", content=PUSH, headers=headers)
    assert r.status_code == 202
    assert app.pushes == [f"webhook:{forge}"]


@pytest.mark.parametrize(
    "headers",
    [
        {"X-GitHub-Event": "push"},
        {"X-Hub-Signature-256": f"sha256={_hmac(PUSH, 'wrong')}", "X-GitHub-Event": "push"},
        {"X-Hub-Signature-256": _hmac(PUSH), "X-GitHub-Event": "push"},  # no sha256= prefix
        {"X-Gitea-Signature": _hmac(PUSH + b" "), "X-Gitea-Event": "push"},
        {"X-Gitlab-Token": "s3cre", "X-Gitlab-Event": "Push Hook"},
    ],
)
def test_a_missing_or_wrong_signature_is_401_and_triggers_nothing(
    app: App, headers: dict[str, str]
) -> None:
    r = httpx.post(f"{app.url}/webhook", content=PUSH, headers=headers)
    assert r.status_code == 401
    assert app.pushes == []


def test_other_events_and_other_branches_trigger_nothing(app: App) -> None:
    ping = b'{"zen": "hi"}'
    r = httpx.post(
        f"{app.url}/webhook",
        content=ping,
        headers={"X-Hub-Signature-256": f"sha256={_hmac(ping)}", "X-GitHub-Event": "ping"},
    )
    assert r.status_code == 200
    other = json.dumps({"ref": "refs/heads/feature"}).encode()
    r = httpx.post(
        f"{app.url}/webhook",
        content=other,
        headers={"X-Gitea-Signature": _hmac(other), "X-Gitea-Event": "push"},
    )
    assert r.status_code == 200
    assert "ignored" in r.text
    assert app.pushes == []


def test_webhooks_are_refused_without_a_secret() -> None:
    pushes: list[str] = []
    server = HttpServer(
        ("127.0.0.1", 0),
        registry=Metrics("lab").registry,
        health=lambda: (True, {}),
        on_push=pushes.append,
        secret=None,
    )
    server.start()
    try:
        host, port = server.address
        r = httpx.post(
            f"http://{host}:{port}/webhook",
            content=PUSH,
            headers={"X-Gitlab-Token": "", "X-Gitlab-Event": "Push Hook"},
        )
        assert r.status_code == 401
        assert "RECONCILER_WEBHOOK_SECRET" in r.text
        assert pushes == []
    finally:
        server.stop()


def test_listen_addresses() -> None:
    assert parse_listen("127.0.0.1:9187") == ("127.0.0.1", 9187)
    assert parse_listen("[::1]:80") == ("::1", 80)
    assert parse_listen(":9187") == ("0.0.0.0", 9187)
    with pytest.raises(ConfigError, match="not host:port"):
        parse_listen("localhost")


def test_a_port_in_use_is_a_clear_error(app: App) -> None:
    host, port = app.server.address
    with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
        HttpServer(
            (host, port),
            registry=app.metrics.registry,
            health=lambda: (True, {}),
            on_push=print,
            secret=None,
        )


# --- the endpoints face the network: idle, half-sent, oversized and unsigned requests ---------


class Tight(App):
    """A server with a short read timeout and a small connection bound, so tests are quick."""

    def __init__(
        self,
        *,
        read_timeout: float = 1.0,
        max_connections: int = 16,
        connection_deadline: float = 30.0,
    ) -> None:
        self.metrics = Metrics("lab")
        self.health = Health()
        self.pushes = []
        self.server = HttpServer(
            ("127.0.0.1", 0),
            registry=self.metrics.registry,
            health=lambda: (self.health.healthy, self.health.report()),
            on_push=self.pushes.append,
            secret=SECRET,
            branch="main",
            read_timeout=read_timeout,
            max_connections=max_connections,
            connection_deadline=connection_deadline,
        )
        host, port = self.server.address
        self.url = f"http://{host}:{port}"


@pytest.fixture
def tight() -> Iterator[Tight]:
    a = Tight()
    a.server.start()
    try:
        yield a
    finally:
        a.server.stop()


def _connect(app: App) -> socket.socket:
    host, port = app.server.address
    return socket.create_connection((host, port), timeout=10)


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` (EOF or reset) within ``within`` seconds; what it
    answered before closing is read and dropped."""
    sock.settimeout(within)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


def test_300_idle_or_half_sent_connections_hold_a_bounded_number_of_threads(
    tight: Tight, capfd: pytest.CaptureFixture[str]
) -> None:
    before = threading.active_count()
    socks = []
    try:
        for i in range(300):
            sock = _connect(tight)
            if i % 3 == 1:  # half a request line
                sock.sendall(b"GET /metr")
            elif i % 3 == 2:  # headers promising a body that never comes
                sock.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab")
            socks.append(sock)
        time.sleep(0.3)
        peak = threading.active_count() - before
        assert peak <= 16 + 1, f"{peak} threads for 300 connections"
        # the server still answers once the idle ones are gone: every one is closed by it
        assert all(_closed_by_server(s, within=5) for s in socks)
        assert waited(lambda: threading.active_count() <= before, 30, every=0.05) is not None
        assert httpx.get(f"{tight.url}/healthz").status_code == 200
    finally:
        for sock in socks:
            sock.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert "BrokenPipe" not in err


def test_clients_that_go_away_leave_no_traceback(
    tight: Tight, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="reconciler.adapters.http.server")
    big = b"x" * 50_000
    for _ in range(20):
        sock = _connect(tight)
        sock.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n" + big)
        # reset instead of a clean close: the server's reads and writes fail
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    for _ in range(20):
        sock = _connect(tight)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    # connections are accepted in order: once a later request is answered (200, or 503 while
    # all 16 are busy) every one above was taken; once none is open, each has been handled
    assert httpx.get(f"{tight.url}/healthz", timeout=30).status_code in (200, 503)
    assert waited(lambda: tight.server.server.connections == 0, 30, every=0.05) is not None
    assert httpx.get(f"{tight.url}/healthz").status_code == 200
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert "Error" not in err
    for record in caplog.records:
        assert record.exc_info is None, record.getMessage()
    went = [r.getMessage() for r in caplog.records if "went away" in r.getMessage()]
    assert went, [r.getMessage() for r in caplog.records]
    assert len(went) <= 40  # once per connection at most


def test_an_oversize_body_is_refused_before_it_is_read(tight: Tight) -> None:
    sock = _connect(tight)
    try:
        sock.sendall(
            b"POST /webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\n"
            b"Content-Length: 1000000000\r\n\r\n"
        )  # no body follows: an answer means the server did not wait for it
        sock.settimeout(5)
        answer = sock.recv(4096)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 413")
    assert tight.pushes == []


@pytest.mark.parametrize("length", ["-1", "12abc", "1e3"])
def test_a_malformed_content_length_is_refused(tight: Tight, length: str) -> None:
    sock = _connect(tight)
    try:
        sock.sendall(
            f"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode()
        )
        sock.settimeout(5)
        answer = sock.recv(4096)
    finally:
        sock.close()
    assert answer.split(b" ")[1] in (b"400", b"413")


def test_a_bad_signature_is_refused_before_the_body_is_parsed(
    tight: Tight, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[object] = []
    real = json.loads

    def spy(text: str | bytes, **kw: object) -> object:
        parsed.append(text)
        return real(text)

    monkeypatch.setattr(json, "loads", spy)
    r = httpx.post(
        f"{tight.url}/webhook",
        content=PUSH,
        headers={"X-Hub-Signature-256": f"sha256={_hmac(PUSH, 'wrong')}", "X-GitHub-Event": "push"},
    )
    assert r.status_code == 401
    assert parsed == []
    r = httpx.post(
        f"{tight.url}/webhook",
        content=PUSH,
        headers={"X-Hub-Signature-256": f"sha256={_hmac(PUSH)}", "X-GitHub-Event": "push"},
    )
    assert r.status_code == 202
    assert parsed  # the spy sees the parse of a signed body: it can fail


def test_get_on_the_webhook_is_405_with_allow_post(app: App) -> None:
    r = httpx.get(f"{app.url}/webhook")
    assert r.status_code == 405
    assert r.headers["Allow"] == "POST"
    r = httpx.post(f"{app.url}/metrics", content=b"")
    assert r.status_code == 405
    assert r.headers["Allow"] == "GET, HEAD"
    assert httpx.get(f"{app.url}/nowhere").status_code == 404


def test_a_slow_trickle_is_cut_at_the_connection_deadline() -> None:
    slow = Tight(read_timeout=1.0, connection_deadline=1.5)
    slow.server.start()
    try:
        sock = _connect(slow)
        start = time.monotonic()
        closed = False
        for char in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 100:
            try:
                sock.sendall(bytes([char]))  # one byte each 0.3 s: under the read timeout
            except OSError:
                closed = True
                break
            time.sleep(0.3)
            if time.monotonic() - start > 5:
                break
        closed = closed or _closed_by_server(sock, within=1)
        sock.close()
    finally:
        slow.server.stop()
    assert closed
    assert time.monotonic() - start < 5


# --- replays, framing and depth -------------------------------------------------------------


def _github(body: bytes, delivery: str | None = None, secret: str = SECRET) -> dict[str, str]:
    headers = {"X-Hub-Signature-256": f"sha256={_hmac(body, secret)}", "X-GitHub-Event": "push"}
    if delivery is not None:
        headers["X-GitHub-Delivery"] = delivery
    return headers


@pytest.mark.parametrize(
    ("headers", "forge"),
    [
        (_github(PUSH, "72d3162e-cc78-11e3-81ab-4c9367dc0958"), "github"),
        (
            {
                "X-Gitea-Signature": _hmac(PUSH),
                "X-Gitea-Event": "push",
                "X-Gitea-Delivery": "a1b2c3",
                "X-GitHub-Delivery": "a1b2c3",
            },
            "gitea",
        ),
        (
            {
                "X-Gitlab-Token": SECRET,
                "X-Gitlab-Event": "Push Hook",
                "Idempotency-Key": "908a6d9e-45fd-46c8-97e6-c4f350f219dd",
                "X-Gitlab-Event-UUID": "other-on-each-hook",
            },
            "gitlab",
        ),
        (
            {
                "X-Gitlab-Token": SECRET,
                "X-Gitlab-Event": "Push Hook",
                "X-Gitlab-Event-UUID": "13792a34-cac6-4fda-95a8-c58e00a3954e",
            },
            "gitlab",
        ),
    ],
)
def test_a_replayed_delivery_triggers_no_second_round(
    app: App, headers: dict[str, str], forge: str
) -> None:
    first = httpx.post(f"{app.url}/webhook", content=PUSH, headers=headers)
    assert first.status_code == 202
    for _ in range(3):
        again = httpx.post(f"{app.url}/webhook", content=PUSH, headers=headers)
        assert again.status_code == 200
        assert "seen already (a replay); ignored" in again.text
    assert app.pushes == [f"webhook:{forge}"]


def test_deliveries_with_their_own_ids_each_trigger_a_round(app: App) -> None:
    for i in range(3):
        r = httpx.post(f"{app.url}/webhook", content=PUSH, headers=_github(PUSH, f"id-{i}"))
        assert r.status_code == 202
    r = httpx.post(f"{app.url}/webhook", content=PUSH, headers=_github(PUSH))  # no id at all
    assert r.status_code == 202
    assert app.pushes == ["webhook:github"] * 4


def test_an_unsigned_request_does_not_use_up_a_delivery_id(app: App) -> None:
    forged = httpx.post(
        f"{app.url}/webhook", content=PUSH, headers=_github(PUSH, "next-id", secret="guess")
    )
    assert forged.status_code == 401
    real = httpx.post(f"{app.url}/webhook", content=PUSH, headers=_github(PUSH, "next-id"))
    assert real.status_code == 202
    assert app.pushes == ["webhook:github"]


def test_the_delivery_ids_kept_are_bounded() -> None:
    pushes: list[str] = []
    server = HttpServer(
        ("127.0.0.1", 0),
        registry=Metrics("lab").registry,
        health=lambda: (True, {}),
        on_push=pushes.append,
        secret=SECRET,
        max_deliveries=3,
    )
    server.start()
    host, port = server.address
    url = f"http://{host}:{port}/webhook"
    try:
        codes = [
            httpx.post(url, content=PUSH, headers=_github(PUSH, d)).status_code
            for d in ("a", "b", "a", "c", "d", "e", "a")
        ]
    finally:
        server.stop()
    # "a" is a replay while it is among the last 3 ids; once 3 others came after it, it is not
    assert codes == [202, 202, 200, 202, 202, 202, 202]
    assert len(pushes) == 6


def _raw(app: App, request: bytes) -> bytes:
    sock = _connect(app)
    try:
        sock.sendall(request)
        sock.settimeout(5)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    except TimeoutError:
        pass
    finally:
        sock.close()
    return answer


@pytest.mark.parametrize("second", [str(len(PUSH)), "0"])
def test_two_content_lengths_are_refused(tight: Tight, second: str) -> None:
    head = "".join(f"{k}: {v}\r\n" for k, v in _github(PUSH).items())
    request = (
        f"POST /webhook HTTP/1.1\r\nHost: x\r\n{head}Content-Length: {len(PUSH)}\r\n"
        f"Content-Length: {second}\r\n\r\n"
    ).encode() + PUSH
    answer = _raw(tight, request)
    assert answer.startswith(b"HTTP/1.1 400")
    assert b"more than one Content-Length" in answer
    assert tight.pushes == []


def test_a_signed_body_nested_200000_deep_is_400_and_the_server_goes_on(
    tight: Tight, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="reconciler.adapters.http.server")
    deep = b"[" * 200_000 + b"]" * 200_000
    r = httpx.post(f"{tight.url}/webhook", content=deep, headers=_github(deep), timeout=30)
    assert r.status_code == 400
    assert r.text == "the body nests deeper than a push event does\n"
    assert tight.pushes == []
    assert httpx.get(f"{tight.url}/healthz").status_code == 200
    assert "Traceback" not in capfd.readouterr().err
    assert all(r.exc_info is None for r in caplog.records)
    assert not any("RecursionError" in r.getMessage() for r in caplog.records)
