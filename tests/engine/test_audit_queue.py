"""An audit record that cannot be written stays queued in the state directory, across
restarts, until a later round writes it; never dropped, never written twice. Real git (a
bare repository over file://) behind the fake cluster; judged from the bare repository's
git log and from the queue's file."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from reconciler.adapters.files.record_queue import FILE_NAME, FileRecordQueue
from reconciler.adapters.git.repo import GitStateRepo
from reconciler.config import load_desired
from reconciler.engine.audit import record_batch
from reconciler.engine.round import RoundOptions, RoundReport, run_round
from reconciler.engine.sources import RepoSource
from reconciler.model.acting import QueuedRecord, Record
from reconciler.model.status import MoveOutcome, MoveResult
from tests.config.clusters import write_folder
from tests.engine.test_acting import ports
from tests.fakes import GIB, FakeCluster, FakeHost, FakeVm
from tests.gitrepos import git, state_remote

HEAD = "apiVersion: placement/v1alpha1\n"


def folder(tmp_path: Path, placement: dict[str, str], threshold: int = 90) -> Path:
    hosts = "".join(f"    - {{name: h{i}, uri: 'test:///h{i}'}}\n" for i in range(3))
    vms = "".join(f"    {vm}: {host}\n" for vm, host in placement.items())
    return write_folder(
        tmp_path / "src",
        {
            "cluster.yaml": f"{HEAD}kind: Cluster\nmetadata: {{name: test}}\nspec:\n  hosts:\n"
            + hosts,
            "policy.yaml": f"{HEAD}kind: BalancePolicy\nmetadata: {{name: p}}\nspec:\n"
            f"  threshold: {threshold}\n  holdRounds: 1\n  cooldown: 1h\n  minUptime: 0s\n",
            "rules.yaml": f"{HEAD}kind: PlacementRules\nmetadata: {{name: r}}\n"
            "spec:\n  rules: []\n",
            "placement.yaml": f"{HEAD}kind: Placement\nmetadata: {{name: test}}\nspec:\n"
            "  vms:\n" + vms,
        },
        name="cluster-state",
    )


def remote(
    tmp_path: Path,
    fake: FakeCluster,
    placement: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    threshold: int = 90,
) -> tuple[str, Path]:
    """The bare repository with the cluster folder, committed a day before the fake's now."""
    before = (fake.clock.now() - timedelta(days=1)).isoformat()
    with monkeypatch.context() as env:
        env.setenv("GIT_COMMITTER_DATE", before)
        env.setenv("GIT_AUTHOR_DATE", before)
        url, _ = state_remote(tmp_path, folder(tmp_path, placement, threshold))
    return url, Path(url.removeprefix("file://"))


def started(url: str, tmp_path: Path) -> RepoSource:
    """A reconciler (re)started: a new source over the same cache and state directory."""
    source = RepoSource(
        GitStateRepo(url, cache_dir=tmp_path / "cache", timeout=10),
        branch="main",
        folder="cluster-state",
        read=load_desired,
        actor="run@test",
    )
    source.queue = FileRecordQueue("test", tmp_path / "state")
    return source


def act(fake: FakeCluster, source: RepoSource) -> RoundReport:
    loaded = source.load()
    return run_round(
        loaded.desired,
        ports(fake, source=source),
        RoundOptions(
            act=True, revision=loaded.revision, placement_changed_at=loaded.placement_changed_at
        ),
    )


def take_away(bare: Path) -> None:
    if bare.exists():
        bare.rename(bare.with_suffix(".off"))


def audit_bodies(bare: Path) -> list[str]:
    out = git(bare, "log", "main", "--format=%B%x00")
    return [b for b in out.split("\0") if "Reconciler-Plan:" in b]


def test_a_drift_revert_whose_record_failed_is_written_after_a_restart_by_a_round_in_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vm0 drifted to h1; the round moves it back to h0 while the remote is gone, so its
    record fails. Placement named h0 all along: the next round (after a restart) is in sync
    and owes nothing, yet the queued record is written."""
    placement = {"vm0": "h0", "vm1": "h0"}
    fake = FakeCluster(
        "test",
        [FakeHost(f"h{i}") for i in range(3)],
        [FakeVm("vm0", "h1", memory=4 * GIB), FakeVm("vm1", "h0", memory=4 * GIB)],
    )
    url, bare = remote(tmp_path, fake, placement, monkeypatch)
    source = started(url, tmp_path)
    fake.on_migrate = lambda m: take_away(bare)
    report = act(fake, source)
    assert [(r.vm, r.source, r.target) for r in report.results] == [("vm0", "h1", "h0")]
    assert report.record_error is not None
    assert "kept queued in" in report.record_error.message
    queued = json.loads((tmp_path / "state" / "test" / FILE_NAME).read_text())
    assert [q["record"]["results"][0]["vm"] for q in queued["records"]] == ["vm0"]
    bare.with_suffix(".off").rename(bare)
    assert audit_bodies(bare) == []

    fake.on_migrate = None
    fake.clock.advance(timedelta(minutes=5))
    second = act(fake, started(url, tmp_path))
    assert second.results == [], "in sync: nothing moves"
    assert second.record_error is None
    [body] = audit_bodies(bare)
    assert "- vm0: h1 -> h0 (" in body
    assert not (tmp_path / "state" / "test" / FILE_NAME).exists(), "the queue is empty"


def test_a_queued_record_already_on_the_branch_is_not_written_twice(tmp_path: Path) -> None:
    """The push of a queued record landed but the reconciler died before taking it out of the
    queue: the next write finds its Reconciler-Record trailer on the branch."""
    url, _ = state_remote(tmp_path)
    bare = Path(url.removeprefix("file://"))
    source = started(url, tmp_path)
    loaded = source.load()
    moved = MoveResult(
        vm="web-1", source="kvm-01", target="kvm-02", outcome=MoveOutcome.SUCCEEDED,
        reason="Balance", detail="spread",
    )  # fmt: skip
    first = Record(
        cluster="lab", plan_id="plan-1", revision=loaded.revision, results=[moved], placement={}
    )
    record_batch(
        source.repo, branch="main", cluster="lab", folder="cluster-state", results=[moved],
        own_moves={}, status_json="{}\n", plan_id="plan-1", source=loaded.revision or "",
        trigger="manual", actor="run@test", record_id="id-1",
    )  # fmt: skip
    assert source.queue is not None
    source.queue.save([QueuedRecord(id="id-1", record=first)])
    second = first.model_copy(
        update={"plan_id": "plan-2", "results": [moved.model_copy(update={"vm": "db-1"})]}
    )
    source.record(second)
    plans = git(bare, "log", "main", "--format=%(trailers:key=Reconciler-Plan,valueonly)")
    assert plans.split() == ["plan-2", "plan-1"]
    assert source.queue.load() == []


def test_a_later_round_does_not_record_late_what_the_queued_record_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Balance moves whose record failed: the next round finds them unrecorded (placement
    still names h0) and would record them late; the queued record of the round that made
    them is written first, with its own words, and each move is on the branch once."""
    placement = {f"vm{i}": "h0" for i in range(6)}
    fake = FakeCluster(
        "test",
        [FakeHost(f"h{i}") for i in range(3)],
        [FakeVm(f"vm{i}", "h0", cpu_used=2.0, memory=4 * GIB) for i in range(6)],
    )
    url, bare = remote(tmp_path, fake, placement, monkeypatch, threshold=10)
    fake.on_migrate = lambda m: take_away(bare)
    source = started(url, tmp_path)
    first = act(fake, source)
    moved = {r.vm: r.target for r in first.results if r.outcome is MoveOutcome.SUCCEEDED}
    assert moved
    assert first.record_error is not None
    bare.with_suffix(".off").rename(bare)

    fake.on_migrate = None
    fake.clock.advance(timedelta(hours=2))
    second = act(fake, started(url, tmp_path))
    assert second.record_error is None
    assert {r.vm for r in second.late} == set(moved), "the next round found them unrecorded"
    bodies = audit_bodies(bare)
    for vm, host in moved.items():
        lines = [line for b in bodies for line in b.splitlines() if line.startswith(f"- {vm}:")]
        assert len(lines) == 1, f"{vm} is on the branch {len(lines)} times: {lines}"
        assert lines[0].startswith(f"- {vm}: h0 -> {host} (Balance): ")
    placement_now = git(bare, "show", "main:cluster-state/placement.yaml")
    for vm, host in moved.items():
        assert f"{vm}: {host}" in placement_now


def test_a_queue_that_cannot_be_kept_does_not_keep_the_record_from_git(tmp_path: Path) -> None:
    """The state directory cannot hold the queue (a file where its folder should be): the
    round's record is written at once all the same."""
    url, _ = state_remote(tmp_path)
    bare = Path(url.removeprefix("file://"))
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "lab").write_text("not a folder\n")
    source = started(url, tmp_path)
    source.queue = FileRecordQueue("lab", tmp_path / "state")
    loaded = source.load()
    moved = MoveResult(
        vm="web-1", source="kvm-01", target="kvm-02", outcome=MoveOutcome.SUCCEEDED,
        reason="Balance", detail="spread",
    )  # fmt: skip
    recorded = source.record(
        Record(cluster="lab", plan_id="plan-1", revision=loaded.revision, results=[moved],
               placement={})
    )  # fmt: skip
    assert recorded.where is not None
    plans = git(bare, "log", "main", "--format=%(trailers:key=Reconciler-Plan,valueonly)")
    assert plans.split() == ["plan-1"]
