"""The observed branch read back over a real bare remote (file://): one instance records and
pushes, a second one with its own clone reads the definitions of a host that died, from the
last recording in which that host was reachable."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from reconciler.adapters.files.recovery import FileRecoveryStore
from reconciler.adapters.git.observations import (
    DEFINITIONS,
    ObservedBranch,
    observed_branch,
    push_snapshot,
)
from reconciler.adapters.git.repo import GitStateRepo
from reconciler.cli.observations import Recorder
from reconciler.core.definitions import recorded_definition
from reconciler.errors import ReconcilerError, SnapshotError
from reconciler.model.recovery import RecoveryState, SavedVm
from reconciler.model.snapshot import Snapshot
from tests.engine.test_recovery_audit import SECRETS, secret_xml
from tests.gitrepos import git, state_remote
from tests.impact.test_observations import POLICY
from tests.impact.world import T0, snapshot


def plain_xml(name: str, uuid: str) -> str:
    return f"<domain type='kvm'><name>{name}</name><uuid>{uuid}</uuid></domain>"


def saved(snap: Snapshot, secret: set[str]) -> dict[str, SavedVm]:
    """What an instance's state directory keeps of ``snap``; the VMs in ``secret`` have a
    console password and more."""
    return {
        vm.uuid: SavedVm(
            name=vm.name,
            uuid=vm.uuid,
            host=vm.host,
            running=True,
            vcpus=vm.vcpus,
            memory=vm.memory_max,
            labels=dict(vm.labels),
            xml=(secret_xml if vm.name in secret else plain_xml)(vm.name, vm.uuid),
            seen_at=snap.taken_at,
        )
        for vm in snap.vms
    }


def dead(snap: Snapshot, host: str) -> Snapshot:
    """``snap`` as an instance that never saw ``host`` reachable records it."""
    hosts = [h.model_copy(update={"reachable": h.name != host}) for h in snap.hosts]
    vms = [v for v in snap.vms if v.host != host]
    return snap.model_copy(update={"hosts": hosts, "vms": vms})


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[str, Path, str]:
    """The first instance records the cluster (kvm-01 alive) and pushes it; a standby with an
    empty state directory then pushes a recording with kvm-01 dead. Returns the remote, a
    person's clone and the first recording's commit."""
    url, person = state_remote(tmp_path)
    first = GitStateRepo(url, cache_dir=tmp_path / "cache-a")
    first.fetch()
    state = tmp_path / "state-a"
    FileRecoveryStore("lab", state).save(
        RecoveryState(cluster="lab", vms=saved(snapshot(T0), {"batch-1"}))
    )
    Recorder(state, "lab", first).after_round(snapshot(T0), POLICY, T0)
    git(person, "fetch", "--quiet", "origin")
    commit = git(person, "rev-parse", f"origin/{observed_branch('lab')}").strip()
    standby = GitStateRepo(url, cache_dir=tmp_path / "cache-b")
    standby.fetch()
    later = T0 + timedelta(minutes=20)
    assert push_snapshot(standby, dead(snapshot(later), "kvm-01")) is not None
    return url, person, commit


def test_a_second_clone_reads_the_dead_hosts_vms_and_definitions_back(
    tmp_path: Path, recorded: tuple[str, Path, str]
) -> None:
    url, person, commit = recorded
    git(person, "fetch", "--quiet", "origin")
    assert git(person, "rev-list", "--count", f"origin/{observed_branch('lab')}").strip() == "2"
    reader = GitStateRepo(url, cache_dir=tmp_path / "cache-c")
    reader.fetch()
    sighting = ObservedBranch(reader, "lab").last_sighting("kvm-01")
    assert sighting is not None
    assert sighting.commit == commit  # not the newer recording, where kvm-01 is dead
    assert sighting.snapshot.taken_at == T0
    on_dead = {str(v.name): v for v in sighting.snapshot.vms if v.host == "kvm-01"}
    assert sorted(on_dead) == ["app-1", "batch-1", "batch-2", "cache-1", "web-1"]
    assert on_dead["web-1"].labels == {"app": "web"}
    fit = {
        name: recorded_definition(sighting.definitions[name], name=name, uuid=vm.uuid)
        for name, vm in on_dead.items()
    }
    assert {n for n, r in fit.items() if r.xml is None} == {"batch-1"}  # its secrets are gone
    assert "console passwords" in fit["batch-1"].why
    web = fit["web-1"].xml
    assert web is not None
    assert "<name>web-1</name>" in web
    assert [s for s in SECRETS if s in "".join(sighting.definitions.values())] == []


def test_a_host_never_recorded_reachable_and_a_missing_branch_read_as_none(
    tmp_path: Path, recorded: tuple[str, Path, str]
) -> None:
    url, _, _ = recorded
    reader = GitStateRepo(url, cache_dir=tmp_path / "cache-c")
    reader.fetch()
    assert ObservedBranch(reader, "lab").last_sighting("kvm-09") is None
    assert ObservedBranch(reader, "other").last_sighting("kvm-01") is None


def test_a_read_that_outlives_its_timeout_raises_the_projects_error(
    tmp_path: Path, recorded: tuple[str, Path, str]
) -> None:
    url, _, _ = recorded
    GitStateRepo(url, cache_dir=tmp_path / "cache-c").fetch()
    slow = GitStateRepo(url, cache_dir=tmp_path / "cache-c", timeout=0.000001)
    with pytest.raises(ReconcilerError, match="did not finish within"):
        ObservedBranch(slow, "lab").last_sighting("kvm-01")


def test_a_definitions_file_that_is_not_what_recording_writes_is_an_error(
    tmp_path: Path, recorded: tuple[str, Path, str]
) -> None:
    url, _, _ = recorded
    writer = GitStateRepo(url, cache_dir=tmp_path / "cache-w")
    writer.fetch()
    branch = observed_branch("lab")
    head = writer.head(branch)
    bad = writer.commit_files_on(
        parent=head,
        files={"snapshot.json": writer.show(head or "", "snapshot.json") or "", DEFINITIONS: "[1]"},
        message="by hand",
        trailers={},
    )
    writer.push(branch, bad, expected=head)
    reader = GitStateRepo(url, cache_dir=tmp_path / "cache-c")
    reader.fetch()
    # the newest recording has kvm-02 reachable: its definitions.json is the broken one
    with pytest.raises(SnapshotError, match="not an object of VM name -> XML"):
        ObservedBranch(reader, "lab").last_sighting("kvm-02")


def test_the_reader_follows_the_branch_when_it_moves(
    tmp_path: Path, recorded: tuple[str, Path, str]
) -> None:
    url, _, first = recorded
    reader = GitStateRepo(url, cache_dir=tmp_path / "cache-c")
    reader.fetch()
    branch = ObservedBranch(reader, "lab")
    seen = branch.last_sighting("kvm-01")
    assert seen is not None
    assert seen.commit == first
    writer = GitStateRepo(url, cache_dir=tmp_path / "cache-w")
    writer.fetch()
    back = T0 + timedelta(minutes=40)
    pushed = push_snapshot(writer, snapshot(back), {"web-1": "x"})
    reader.fetch()
    again = branch.last_sighting("kvm-01")
    assert again is not None
    assert again.commit == pushed
    assert again.definitions == {"web-1": "x"}
