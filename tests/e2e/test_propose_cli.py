"""``propose`` and ``history`` as a user runs them: a real bare repository over file://, a
second clone acting as the person, and the local GitHub-API server (not the real GitHub)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.engine.propose import BLOCKED_MARKER
from reconciler.report.plan_markdown import plan_marker
from tests.e2e.test_plan_cli import NOW, reconciler, write_scenario
from tests.forges.servers import TOKEN, GitHubServer, serving
from tests.gitrepos import git, state_remote

PLACEMENT = """\
# yaml-language-server: $schema=../schemas/placement.json
# Owned by the infra team; proposals edit this file.
apiVersion: placement/v1alpha1
kind: Placement
metadata:
  name: {name}
spec:
  vms: {{}}   # filled by proposals
"""
BRANCH = "reconciler/{name}"


@pytest.fixture
def world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, Path, Path, GitHubServer, list[str]]]:
    folder, snapshot = write_scenario("drain_maintenance", tmp_path / "scenario")
    name = json.loads(snapshot.read_text())["cluster"]
    (folder / "placement.yaml").write_text(PLACEMENT.format(name=name))
    url, person = state_remote(tmp_path, folder)
    server = GitHubServer(owner="infra", repo="state")
    monkeypatch.setenv("RECONCILER_FORGE_TOKEN", TOKEN)
    with serving(server) as api:
        args = [
            "--repo", url, "--forge", "github", "--forge-url", api,
            "--forge-project", "infra/state", "--cache-dir", str(tmp_path / "cache"),
            "--snapshot", str(snapshot), "--state-dir", str(tmp_path / "state"), "--now", NOW,
        ]  # fmt: skip
        yield name, person, snapshot, server, args


def remote_head(person: Path, branch: str) -> str:
    out = git(person, "ls-remote", "origin", branch).split()
    return out[0] if out else ""


def test_propose_opens_one_pull_request_and_a_second_run_changes_nothing(
    world: tuple[str, Path, Path, GitHubServer, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    name, person, _, server, args = world
    branch = BRANCH.format(name=name)
    first = reconciler(capsys, "propose", *args)
    assert first.code == 2, first.err
    assert "opened" in first.out
    (pr,) = server.prs.values()
    assert pr["head"]["ref"] == branch
    assert pr["base"]["ref"] == "main"
    head = remote_head(person, branch)
    git(person, "fetch", "-q")
    main = git(person, "rev-parse", "origin/main").strip()
    # one commit on main, changing placement.yaml only, minimally
    assert git(person, "rev-list", f"{main}..{head}").split() == [head]
    assert git(person, "diff", "--name-only", main, head).split() == [
        "cluster-state/placement.yaml"
    ]
    after = git(person, "show", f"{head}:cluster-state/placement.yaml")
    assert after.startswith("# yaml-language-server: $schema=../schemas/placement.json\n")
    assert "# Owned by the infra team" in after
    message = git(person, "log", "-1", "--format=%B", head)
    assert "- db-1: " in message
    assert f"Reconciler-Source: {main}" in message
    plan_id = message.split("Reconciler-Plan: ")[1].split()[0]
    assert plan_marker(plan_id) in pr["body"]
    assert "| VM | from → to |" in pr["body"]
    assert "```json" in pr["body"]
    assert len(pr["body"]) <= 65_536
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in server.requests)

    requests = len(server.requests)
    second = reconciler(capsys, "propose", *args)
    assert second.code == 2, second.err
    assert "is current" in second.out
    assert remote_head(person, branch) == head
    assert len(server.prs) == 1
    assert all(r.method == "GET" for r in server.requests[requests:])
    assert TOKEN not in first.out + first.err + second.out + second.err


def test_a_persons_commit_is_never_overwritten(
    world: tuple[str, Path, Path, GitHubServer, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    name, person, _, server, args = world
    branch = BRANCH.format(name=name)
    assert reconciler(capsys, "propose", *args).code == 2
    git(person, "fetch", "-q")
    git(person, "checkout", "-q", "-b", "mine", f"origin/{branch}")
    (person / "cluster-state" / "placement.yaml").write_text(
        (person / "cluster-state" / "placement.yaml").read_text() + "# a person's note\n"
    )
    git(person, "commit", "-qam", "Keep db-1 where it is for now")
    git(person, "push", "-q", "origin", f"mine:{branch}")
    theirs = git(person, "rev-parse", "HEAD").strip()
    for _ in range(2):
        blocked = reconciler(capsys, "propose", *args)
        assert blocked.code == 3, blocked.err
        assert "Ada Person" in blocked.out
    assert remote_head(person, branch) == theirs
    (comments,) = server.comments.values()
    assert len(comments) == 1
    (pr,) = server.prs.values()
    assert BLOCKED_MARKER in pr["body"]
    assert pr["state"] == "open"


def test_a_persons_amend_keeping_the_trailer_is_never_overwritten(
    world: tuple[str, Path, Path, GitHubServer, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    name, person, _, _, args = world
    branch = BRANCH.format(name=name)
    assert reconciler(capsys, "propose", *args).code == 2
    git(person, "fetch", "-q")
    git(person, "checkout", "-q", "-b", "mine", f"origin/{branch}")
    (person / "cluster-state" / "placement.yaml").write_text(
        (person / "cluster-state" / "placement.yaml").read_text() + "# a person's note\n"
    )
    git(person, "commit", "-qa", "--amend", "--no-edit")  # keeps Reconciler-Plan
    assert "Reconciler-Plan:" in git(person, "log", "-1", "--format=%B")
    git(person, "push", "-qf", "origin", f"mine:{branch}")
    theirs = git(person, "rev-parse", "HEAD").strip()
    blocked = reconciler(capsys, "propose", *args)
    assert blocked.code == 3, blocked.err
    assert "Ada Person" in blocked.out
    assert remote_head(person, branch) == theirs


def test_merged_proposal_closes_nothing_left_and_history_shows_it(
    world: tuple[str, Path, Path, GitHubServer, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    name, person, _, server, args = world
    branch = BRANCH.format(name=name)
    assert reconciler(capsys, "propose", *args).code == 2
    git(person, "fetch", "-q")
    git(person, "checkout", "-q", "main")
    git(person, "merge", "-q", "--no-ff", "-m", "Merge the proposal", f"origin/{branch}")
    git(person, "push", "-q", "origin", "main")
    # the Placement now matches the plan: nothing to propose; the open one is closed
    done = reconciler(capsys, "propose", *args)
    assert done.code == 0, done.err
    (pr,) = server.prs.values()
    assert pr["state"] == "closed"
    assert "nothing to change" in server.comments[pr["number"]][0]
    assert remote_head(person, branch) == ""
    cache = args[args.index("--cache-dir") + 1]
    shown = reconciler(
        capsys, "history", "--repo", args[1], "--cache-dir", cache, "--format", "json"
    )
    assert shown.code == 0, shown.err
    data = json.loads(shown.out)
    assert data["kind"] == "MoveHistory"
    (entry,) = data["entries"]
    assert entry["kind"] == "proposed"
    assert {m["vm"] for m in entry["moves"]} == {"db-1", "web-1"}
    assert entry["planId"]
    text = reconciler(capsys, "history", "--repo", args[1], "--cache-dir", cache, "--vm", "db-1")
    assert "db-1:" in text.out
    assert "web-1:" not in text.out


def test_propose_without_a_token_is_a_clear_error(
    world: tuple[str, Path, Path, GitHubServer, list[str]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    *_, args = world
    monkeypatch.delenv("RECONCILER_FORGE_TOKEN")
    run = reconciler(capsys, "propose", *args)
    assert run.code == 1
    assert "RECONCILER_FORGE_TOKEN" in run.err
