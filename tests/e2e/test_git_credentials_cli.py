"""Credentials as a user passes them: ``plan``, ``propose`` and ``history`` with ``--repo`` over
HTTP (``git http-backend`` behind Basic auth) and a forge token, against the local GitHub-API
server. Neither secret may reach the output, the logs, a commit, the clone's config, or any
process's command line while the commands run."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.adapters.test_git_http import remote_objects_text
from tests.e2e.test_plan_cli import NOW, Run, reconciler, write_scenario
from tests.forges.servers import TOKEN, GitHubServer, serving
from tests.githttp import PASSWORD, USER, CmdlineWatch, GitHttpServer, git_http
from tests.gitrepos import state_remote

GIT_BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
SECRETS = [PASSWORD, GIT_BASIC, TOKEN]


@pytest.fixture
def world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[GitHttpServer, str, Path]]:
    folder, snapshot = write_scenario("drain_maintenance", tmp_path / "scenario")
    state_remote(tmp_path, folder)  # tmp_path/remote.git, served below
    monkeypatch.setenv("RECONCILER_FORGE_TOKEN", TOKEN)
    monkeypatch.delenv("RECONCILER_GIT_TOKEN", raising=False)
    with git_http(tmp_path) as server, serving(GitHubServer(owner="infra", repo="state")) as api:
        yield server, api, snapshot


def _free(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


def test_plan_propose_history_keep_both_secrets_everywhere_out(
    world: tuple[GitHttpServer, str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, api, snapshot = world
    url = server.url("remote.git")
    cache = ["--cache-dir", str(tmp_path / "cache")]
    offline = ["--snapshot", str(snapshot), "--now", NOW, "--state-dir", str(tmp_path / "st")]
    forge = ["--forge", "github", "--forge-url", api, "--forge-project", "infra/state"]
    proposal = ["--branch", "reconciler/lab"]  # the proposal's commit, read back by history
    caplog.set_level(logging.DEBUG)
    runs: list[Run] = []
    with CmdlineWatch(SECRETS, marker=server.base.removeprefix("http://")) as watch:
        runs.append(reconciler(capsys, "plan", "--repo", url, *cache, *offline))
        assert runs[-1].code == 2, runs[-1].err
        runs.append(reconciler(capsys, "propose", "--repo", url, *cache, *offline, *forge))
        assert runs[-1].code == 2, runs[-1].err
        history = ["history", "--repo", url, *cache, *proposal, "--format", "json"]
        runs.append(reconciler(capsys, *history))
        assert runs[-1].code == 0, runs[-1].err
        assert json.loads(runs[-1].out)["entries"]
        # a remote that refuses the credential: the error names the URL, not the password
        wrong = url.replace(PASSWORD, "wr0ng-" + PASSWORD[::-1])
        runs.append(reconciler(capsys, "history", "--repo", wrong, "--cache-dir", str(tmp_path)))
        assert runs[-1].code == 1
        assert "***@127.0.0.1" in runs[-1].err
    assert watch.seen, "no git process talking to the server was seen"
    assert watch.hits == []
    for run in runs:
        _free(run.out + run.err)
        assert "wr0ng-" not in run.out + run.err
    _free(caplog.text)
    for config in (tmp_path / "cache").glob("*/.git/config"):
        _free(config.read_text())
    _free(remote_objects_text(tmp_path / "remote.git"))
    authorized = [ok for _, ok in server.requests]
    assert any(authorized)  # the credential was sent and needed:
    assert not all(authorized)  # the wrong one was refused
