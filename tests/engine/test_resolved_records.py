"""A move whose end the reconciler never wrote (killed between the end of the migration and
its records) is resolved from its intent by the next holder, and that resolution is recorded
in git, also when placement.yaml already names the VM's new host (a drift revert): the
intent written before the move always ends as an audit record. Judged from the bare
repository's git log."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from reconciler.model.snapshot import MoveIntent, ReconcilerState
from tests.engine.test_audit_queue import act, audit_bodies, remote, started
from tests.fakes import GIB, FakeCluster, FakeHost, FakeVm


def killed_after_the_migration(actor: str | None) -> FakeCluster:
    """vm0 runs on h1, where its intent (h0 -> h1) says it was going: the migration ended,
    the reconciler was killed before it wrote the outcome and its audit commit."""
    fake = FakeCluster(
        "test",
        [FakeHost(f"h{i}") for i in range(3)],
        [FakeVm("vm0", "h1", memory=4 * GIB), FakeVm("vm1", "h0", memory=4 * GIB)],
    )
    began = fake.clock.now() - timedelta(minutes=20)
    fake.vms["vm0"].record = ReconcilerState(
        first_seen=began - timedelta(days=3),
        intent=MoveIntent(
            plan_id="p-killed", source="h0", target="h1", started_at=began, reason="Drift",
            actor=actor,
        ),
    )  # fmt: skip
    return fake


@pytest.mark.parametrize("actor", ["run@old-holder", None])
def test_a_drift_revert_killed_before_its_record_is_recorded_by_the_next_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, actor: str | None
) -> None:
    """Placement named h1 all along (vm0 had drifted to h0, the killed round moved it back):
    the next holder is in sync, and still writes the move's record."""
    fake = killed_after_the_migration(actor)
    url, bare = remote(tmp_path, fake, {"vm0": "h1", "vm1": "h0"}, monkeypatch)
    report = act(fake, started(url, tmp_path))
    assert report.results == [], "in sync: nothing moves"
    assert fake.vms["vm0"].record.intent is None
    assert (fake.vms["vm0"].record.last_moved_from, fake.vms["vm0"].host) == ("h0", "h1")
    [body] = audit_bodies(bare)
    [line] = [line for line in body.splitlines() if line.startswith("- vm0:")]
    assert line.startswith("- vm0: h0 -> h1 (RecordedLate): ")
    assert (actor or "moved") in line
    # recorded once: the next round owes nothing
    fake.clock.advance(timedelta(minutes=5))
    act(fake, started(url, tmp_path))
    assert len(audit_bodies(bare)) == 1


def test_a_move_killed_before_its_record_whose_placement_names_the_old_host_is_recorded_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The usual case (placement still names h0): recorded late, once, not moved back."""
    fake = killed_after_the_migration("run@old-holder")
    url, bare = remote(tmp_path, fake, {"vm0": "h0", "vm1": "h0"}, monkeypatch)
    report = act(fake, started(url, tmp_path))
    assert report.results == [], "not moved back"
    [body] = audit_bodies(bare)
    assert len([line for line in body.splitlines() if line.startswith("- vm0: h0 -> h1")]) == 1


class Killed(BaseException):
    """SIGKILL: nothing after it runs, no handler sees it."""


def test_a_drift_revert_killed_after_its_outcome_and_before_its_record_is_recorded_by_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vm0 drifted to h1; the round moves it back to h0 and writes the outcome on the domain
    (the intent is gone), then dies before its record reaches the state directory's queue.
    Another holder, on another machine (its own state directory, no queue), is in sync and
    still records the move, once; the mark on the domain goes with it."""
    fake = FakeCluster(
        "test",
        [FakeHost(f"h{i}") for i in range(3)],
        [FakeVm("vm0", "h1", memory=4 * GIB), FakeVm("vm1", "h0", memory=4 * GIB)],
    )
    url, bare = remote(tmp_path, fake, {"vm0": "h0", "vm1": "h0"}, monkeypatch)
    dying = started(url, tmp_path / "first")

    def killed(record: object) -> object:
        raise Killed

    monkeypatch.setattr(dying, "record", killed)
    with pytest.raises(Killed):
        act(fake, dying)
    assert (fake.vms["vm0"].host, fake.vms["vm0"].record.intent) == ("h0", None)
    assert fake.vms["vm0"].record.unrecorded
    assert audit_bodies(bare) == []
    fake.clock.advance(timedelta(minutes=5))
    report = act(fake, started(url, tmp_path / "second"))
    assert report.results == [], "in sync: nothing moves"
    [body] = audit_bodies(bare)
    [line] = [line for line in body.splitlines() if line.startswith("- vm0:")]
    assert line.startswith("- vm0: h1 -> h0 (RecordedLate): ")
    assert "Drift" in line
    assert not fake.vms["vm0"].record.unrecorded
    fake.clock.advance(timedelta(minutes=5))
    act(fake, started(url, tmp_path / "second"))
    assert len(audit_bodies(bare)) == 1


def test_a_recorded_move_leaves_no_mark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCluster(
        "test",
        [FakeHost(f"h{i}") for i in range(3)],
        [FakeVm("vm0", "h1", memory=4 * GIB), FakeVm("vm1", "h0", memory=4 * GIB)],
    )
    url, bare = remote(tmp_path, fake, {"vm0": "h0", "vm1": "h0"}, monkeypatch)
    report = act(fake, started(url, tmp_path))
    assert [(r.vm, r.target) for r in report.results] == [("vm0", "h0")]
    assert not fake.vms["vm0"].record.unrecorded
    assert fake.vms["vm0"].record.last_moved_to == "h0"
    assert len(audit_bodies(bare)) == 1
