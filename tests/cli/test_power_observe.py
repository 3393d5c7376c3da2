"""``observe`` shows the hosts power saving keeps out (standby, booting, being emptied) from
the power book ``run`` keeps in the state directory, in the table and in the JSON snapshot
(``powerSaving``; an asleep host's ``error`` says it is asleep on purpose), and a host asleep
on purpose is no failure (exit 0). Real libvirt test-driver hosts: one answers, one does not."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.adapters.files.power import FilePowerStore
from reconciler.model.power import PowerBook, StandbyHost
from reconciler.model.snapshot import Snapshot
from tests.e2e.test_plan_cli import reconciler

SINCE = datetime(2025, 3, 1, 2, 10, tzinfo=UTC)
POWER = "power: {driver: command, command: {on: ['true'], off: ['true'], status: ['true']}}"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    pytest.importorskip("libvirt")
    where = tmp_path / "cluster-state"
    where.mkdir()
    missing = tmp_path / "no-such-node.xml"
    (where / "cluster.yaml").write_text(
        "apiVersion: placement/v1alpha1\nkind: Cluster\nmetadata: {name: night}\n"
        "spec:\n  hosts:\n"
        f"    - {{name: node-1, uri: 'test:///default', {POWER}}}\n"
        f"    - {{name: node-2, uri: 'test://{missing}', {POWER}}}\n"
    )
    return where


def booked(state: Path, **book: object) -> None:
    FilePowerStore("night", state).save(PowerBook.model_validate({"cluster": "night", **book}))


def test_a_host_asleep_on_purpose_is_shown_and_is_no_failure(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    booked(
        state,
        standby={
            "node-2": StandbyHost(since=SINCE, why="empty: powered off to save its idle power")
        },
        emptying={"node-1": SINCE},
    )
    text = reconciler(capsys, "observe", folder, "--state-dir", state)
    assert text.code == 0, text.err
    assert "power saving (docs/power.md):" in text.out
    assert (
        "node-2: standby (power saving) since 2025-03-01 02:10: empty: powered off to save "
        "its idle power" in text.out
    )
    assert "node-1: being emptied (power saving) since 2025-03-01 02:10" in text.out
    assert "warning: host node-2 unreachable" not in text.err
    as_json = reconciler(capsys, "observe", folder, "--state-dir", state, "--format", "json")
    assert as_json.code == 0, as_json.err
    snap = Snapshot.model_validate(json.loads(as_json.out))  # still a snapshot plan reads
    assert set(snap.power_saving) == {"node-1", "node-2"}
    (asleep,) = (h for h in snap.hosts if h.name == "node-2")
    assert not asleep.reachable
    assert asleep.error is not None
    assert asleep.error.startswith("standby (power saving)")


def test_a_host_down_that_power_saving_did_not_put_to_sleep_still_fails(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    done = reconciler(capsys, "observe", folder, "--state-dir", state)
    assert done.code == 1
    assert "warning: host node-2 unreachable" in done.err
    assert "power saving" not in done.out
    booked(state, booting={"node-1": SINCE})  # the book names another host
    again = reconciler(capsys, "observe", folder, "--state-dir", state, "--format", "json")
    assert again.code == 1
    assert json.loads(again.out)["powerSaving"] == {
        "node-1": "booting (power saving) since 2025-03-01 02:10"
    }
