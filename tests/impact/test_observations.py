"""Recorded observations: what is noise, retention, the store in the state directory and the
branch reconciler/observed/<cluster> in a real bare repository."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from reconciler.adapters.git.observations import (
    ObservationStore,
    observed_branch,
    observed_snapshots,
)
from reconciler.adapters.git.repo import GitStateRepo
from reconciler.cli.observations import Recorder
from reconciler.core import observations
from reconciler.model.policy import BalancePolicy
from reconciler.model.snapshot import ReconcilerState
from tests.gitrepos import git, state_remote
from tests.impact.world import T0, snapshot

POLICY = BalancePolicy.model_validate(
    {"apiVersion": "placement/v1alpha1", "kind": "BalancePolicy", "metadata": {"name": "p"}}
)


def test_noise_is_ignored_and_changes_are_not() -> None:
    base = snapshot(T0)
    assert observations.change(None, base) == "first observation"
    assert observations.change(base, snapshot(T0 + timedelta(minutes=15))) is None
    # 0.3 cores on a 16-core host: under 2 points
    assert observations.change(base, snapshot(T0, cpu={"web-1": 0.8})) is None
    assert observations.change(base, snapshot(T0, cpu={"web-1": 1.0})) == "VM web-1 load changed"
    assert observations.change(base, snapshot(T0, hosts={"web-1": "kvm-02"})) is not None
    moved = snapshot(T0, records={"erp": ReconcilerState(moves=1, last_moved_at=T0)})
    assert observations.change(base, moved) == "VM erp changed"
    host_down = base.model_copy(
        update={"hosts": [base.hosts[0].model_copy(update={"reachable": False}), *base.hosts[1:]]}
    )
    assert observations.change(base, host_down) == "host kvm-01 changed"


@given(st.dictionaries(st.sampled_from(["web-1", "db-1", "erp"]), st.floats(0, 16)))
def test_a_snapshot_never_differs_from_itself(cpu: dict[str, float]) -> None:
    snap = snapshot(T0, cpu=cpu)
    assert observations.change(snap, snap.model_copy(update={"taken_at": T0})) is None
    assert observations.change(snapshot(T0), snap) is None or any(
        abs(v - 0.5) * 100 / 16 > observations.NOISE_POINTS for v in cpu.values()
    )


@given(st.lists(st.integers(0, 20 * 24), min_size=1, max_size=60, unique=True), st.integers(1, 30))
def test_retention_keeps_the_newest_and_nothing_too_old(hours: list[int], keep: int) -> None:
    taken = [T0 + timedelta(hours=h) for h in hours]
    now = max(taken)
    gone = set(observations.expired(taken, now, keep=keep, age=timedelta(days=8)))
    kept = [t for t in taken if t not in gone]
    assert max(taken) in kept
    assert len(kept) <= keep
    assert all(now - t <= timedelta(days=8) for t in kept)


def test_the_store_records_only_changes(tmp_path: Path) -> None:
    store = ObservationStore(tmp_path, "lab")
    assert store.record(snapshot(T0), T0)
    assert not store.record(snapshot(T0 + timedelta(minutes=15)), T0)
    assert store.record(snapshot(T0 + timedelta(minutes=30), cpu={"web-1": 4}), T0)
    kept = list(store.snapshots())
    assert [s.taken_at for s in kept] == [T0, T0 + timedelta(minutes=30)]
    assert {str(v.name): v.cpu_used for v in kept[1].vms}["web-1"] == 4
    assert all(len(p.read_text().splitlines()) == 1 for p in store.folder.iterdir())
    # nine days later the old ones go, the newest stays
    later = T0 + timedelta(days=9)
    assert store.record(snapshot(later, cpu={"web-1": 8}), later)
    assert [s.taken_at for s in store.snapshots()] == [later]


def test_run_pushes_the_latest_at_most_every_record_every(tmp_path: Path) -> None:
    url, person = state_remote(tmp_path)
    repo = GitStateRepo(url, cache_dir=tmp_path / "cache")
    repo.fetch()
    recorder = Recorder(tmp_path / "state", "lab", repo)
    recorder.after_round(snapshot(T0), POLICY, T0)  # first: a root commit on the new branch
    t1 = T0 + timedelta(minutes=5)
    recorder.after_round(snapshot(t1, cpu={"web-1": 4}), POLICY, t1)  # recorded, not pushed
    t2 = T0 + timedelta(minutes=16)
    recorder.after_round(snapshot(t2, cpu={"web-1": 4.1}), POLICY, t2)  # noise; the t1 one due
    branch = observed_branch("lab")
    git(person, "fetch", "--quiet", "origin")
    commits = git(person, "rev-list", "--parents", f"origin/{branch}").splitlines()
    assert len(commits) == 2  # one push at T0, one 16 minutes later
    assert len(commits[-1].split()) == 1  # the first is a root commit: no common history
    assert git(person, "ls-tree", "--name-only", f"origin/{branch}").split() == ["snapshot.json"]
    assert len(list(ObservationStore(tmp_path / "state", "lab").snapshots())) == 2
    repo.fetch()
    recorded = observed_snapshots(repo, "lab", since=T0)
    assert [s.taken_at for _, s in recorded] == [T0, t1]
    assert {str(v.name): v.cpu_used for v in recorded[-1][1].vms}["web-1"] == 4
    # the main branch is untouched
    assert git(person, "log", "--format=%s", "origin/main").split("\n")[0] == "The cluster"
