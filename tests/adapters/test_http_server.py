"""The HTTP endpoints over real HTTP on an ephemeral port: metrics, health, signed webhooks."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator

import httpx
import pytest

from reconciler.adapters.http_server import HttpServer, parse_listen
from reconciler.engine.health import Health
from reconciler.engine.metrics import Metrics
from reconciler.errors import ConfigError

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
