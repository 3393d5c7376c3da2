"""The three forge clients against local API-faithful servers (not the real services)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest

from reconciler.adapters.forges.clients import GitHubForge, GitLabForge, open_forge
from reconciler.errors import ForgeError, ForgeUnavailable
from tests.forges.servers import TOKEN, FakeForge, GiteaServer, GitHubServer, GitLabServer, serving

SHA = "0123456789abcdef0123456789abcdef01234567"

SERVERS: dict[str, Callable[[], FakeForge]] = {
    "github": lambda: GitHubServer(api_prefix="/api/v3"),
    "gitea": lambda: GiteaServer(api_prefix="/api/v1"),
    "gitlab": lambda: GitLabServer(api_prefix="/api/v4"),
}


@pytest.fixture(params=sorted(SERVERS))
def forge(request: pytest.FixtureRequest) -> Iterator[tuple[FakeForge, GitHubForge | GitLabForge]]:
    kind: str = request.param
    server = SERVERS[kind]()
    with serving(server) as url:
        client = open_forge(kind, project="infra/state", token=TOKEN, api_url=url)
        try:
            yield server, client
        finally:
            client.disconnect()


def test_pull_request_lifecycle(forge: tuple[FakeForge, GitHubForge | GitLabForge]) -> None:
    server, client = forge
    assert client.find_open("reconciler/lab") is None
    pr = client.create(head="reconciler/lab", base="main", title="t1", body="b1")
    assert pr.number >= 1
    assert pr.url.startswith("https://")
    found = client.find_open("reconciler/lab")
    assert found is not None
    assert (found.number, found.title, found.body) == (pr.number, "t1", "b1")
    assert client.find_open("other") is None
    client.update(pr.number, title="t2", body="b2")
    found = client.find_open("reconciler/lab")
    assert found is not None
    assert (found.title, found.body) == ("t2", "b2")
    client.comment(pr.number, "why")
    assert server.comments[pr.number] == ["why"]
    client.close(pr.number)
    assert client.find_open("reconciler/lab") is None
    client.set_status(SHA, state="failure", context="reconciler/validate", description="2 errors")
    (status,) = server.statuses[SHA]
    assert status["state"] in ("failure", "failed")
    assert server.requests
    assert all(r.path.startswith(server.api_prefix) for r in server.requests)


def test_a_wrong_token_is_an_error_without_the_token(caplog: pytest.LogCaptureFixture) -> None:
    server = GitHubServer()
    caplog.set_level(logging.DEBUG)
    with serving(server) as url:
        client = open_forge("github", project="infra/state", token="wrong-secret", api_url=url)
        with pytest.raises(ForgeError) as info:
            client.find_open("x")
        client.disconnect()
    assert info.value.status == 401
    assert "RECONCILER_FORGE_TOKEN" in (info.value.hint or "")
    text = str(info.value) + repr(client) + caplog.text
    assert "wrong-secret" not in text


def test_unreachable_forge_and_bad_project() -> None:
    client = open_forge("gitlab", project="a/b", token=TOKEN, api_url="http://127.0.0.1:9/api/v4")
    with pytest.raises(ForgeUnavailable, match="ConnectError"):  # transient: retried
        client.find_open("x")
    with pytest.raises(ForgeError, match="not OWNER/NAME"):
        open_forge("github", project="justname", token=TOKEN)
    with pytest.raises(ForgeError, match="needs --forge-url"):
        open_forge("gitea", project="a/b", token=TOKEN)


def test_gitea_finds_a_pull_request_beyond_the_first_page() -> None:
    server = GiteaServer()
    with serving(server) as url:
        client = open_forge("gitea", project="infra/state", token=TOKEN, api_url=url)
        for i in range(60):
            client.create(head=f"b{i}", base="main", title=str(i), body="")
        found = client.find_open("b57")
        client.disconnect()
    assert found is not None
    assert found.title == "57"
    assert any(r.query.get("page") == "2" for r in server.requests)


def test_body_over_the_limit_is_refused_by_the_server() -> None:
    server = GitHubServer()
    with serving(server) as url:
        client = open_forge("github", project="infra/state", token=TOKEN, api_url=url)
        assert isinstance(client, GitHubForge)
        assert client.body_limit == 65_536
        with pytest.raises(ForgeError, match="422"):
            client.create(head="h", base="main", title="t", body="x" * 65_537)
        client.disconnect()


def test_comments_are_listed_and_updated_in_place(
    forge: tuple[FakeForge, GitHubForge | GitLabForge],
) -> None:
    server, client = forge
    pr = client.create(head="feature", base="main", title="t", body="b")
    assert client.comments(pr.number) == []
    client.comment(pr.number, "first")
    client.comment(pr.number, "second")
    found = client.comments(pr.number)
    assert [c.body for c in found] == ["first", "second"]  # GitLab's system note left out
    client.update_comment(pr.number, found[1].id, "second, edited")
    assert server.comments[pr.number] == ["first", "second, edited"]
    assert [c.body for c in client.comments(pr.number)] == ["first", "second, edited"]
