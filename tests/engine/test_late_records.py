"""A move whose record was lost (the reconciler killed before it, or the write failed) is
recorded by a later round, not reverted as drift; a person's later placement still wins."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from reconciler.adapters.git.repo import GitStateRepo
from reconciler.config import load_desired
from reconciler.engine.ports import DesiredSource
from reconciler.engine.round import RoundOptions, RoundReport, run_round
from reconciler.engine.sources import RepoSource
from reconciler.errors import GitError
from reconciler.model.acting import Record, Recorded
from reconciler.model.snapshot import ReconcilerState
from reconciler.model.status import MoveOutcome
from tests.config.clusters import write_folder
from tests.core.builders import desired
from tests.engine.test_acting import HOSTS, ports
from tests.fakes import GIB, FakeCluster, FakeHost, FakeVm, MemorySource
from tests.gitrepos import git, state_remote


def moved_earlier(changed_days_ago: float) -> tuple[FakeCluster, MemorySource]:
    """vm0 was moved h0 -> h1 by the reconciler two days ago; placement still says h0 and was
    last changed ``changed_days_ago``."""
    fake = FakeCluster(
        "test",
        [FakeHost(f"h{i}") for i in range(3)],
        [FakeVm(f"vm{i}", "h0" if i else "h1", cpu_used=2.0, memory=4 * GIB) for i in range(2)],
    )
    at = fake.clock.now() - timedelta(days=2)
    fake.vms["vm0"].record = ReconcilerState(
        first_seen=at - timedelta(days=5),
        last_moved_at=at,
        last_moved_from="h0",
        last_moved_to="h1",
        moves=1,
    )
    placement = {"vm0": "h0", "vm1": "h0"}
    source = MemorySource(
        desired(HOSTS, threshold=50, placement=placement, cooldown="1h"), placement, fake.clock
    )
    source.changed_at = fake.clock.now() - timedelta(days=changed_days_ago)
    return fake, source


def act(fake: FakeCluster, source: DesiredSource) -> RoundReport:
    loaded = source.load()
    return run_round(
        loaded.desired,
        ports(fake, source=source),
        RoundOptions(act=True, placement_changed_at=loaded.placement_changed_at),
    )


def test_an_unrecorded_move_is_recorded_late_not_moved_back() -> None:
    fake, source = moved_earlier(changed_days_ago=3)
    act(fake, source)
    assert fake.vms["vm0"].host == "h1", "the reconciler's own move was reverted"
    assert fake.migrations == []
    assert source.placement["vm0"] == "h1"
    [record] = source.records
    [late] = [r for r in record.results if r.vm == "vm0"]
    assert (late.source, late.target, late.outcome) == ("h0", "h1", MoveOutcome.SUCCEEDED)
    assert late.reason == "RecordedLate"
    assert "vm0" not in record.adopted, "a move, not adopted drift"
    # recorded once: the next round finds nothing owed
    act(fake, source)
    assert len(source.records) == 1


def test_a_placement_changed_after_the_move_is_a_persons_word() -> None:
    fake, source = moved_earlier(changed_days_ago=1)
    act(fake, source)
    assert fake.vms["vm0"].host == "h0", "placement changed after the move: moved back"
    assert all(r.reason != "RecordedLate" for rec in source.records for r in rec.results)


def test_an_unknown_change_time_keeps_the_drift_revert() -> None:
    fake, source = moved_earlier(changed_days_ago=3)
    source.changed_at = None
    act(fake, source)
    assert fake.vms["vm0"].host == "h0"


def test_a_record_that_failed_is_written_by_the_next_round() -> None:
    fake = FakeCluster(
        "test",
        [FakeHost(f"h{i}") for i in range(3)],
        [FakeVm(f"vm{i}", "h0", cpu_used=2.0, memory=4 * GIB) for i in range(6)],
    )
    placement = {f"vm{i}": "h0" for i in range(6)}
    source = MemorySource(
        desired(HOSTS, threshold=10, placement=placement, cooldown="1h"), placement, fake.clock
    )
    source.changed_at = fake.clock.now() - timedelta(days=1)
    working = source.record
    failing = [True]

    def record(record: Record) -> Recorded:
        if failing[0]:
            raise GitError("the remote does not answer")
        return working(record)

    source.record = record  # type: ignore[method-assign]
    act(fake, source)
    moved = {vm for vm, v in fake.vms.items() if v.host != "h0"}
    assert moved, "the first round moved VMs"
    assert source.placement == placement, "its record failed"
    where = {vm: fake.vms[vm].host for vm in moved}
    failing[0] = False
    fake.clock.advance(timedelta(hours=2))  # past the cooldown: a revert could start now
    act(fake, source)
    assert {vm: fake.vms[vm].host for vm in moved} == where, "moved back"
    assert {vm: source.placement[vm] for vm in moved} == where
    [record_] = source.records
    assert {r.vm for r in record_.results if r.reason == "RecordedLate"} == moved


def test_on_real_git_a_failed_audit_commit_is_made_by_the_next_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The remote is gone while the first round moves: its audit commit fails. The next round
    commits the moves it made (as RecordedLate lines) and moves nothing back; judged from the
    remote's history and files, and from where the VMs run."""
    fake = FakeCluster(
        "test",
        [FakeHost(f"h{i}") for i in range(3)],
        [FakeVm(f"vm{i}", "h0", cpu_used=2.0, memory=4 * GIB) for i in range(6)],
    )
    head = "apiVersion: placement/v1alpha1\n"
    hosts = "".join(f"    - {{name: h{i}, uri: 'test:///h{i}'}}\n" for i in range(3))
    vms = "".join(f"    vm{i}: h0\n" for i in range(6))
    folder = write_folder(
        tmp_path / "src",
        {
            "cluster.yaml": f"{head}kind: Cluster\nmetadata: {{name: test}}\nspec:\n  hosts:\n"
            + hosts,
            "policy.yaml": f"{head}kind: BalancePolicy\nmetadata: {{name: p}}\nspec:\n"
            "  threshold: 10\n  holdRounds: 1\n  cooldown: 1h\n  minUptime: 0s\n",
            "rules.yaml": f"{head}kind: PlacementRules\nmetadata: {{name: r}}\n"
            "spec:\n  rules: []\n",
            "placement.yaml": f"{head}kind: Placement\nmetadata: {{name: test}}\nspec:\n"
            "  vms:\n" + vms,
        },
        name="cluster-state",
    )
    before = (fake.clock.now() - timedelta(days=1)).isoformat()
    with monkeypatch.context() as env:  # the person's commit, made before the moves
        env.setenv("GIT_COMMITTER_DATE", before)
        env.setenv("GIT_AUTHOR_DATE", before)
        url, _ = state_remote(tmp_path, folder)
    bare = Path(url.removeprefix("file://"))
    source = RepoSource(
        GitStateRepo(url, cache_dir=tmp_path / "cache", timeout=10),
        branch="main",
        folder="cluster-state",
        read=load_desired,
        actor="test",
    )

    def remote_gone(m: object) -> None:
        if bare.exists():
            bare.rename(bare.with_suffix(".off"))

    fake.on_migrate = remote_gone
    report = act(fake, source)
    assert report.record_error is not None
    bare.with_suffix(".off").rename(bare)
    where = {vm: v.host for vm, v in fake.vms.items() if v.host != "h0"}
    assert where, "the first round moved VMs"
    assert len(git(bare, "rev-list", "main").split()) == 1, "no audit commit yet"

    fake.on_migrate = None
    fake.clock.advance(timedelta(hours=2))  # past the cooldown: a revert could start now
    act(fake, source)
    assert {vm: fake.vms[vm].host for vm in where} == where, "a move was reverted"
    message = git(bare, "log", "-1", "--format=%B", "main")
    for vm, host in where.items():
        assert f"- {vm}: h0 -> {host} (RecordedLate)" in message
    placement = git(bare, "show", "main:cluster-state/placement.yaml")
    for vm, host in where.items():
        assert f"{vm}: {host}" in placement
