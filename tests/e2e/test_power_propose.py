"""``propose`` with power saving in ``mode: propose`` writes the power plan into the pull
request like moves: a "Power" section of the body (hosts to empty, why, the demand, the energy
saved per day from ``idleWatts``), the steps in the commit message and a ``Reconciler-Power``
trailer; the same plan again changes nothing; a power plan without any move is proposed too,
as a commit that changes no file. A real bare repository over file:// and the local
GitHub-API server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from reconciler.model.power import PowerBook
from tests.e2e.test_plan_cli import NOW, reconciler, write_scenario
from tests.e2e.test_propose_cli import PLACEMENT, remote_head
from tests.forges.servers import TOKEN, GitHubServer, serving
from tests.gitrepos import git, state_remote

POWER = {
    "driver": "command",
    "command": {"on": ["true"], "off": ["true"], "status": ["true"]},
    "idleWatts": 150,
}


def world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, maintenance: bool
) -> Iterator[tuple[Path, GitHubServer, list[str]]]:
    folder, snapshot = write_scenario("drain_maintenance", tmp_path / "scenario")
    name = json.loads(snapshot.read_text())["cluster"]
    (folder / "placement.yaml").write_text(PLACEMENT.format(name=name))
    cluster = yaml.safe_load((folder / "cluster.yaml").read_text())
    for host in cluster["spec"]["hosts"]:
        host["power"] = POWER
        host["maintenance"] = maintenance and host["name"] == "kvm-02"
    (folder / "cluster.yaml").write_text(yaml.safe_dump(cluster, sort_keys=False))
    policy = yaml.safe_load((folder / "policy.yaml").read_text())
    policy["spec"]["power"] = {"mode": "propose", "minSpareHosts": 0, "powerOffAfter": "30m"}
    (folder / "policy.yaml").write_text(yaml.safe_dump(policy, sort_keys=False))
    now = datetime.fromisoformat(NOW.replace("Z", "+00:00")).astimezone(UTC)
    book = PowerBook(cluster=name, low_since=now - timedelta(hours=2))  # as run left it
    (tmp_path / "state" / name).mkdir(parents=True)
    (tmp_path / "state" / name / "power.json").write_text(book.model_dump_json(by_alias=True))
    url, person = state_remote(tmp_path, folder)
    server = GitHubServer(owner="infra", repo="state")
    monkeypatch.setenv("RECONCILER_FORGE_TOKEN", TOKEN)
    with serving(server) as api:
        args = [
            "--repo", url, "--forge", "github", "--forge-url", api,
            "--forge-project", "infra/state", "--cache-dir", str(tmp_path / "cache"),
            "--snapshot", str(snapshot), "--state-dir", str(tmp_path / "state"), "--now", NOW,
        ]  # fmt: skip
        yield person, server, args


@pytest.fixture
def draining(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, GitHubServer, list[str]]]:
    yield from world(tmp_path, monkeypatch, maintenance=True)


@pytest.fixture
def idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, GitHubServer, list[str]]]:
    yield from world(tmp_path, monkeypatch, maintenance=False)


def test_the_power_plan_is_in_the_pull_request_beside_the_moves(
    draining: tuple[Path, GitHubServer, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    person, server, args = draining
    first = reconciler(capsys, "propose", *args)
    assert first.code == 2, first.err
    (pr,) = server.prs.values()
    body = pr["body"]
    assert "| VM | from → to |" in body  # the moves, as before
    assert "### Power" in body
    assert "| empty | 3.6 kWh |" in body  # 150 W idle for a day
    assert "below the band's 45% for 2h00m" in body
    assert "Demand of the hosts in service: 14% of their CPUs" in body
    assert "power: 1 step(s)" in pr["title"]
    head = remote_head(person, "reconciler/lab")
    git(person, "fetch", "-q")
    message = git(person, "log", "-1", "--format=%B", head)
    assert "Power saving (mode: propose), what it would do:\n- empty kvm-0" in message
    assert "Reconciler-Power: " in message
    again = reconciler(capsys, "propose", *args)
    assert again.code == 2, again.err
    assert "is current" in again.out
    assert remote_head(person, "reconciler/lab") == head


def test_a_power_plan_without_moves_is_proposed_as_a_commit_that_changes_no_file(
    idle: tuple[Path, GitHubServer, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    person, server, args = idle
    done = reconciler(capsys, "propose", *args)
    assert done.code == 2, done.err
    (pr,) = server.prs.values()
    assert "### Power" in pr["body"]
    assert "0 move(s), power: 1 step(s)" in pr["title"]
    head = remote_head(person, "reconciler/lab")
    git(person, "fetch", "-q")
    assert git(person, "diff", "--name-only", "origin/main", head).split() == []
