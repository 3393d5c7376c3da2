"""Reading saved snapshots: every bad file is a SnapshotError that says why."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.adapters.files.snapshot import load_snapshot, save_snapshot, snapshot_json
from reconciler.errors import SnapshotError
from reconciler.model.base import HostName, VmName, VmUuid
from reconciler.model.snapshot import HostState, Snapshot, VmRunState, VmState

SNAP = Snapshot(
    cluster="lab",
    taken_at=datetime(2025, 1, 1, tzinfo=UTC),
    hosts=[
        HostState(name=HostName("kvm-01"), uri="test:///x", reachable=True, cpus=4),
        HostState(name=HostName("kvm-02"), uri="test:///y", reachable=False, error="refused"),
    ],
    vms=[
        VmState(
            name=VmName("web-1"),
            uuid=VmUuid("u1"),
            host=HostName("kvm-01"),
            state=VmRunState.RUNNING,
            vcpus=1,
            memory_max=1 << 27,
            memory_current=1 << 27,
            cpu_used=0.25,
            labels={"app": "web"},
        )
    ],
)


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    save_snapshot(SNAP, path)
    assert load_snapshot(path) == SNAP
    assert json.loads(snapshot_json(SNAP))["hosts"][1]["reachable"] is False


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "is not JSON"),
        ("[1, 2]", "not a snapshot"),
        ('{"schemaVersion": 1, "cluster": "x"}', "older format .schemaVersion 1"),
        ('{"cluster": "x"}', "expected apiVersion placement/v1alpha1 and kind Snapshot"),
        ('{"apiVersion": "placement/v1alpha1", "kind": "Plan"}', "found .* kind 'Plan'"),
        (
            '{"apiVersion": "placement/v1alpha1", "kind": "Snapshot", "cluster": "x", "hosts": []}',
            "not a valid snapshot",
        ),
    ],
)
def test_bad_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(content)
    with pytest.raises(SnapshotError, match=message) as info:
        load_snapshot(path)
    assert info.value.hint


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="cannot read snapshot"):
        load_snapshot(tmp_path / "nope.json")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(b"\xff\xfe{")
    with pytest.raises(SnapshotError, match="UTF-8"):
        load_snapshot(path)
