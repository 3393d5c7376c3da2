"""``reconciler impact`` as a user runs it: a real bare repository over file://, a person's
clone making the change under review, and the local forge servers (not the real services)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from reconciler.cli.common import EXIT_CHANGES, EXIT_ERROR, EXIT_OK
from reconciler.report.impact_report import comment_marker
from tests.e2e.test_plan_cli import reconciler
from tests.forges.servers import TOKEN, FakeForge, GiteaServer, GitHubServer, GitLabServer, serving
from tests.gitrepos import ROOT, git, state_remote
from tests.impact.world import snapshot, write

NOW = "2025-03-01T12:00:00Z"
HOT = {"batch-1": 6.0, "batch-2": 6.0}
"""kvm-01 busy: a spread of 51 on x86_64, over the example's threshold of 20."""


def change_policy(person: Path, branch: str, old: str, new: str) -> None:
    git(person, "checkout", "--quiet", "-B", branch, "main")
    policy = person / "cluster-state" / "policy.yaml"
    text = policy.read_text()
    assert old in text
    policy.write_text(text.replace(old, new))
    git(person, "commit", "--quiet", "-am", f"policy: {new.strip()}")
    git(person, "push", "--quiet", "--force", "origin", branch)


@pytest.fixture
def world(tmp_path: Path) -> tuple[str, Path, Path, list[str]]:
    url, person = state_remote(tmp_path)
    change_policy(person, "lower", "threshold: 20 ", "threshold: 60 ")
    snap = write(snapshot(cpu=HOT), tmp_path / "snapshot.json")
    common = ["--repo", url, "--cache-dir", str(tmp_path / "cache"), "--now", NOW]
    return url, person, snap, common


def test_impact_equals_two_plans_on_the_snapshot(
    world: tuple[str, Path, Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, person, snap, common = world
    run = reconciler(
        capsys, "impact", *common, "--base", "main", "--head", "lower",
        "--snapshot", snap, "--format", "json",
    )  # fmt: skip
    assert run.code == EXIT_CHANGES, run.err
    data = json.loads(run.out)
    jsonschema.validate(data, json.loads((ROOT / "schemas" / "impact.json").read_text()))
    # impact plans with the imbalance taken as lasting: holdRounds 2 -> one round before
    history = tmp_path / "history.json"
    history.write_text(json.dumps({"apiVersion": "placement/v1alpha1", "kind": "History",
                                   "imbalanceRounds": {"x86_64": 1}}))  # fmt: skip
    for side, branch in (("base", "main"), ("head", "lower")):
        git(person, "checkout", "--quiet", branch)
        plan = reconciler(
            capsys, "plan", person / "cluster-state", "--snapshot", snap, "--history", history,
            "--now", NOW, "--format", "json",
        )  # fmt: skip
        expected = json.loads(plan.out)
        got = dict(data[side])
        assert got.pop("desiredRevision") == git(person, "rev-parse", branch).strip()
        expected.pop("desiredRevision")
        assert got == expected
    assert data["base"]["moves"], "the example snapshot is over the base threshold"
    assert data["head"]["moves"] == []
    assert {m["vm"] for m in data["noLonger"]} == {m["vm"] for m in data["base"]["moves"]}
    assert data["baseBytes"] == sum(m["memory"] for m in data["base"]["moves"])
    assert data["headBytes"] == 0
    assert data["differs"] is True


def test_no_difference_exits_0_and_text_says_so(
    world: tuple[str, Path, Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    _, person, snap, common = world
    change_policy(person, "comment-only", "# When and how much", "# When, and how much")
    run = reconciler(
        capsys, "impact", *common, "--base", "main", "--head", "comment-only", "--snapshot", snap
    )
    assert run.code == EXIT_OK, run.out + run.err
    assert "No difference" in run.out


def test_an_invalid_head_fails_with_file_and_line(
    world: tuple[str, Path, Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    _, person, snap, common = world
    change_policy(person, "broken", "threshold: 20 ", "threshold: 600 ")
    run = reconciler(
        capsys, "impact", *common, "--base", "main", "--head", "broken", "--snapshot", snap
    )
    assert run.code == EXIT_ERROR
    assert "cluster-state/policy.yaml:13:" in run.err
    assert "cache" not in run.err  # repository paths, not the clone's
    run = reconciler(
        capsys, "impact", *common, "--base", "main", "--head", "nope", "--snapshot", snap
    )
    assert run.code == EXIT_ERROR
    assert "no revision 'nope'" in run.err


def test_without_a_recorded_snapshot_it_says_how_to_get_one(
    world: tuple[str, Path, Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, _, common = world
    run = reconciler(capsys, "impact", *common, "--base", "main", "--head", "lower")
    assert run.code == EXIT_ERROR
    assert "reconciler/observed/lab" in run.err


SERVERS: dict[str, Callable[[], FakeForge]] = {
    "github": lambda: GitHubServer(api_prefix="/api/v3"),
    "gitea": lambda: GiteaServer(api_prefix="/api/v1"),
    "gitlab": lambda: GitLabServer(api_prefix="/api/v4"),
}


@pytest.mark.parametrize("kind", sorted(SERVERS))
def test_the_comment_is_updated_not_duplicated(
    kind: str,
    world: tuple[str, Path, Path, list[str]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, person, snap, common = world
    server = SERVERS[kind]()
    pr: dict[str, Any] = {"state": "open", "title": "lower the threshold", "body": ""}
    server.prs[7] = {**pr, "number": 7, "iid": 7, "head": {"ref": "lower"}}
    server.add_comment(7, "a person's review")
    monkeypatch.setenv("RECONCILER_FORGE_TOKEN", TOKEN)
    with serving(server) as api:
        post = ["--post-comment", "--forge", kind, "--forge-url", api,
                "--forge-project", "infra/state", "--pr", "7", "--snapshot", str(snap)]  # fmt: skip
        first = reconciler(capsys, "impact", *common, "--base", "main", "--head", "lower", *post)
        assert first.code == EXIT_CHANGES, first.err
        assert "created" in first.err
        change_policy(person, "lower", "threshold: 20 ", "threshold: 40 ")
        second = reconciler(capsys, "impact", *common, "--base", "main", "--head", "lower", *post)
        assert "updated" in second.err, second.err
        third = reconciler(capsys, "impact", *common, "--base", "main", "--head", "lower", *post)
        assert "unchanged" in third.err
    comments = server.comments[7]
    ours = [c for c in comments if comment_marker("cluster-state") in c]
    assert len(comments) == 2
    assert len(ours) == 1
    assert "threshold 40" in ours[0]
    assert comments[0] == "a person's review"
    assert all(TOKEN not in r.path + json.dumps(r.body) for r in server.requests)
    assert TOKEN not in first.out + first.err + second.out + second.err


def test_since_replays_what_run_recorded_on_the_branch(
    world: tuple[str, Path, Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from datetime import datetime, timedelta

    from reconciler.adapters.git.observations import push_snapshot
    from reconciler.adapters.git.repo import GitStateRepo

    url, person, _, common = world
    change_policy(person, "patient", "holdRounds: 2 ", "holdRounds: 3 ")
    repo = GitStateRepo(url, cache_dir=tmp_path / "recorder")
    now = datetime.fromisoformat(NOW)
    start = now - timedelta(hours=3)
    for i in range(12):  # kvm-01 busy in runs of two rounds: holdRounds 2 acts, 3 never does
        repo.fetch()
        busy = HOT if i % 4 in (1, 2) else {}
        assert push_snapshot(repo, snapshot(start + i * timedelta(minutes=15), cpu=busy))
    run = reconciler(
        capsys, "impact", *common, "--base", "main", "--head", "patient", "--since", "7d",
        "--format", "json",
    )  # fmt: skip
    assert run.code == EXIT_CHANGES, run.err
    data = json.loads(run.out)
    bt = data["backtest"]
    assert bt["snapshots"] == 12
    assert bt["base"]["moves"] > 0
    assert bt["head"]["moves"] == 0
    assert len(bt["rows"]) >= 12
    assert "the snapshot on reconciler/observed/lab" in data["snapshotSource"]
    md = reconciler(
        capsys, "impact", *common, "--base", "main", "--head", "patient", "--since", "7d",
        "--format", "markdown",
    )  # fmt: skip
    assert "Over the last 7d: 12 recorded snapshots replayed" in md.out
    assert "| rounds that acted |" in md.out


def test_a_pull_request_head_outside_the_branches_is_fetched(
    world: tuple[str, Path, Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """A forge keeps a pull request's head under refs/pull/N/head, not refs/heads."""
    _, person, snap, common = world
    change_policy(person, "fork", "threshold: 20 ", "threshold: 45 ")
    sha = git(person, "rev-parse", "fork").strip()
    git(person, "push", "--quiet", "origin", f"{sha}:refs/pull/7/head")
    git(person, "push", "--quiet", "origin", "--delete", "fork")
    for head in ("refs/pull/7/head", sha):
        run = reconciler(
            capsys, "impact", *common, "--base", "main", "--head", head, "--snapshot", snap,
            "--format", "json",
        )  # fmt: skip
        assert run.code == EXIT_CHANGES, run.err
        assert json.loads(run.out)["headRevision"] == sha


def test_a_rollout_the_head_adds_shows_its_evacuation_plan(
    world: tuple[str, Path, Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, person, snap, common = world
    git(person, "checkout", "--quiet", "-B", "rollout", "main")
    (person / "cluster-state" / "rollouts" / "night.yaml").write_text(
        "apiVersion: placement/v1alpha1\nkind: Rollout\nmetadata: {name: night}\n"
        "spec:\n  hosts: [kvm-03, kvm-01]\n  eachHost:\n    reboot: {argv: [systemctl, reboot], "
        "timeout: 1m, safeToRepeat: false}\n"
    )
    git(person, "add", ".")
    git(person, "commit", "--quiet", "-m", "Rollout night")
    git(person, "push", "--quiet", "origin", "rollout")
    run = reconciler(
        capsys, "impact", *common, "--base", "main", "--head", "rollout",
        "--snapshot", snap, "--format", "json",
    )  # fmt: skip
    assert run.code == EXIT_CHANGES, run.err
    data = json.loads(run.out)
    jsonschema.validate(data, json.loads((ROOT / "schemas" / "impact.json").read_text()))
    (plan,) = data["rollouts"]
    assert plan["rollout"] == "night"
    assert [h["host"] for h in plan["hosts"]] == ["kvm-03", "kvm-01"]
    assert plan["blocked"] is True
    assert [b["vm"] for b in plan["hosts"][0]["blockedBy"]] == ["erp"]
    assert {m["source"] for m in plan["hosts"][1]["evacuation"]} == {"kvm-01"}
    md = reconciler(
        capsys, "impact", *common, "--base", "main", "--head", "rollout",
        "--snapshot", snap, "--format", "markdown",
    )  # fmt: skip
    assert "#### Rollout `night`: blocked" in md.out
    assert "   blocked: erp is pinned to kvm-03 by rule erp-pinned (immovable.action: block)" in (
        md.out.splitlines()
    )
    assert "rollout night (2 hosts, blocked)" in md.out


def test_impact_simulates_both_revisions_over_a_trace_into_the_comment(
    world: tuple[str, Path, Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--simulate replays base and head on the snapshot's cluster over a CSV trace in which
    kvm-01's batch VMs stay busy: the base (threshold 20) balances more than the head (60);
    both columns, the text charts and the SVG are in the Markdown a comment carries."""
    from tests.impact.world import VMS

    url, person, snap, common = world
    rows = ["time,vm,cpu"]
    for k in range(24):
        for name in VMS:
            rows.append(f"{1_740_787_200 + 300 * k},{name},{HOT.get(name, 0.5)}")
    trace = tmp_path / "load.csv"
    trace.write_text("\n".join(rows) + "\n")
    chart = tmp_path / "chart.svg"
    run = reconciler(
        capsys, "impact", *common, "--base", "main", "--head", "lower", "--snapshot", snap,
        "--simulate", "--trace", trace, "--chart", chart, "--format", "markdown",
    )  # fmt: skip
    assert run.code == EXIT_CHANGES, run.err
    assert "**Simulation**" in run.out
    assert "| | `base main` | `head lower` |" in run.out
    migrations = next(line for line in run.out.splitlines() if line.startswith("| migrations |"))
    base, head = (cell.strip() for cell in migrations.split("|")[2:4])
    assert int(base) > int(head)  # the lower threshold balances more
    assert "spread      " in run.out  # the text chart every forge shows
    assert chart.read_text().startswith("<svg")
    as_json = reconciler(
        capsys, "impact", *common, "--base", "main", "--head", "lower", "--snapshot", snap,
        "--simulate", "--trace", trace, "--format", "json",
    )  # fmt: skip
    data = json.loads(as_json.out)
    assert [p["policy"] for p in data["simulation"]["policies"]] == ["base main", "head lower"]


def test_impact_simulate_without_a_load_says_what_to_give(
    world: tuple[str, Path, Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, person, snap, common = world
    run = reconciler(
        capsys, "impact", *common, "--base", "main", "--head", "lower", "--snapshot", snap,
        "--simulate",
    )  # fmt: skip
    assert run.code == EXIT_ERROR
    assert "--trace PATH" in run.err


def test_simulate_replays_what_run_recorded_on_the_observed_branch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """run's recordings over the last three hours, pushed to reconciler/observed/lab of a bare
    repository, replayed on the cluster of the newest: every recorded VM is in the report."""
    from datetime import UTC, datetime, timedelta

    from reconciler.adapters.git.repo import GitStateRepo
    from reconciler.cli.observations import Recorder
    from reconciler.model.policy import BalancePolicy
    from tests.impact.world import VMS, snapshot

    url, _ = state_remote(tmp_path)
    repo = GitStateRepo(url, cache_dir=tmp_path / "recorder-cache")
    repo.fetch()
    recorder = Recorder(tmp_path / "state", "lab", repo)
    policy = BalancePolicy.model_validate(
        {"apiVersion": "placement/v1alpha1", "kind": "BalancePolicy", "metadata": {"name": "p"}}
    )
    start = datetime.now(UTC) - timedelta(hours=3)
    for k in range(6):
        t = start + timedelta(minutes=31 * k)
        recorder.after_round(snapshot(t, cpu={"batch-1": 1.0 + k}), policy, t)
    done = reconciler(
        capsys, "simulate", "cluster-state", "--repo", url, "--cache-dir", tmp_path / "cache",
        "--recorded", "--since", "4h", "--format", "json",
    )  # fmt: skip
    assert done.code == EXIT_OK, done.err
    report = json.loads(done.out)
    assert report["source"] == "recorded snapshots"
    assert report["vms"] == len(VMS)
    assert report["policies"][0]["rounds"] >= 8  # 4h at the example's 15m interval
    refused = reconciler(capsys, "simulate", "cluster-state", "--recorded", "--since", "4h")
    assert refused.code == EXIT_ERROR
    assert "--repo URL" in refused.err
