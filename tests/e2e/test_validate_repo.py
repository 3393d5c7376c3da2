"""``validate`` on a state repository (``--repo``) and posting its result as a commit status on
the local GitHub-API server (an API-faithful local server, not the real GitHub)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.e2e.test_plan_cli import reconciler
from tests.forges.servers import TOKEN, GitHubServer, serving
from tests.gitrepos import git, state_remote


def test_validate_reads_the_branch_head_and_posts_a_commit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, person = state_remote(tmp_path)
    repo = ["--repo", url, "--cache-dir", str(tmp_path / "cache")]
    server = GitHubServer(owner="infra", repo="state")
    monkeypatch.setenv("RECONCILER_FORGE_TOKEN", TOKEN)
    with serving(server) as api:
        good = git(person, "rev-parse", "HEAD").strip()
        status = ["--forge-url", api, "--forge-project", "infra/state"]
        run = reconciler(capsys, "validate", *repo, "--post-status", good, *status)
        assert run.code == 0, run.out + run.err
        # A person breaks the policy on a branch: validate that branch, post a failure on it.
        git(person, "checkout", "-q", "-b", "broken")
        policy = person / "cluster-state" / "policy.yaml"
        policy.write_text(policy.read_text().replace("threshold: 20", "threshold: 120"))
        git(person, "commit", "-qam", "Loosen the threshold")
        git(person, "push", "-q", "origin", "broken")
        bad = git(person, "rev-parse", "HEAD").strip()
        run = reconciler(
            capsys, "validate", *repo, "--branch", "broken", "--post-status", bad, *status
        )
        assert run.code == 1
        assert "threshold" in run.out
    assert [s["state"] for s in server.statuses[good]] == ["success"]
    (failure,) = server.statuses[bad]
    assert failure["state"] == "failure"
    assert failure["context"] == "reconciler/validate"
    assert failure["description"].startswith("1 error(s)")
    assert TOKEN not in run.out + run.err


def test_posting_a_status_without_a_token_is_a_warning_and_a_valid_state_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RECONCILER_FORGE_TOKEN", raising=False)
    root = Path(__file__).resolve().parents[2]
    run = reconciler(
        capsys, "validate", root / "cluster-state", "--post-status", "0" * 40,
        "--forge-project", "infra/state",
    )  # fmt: skip
    assert run.code == 0, "a fork's pull request has no token: the state is still valid"
    assert "warning: cannot post the commit status" in run.err
    assert "RECONCILER_FORGE_TOKEN" in run.err
    assert "valid" in run.out


def test_an_unreachable_forge_is_a_warning_and_an_invalid_state_still_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECONCILER_FORGE_TOKEN", TOKEN)
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    root = Path(__file__).resolve().parents[2]
    status = ["--forge-project", "infra/state", "--forge-url", f"http://127.0.0.1:{port}"]
    run = reconciler(capsys, "validate", root / "cluster-state", "--post-status", "0" * 40, *status)
    assert run.code == 0, run.err
    assert "warning: cannot post the commit status" in run.err
    assert TOKEN not in run.out + run.err
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in (root / "cluster-state").glob("*.yaml"):
        (broken / f.name).write_text(f.read_text().replace("threshold: 20", "threshold: 120"))
    run = reconciler(capsys, "validate", broken, "--post-status", "0" * 40, *status)
    assert run.code == 1
    assert "warning: cannot post the commit status" in run.err


def test_a_refused_status_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECONCILER_FORGE_TOKEN", "a fork's read-only token")
    root = Path(__file__).resolve().parents[2]
    with serving(GitHubServer(owner="infra", repo="state")) as api:
        status = ["--forge-url", api, "--forge-project", "infra/state"]
        run = reconciler(
            capsys, "validate", root / "cluster-state", "--post-status", "0" * 40, *status
        )
    assert run.code == 0, run.err
    assert "warning: cannot post the commit status" in run.err
