"""``reconciler plan`` on a saved snapshot whose CPU figures are garbage: a finite huge value,
a million cores for a small VM. The plan is made (no traceback), names those figures as out
of range, and the drain of the host in maintenance is planned all the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_plan_cli import reconciler, write_scenario

NOW = "2025-03-01T12:00:00Z"


def garbage(tmp_path: Path, window: bool) -> tuple[Path, Path]:
    folder, snap = write_scenario("drain_maintenance", tmp_path)
    policy = yaml.safe_load((folder / "policy.yaml").read_text())
    policy["spec"] = {"threshold": 10, "score": {"cpu": 1, "memory": 0}}  # balance would act
    (folder / "policy.yaml").write_text(yaml.safe_dump(policy))
    data: dict[str, Any] = json.loads(snap.read_text())
    huge = {"web-1": 1.7e308, "app-1": 1e6}  # web-1 on kvm-02 (maintenance), app-1 on kvm-01
    for vm in data["vms"]:
        if vm["name"] in huge and not window:
            vm["cpuUsed"] = huge[vm["name"]]
    if window:  # as a load source saw them over the window, saved with the snapshot
        data["load"] = {
            "source": "prometheus",
            "basis": "window",
            "window": "10m",
            "statistic": "mean",
            "until": NOW,
            "vms": {
                vm["name"]: {
                    "now": vm["cpuUsed"],
                    "window": huge.get(vm["name"], 0.5),
                    "covered": 1,
                }
                for vm in data["vms"]
            },
        }
        for vm in data["vms"]:
            vm["cpuUsed"] = huge.get(vm["name"], 0.5)
    snap.write_text(json.dumps(data))
    return folder, snap


@pytest.mark.parametrize("window", [False, True], ids=["short-sample", "window"])
def test_plan_names_garbage_load_and_still_drains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], window: bool
) -> None:
    folder, snap = garbage(tmp_path, window)
    state = tmp_path / "state"
    args: list[str | Path] = ["plan", folder, "--snapshot", snap, "--now", NOW]
    args += ["--state-dir", state]
    run = reconciler(capsys, *args, "--format", "json")
    assert run.code == 2, run.err
    plan = json.loads(run.out)
    drained = {m["vm"] for m in plan["moves"] if m["reason"] == "Maintenance"}
    assert drained == {"web-1", "db-1"}
    assert plan["unsatisfiable"] == []
    assert set(plan["load"]["outOfRange"]) == {"web-1", "app-1"}
    assert {"web-1", "app-1"} <= set(plan["load"]["unknownVms"])
    assert not [m for m in plan["moves"] if m["reason"] in ("Balance", "HostLimit")]
    table = reconciler(capsys, *args)
    assert table.code == 2, table.err
    text = " ".join(table.out.split())  # as wrapped to 100 columns
    assert "out of range, not used: app-1: 1e+06 cores " in text
    assert "; web-1: 1.7e+308 cores " in text
