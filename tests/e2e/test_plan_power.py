"""``plan`` plans as ``run`` does with hosts power saving keeps out: a host its book says is
asleep gets no move, and the plan says which hosts are asleep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from reconciler.adapters.files.power import FilePowerStore
from reconciler.model.power import PowerBook, StandbyHost
from tests.e2e.test_plan_cli import reconciler, write_scenario

POWER = {"driver": "command", "command": {"on": ["true"], "off": ["true"], "status": ["true"]}}


def test_a_host_asleep_gets_no_move_and_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, snapshot = write_scenario("batch_deferral", tmp_path)
    cluster = folder / "cluster.yaml"
    doc = yaml.safe_load(cluster.read_text())
    for host in doc["spec"]["hosts"]:
        host["power"] = POWER
    cluster.write_text(yaml.safe_dump(doc, sort_keys=False))
    state = tmp_path / "state"
    args: list[str | Path] = [
        "plan",
        folder,
        "--snapshot",
        snapshot,
        "--state-dir",
        state,
        "--format",
        "json",
    ]
    first = reconciler(capsys, *args)
    targets = [m["target"] for m in json.loads(first.out)["moves"]]
    assert targets, "the scenario moves VMs"
    asleep = targets[0]
    name = doc["metadata"]["name"]
    at = json.loads(snapshot.read_text())["takenAt"]
    book = PowerBook(
        cluster=name, standby={asleep: StandbyHost.model_validate({"since": at, "why": "idle"})}
    )
    FilePowerStore(name, state).save(book)
    again = reconciler(capsys, *args)
    assert asleep not in [m["target"] for m in json.loads(again.out)["moves"]]
    assert f"standby (power saving): {asleep}" in again.err
