"""``reconciler plan`` and ``reconciler place`` as a user runs them, offline on saved snapshots.

The cluster folders and snapshots come from golden scenarios, written out as files.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from reconciler.cli import main
from reconciler.model.plan import PlaceResult, Plan
from reconciler.model.snapshot import Snapshot
from reconciler.report.plan_patch import placement_document
from tests.core.test_scenarios import SCENARIOS, Scenario

NOW = "2025-03-01T12:00:00Z"
RFC6902_OPS = {"add", "remove", "replace", "move", "copy", "test"}


class Run:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err


def reconciler(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> Run:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


def write_scenario(name: str, where: Path, *, snapshot_suffix: str = ".json") -> tuple[Path, Path]:
    """The scenario's documents as a cluster folder and its snapshot as a file."""
    scenario = Scenario(SCENARIOS / f"{name}.yaml")
    folder = where / "cluster-state"
    folder.mkdir(parents=True)
    for key, doc in scenario.data["desired"].items():
        (folder / f"{key}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    snapshot = where / f"snapshot{snapshot_suffix}"
    data = scenario.snapshot.model_dump(mode="json", by_alias=True)
    if snapshot_suffix == ".json":
        snapshot.write_text(json.dumps(data, indent=2))
    else:
        snapshot.write_text(yaml.safe_dump(data, sort_keys=False))
    return folder, snapshot


def _move_keys(moves: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(m["vm"], m["source"], m["target"]) for m in moves]


def _expected(name: str) -> dict[str, Any]:
    return Scenario(SCENARIOS / f"{name}.yaml").expected


# --- plan -----------------------------------------------------------------------------------


def test_plan_table_with_changes_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, snapshot = write_scenario("drain_maintenance", tmp_path)
    run = reconciler(capsys, "plan", folder, "--snapshot", snapshot, "--now", NOW)
    assert run.code == 2, run.err
    lines = run.out.splitlines()
    assert lines[0] == f"Plan for cluster lab at {NOW}"
    assert lines[1].startswith("  id sha256:")
    for move in _expected("drain_maintenance")["moves"]:
        line = next(li for li in lines if li.strip().startswith(move["vm"] + " "))
        assert f"{move['source']} -> {move['target']}" in line
        assert "Maintenance" in line
    assert lines[-1].startswith("2 moves in ")
    assert max(len(li) for li in lines) <= 100


def test_plan_without_changes_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, snapshot = write_scenario("hold_rounds_not_reached", tmp_path)
    run = reconciler(capsys, "plan", folder, "--snapshot", snapshot, "--now", NOW)
    assert run.code == 0, run.err
    assert run.out.splitlines()[-1] == "No changes."


def test_history_file_counts_rounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With holdRounds 3, two earlier rounds over the threshold make this one act."""
    folder, snapshot = write_scenario("hold_rounds_not_reached", tmp_path)
    history = tmp_path / "history.yaml"
    history.write_text(
        "apiVersion: placement/v1alpha1\nkind: History\nimbalanceRounds: {x86_64: 2}\n"
    )
    args = ("plan", folder, "--snapshot", snapshot, "--now", NOW, "--format", "json")
    run = reconciler(capsys, *args, "--history", history)
    assert run.code == 2, run.err
    plan = Plan.model_validate_json(run.out)
    assert [m.reason for m in plan.moves] != []
    assert {m.reason for m in plan.moves} == {"Balance"}
    assert plan.imbalance_rounds == {"x86_64": 3}


def test_plan_json_is_the_whole_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, snapshot = write_scenario("batch_deferral", tmp_path)
    run = reconciler(
        capsys, "plan", folder, "--snapshot", snapshot, "--now", NOW, "--format", "json"
    )
    assert run.code == 2, run.err
    data = json.loads(run.out)
    plan = Plan.model_validate(data)
    assert plan.cluster == "lab"
    assert plan.created_at.isoformat() == "2025-03-01T12:00:00+00:00"
    expected = _expected("batch_deferral")
    assert _move_keys(data["moves"]) == _move_keys(expected["moves"])
    assert _move_keys(data["deferred"]) == _move_keys(expected["deferred"])
    # The same inputs give the same text: the plan id and key order are stable.
    again = reconciler(
        capsys, "plan", folder, "--snapshot", snapshot, "--now", NOW, "--format", "json"
    )
    assert again.out == run.out


def _patch_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> tuple[Path, Any]:
    folder, snapshot = write_scenario(name, tmp_path)
    run = reconciler(
        capsys, "plan", folder, "--snapshot", snapshot, "--now", NOW, "--format", "patch"
    )
    assert run.code == 2, run.err
    return folder, json.loads(run.out)


def test_patch_is_valid_rfc6902(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, ops = _patch_run(tmp_path, capsys, "rule_pin")
    assert isinstance(ops, list)
    assert ops
    for op in ops:
        assert isinstance(op, dict)
        assert op["op"] in RFC6902_OPS
        assert isinstance(op["path"], str)
        assert op["path"].startswith("/")
        if op["op"] in {"add", "replace", "test"}:
            assert "value" in op
        if op["op"] in {"move", "copy"}:
            assert isinstance(op["from"], str)
        assert set(op) <= {"op", "path", "value", "from"}
    jsonpatch.JsonPatch(ops)  # the library accepts it as a patch


def test_moves_back_to_the_placement_give_an_empty_patch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reverting drift migrates, but the Placement document already says where the VM belongs."""
    _, ops = _patch_run(tmp_path, capsys, "drift_revert")
    assert ops == []


def test_adopted_drift_is_a_change_without_moves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing migrates, but the proposal rewrites placement.yaml: exit 2, shown in every format."""
    folder, snapshot = write_scenario("drift_adopt", tmp_path)
    base = ("plan", folder, "--snapshot", snapshot, "--now", NOW)
    table = reconciler(capsys, *base)
    assert table.code == 2, table.err
    assert "Placement updates without a migration (1):" in table.out
    assert table.out.splitlines()[-1] == "No moves; 1 placement update, 0 unsatisfiable"
    patch = reconciler(capsys, *base, "--format", "patch")
    assert patch.code == 2
    assert json.loads(patch.out) == [
        {"op": "replace", "path": "/spec/vms/web-1", "value": "kvm-02"}
    ]


@pytest.mark.parametrize("name", ["drift_revert", "rule_pin", "batch_deferral", "drift_adopt"])
def test_patch_applies_to_the_current_placement(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, ops = _patch_run(tmp_path, capsys, name)
    scenario = Scenario(SCENARIOS / f"{name}.yaml")
    snapshot = tmp_path / "snapshot.json"
    plan_run = reconciler(
        capsys, "plan", folder, "--snapshot", snapshot, "--now", NOW, "--format", "json"
    )
    plan = Plan.model_validate_json(plan_run.out)
    current = placement_document(scenario.desired.placement)
    proposed = jsonpatch.apply_patch(current, ops)
    assert proposed["spec"]["vms"] == plan.placement
    assert proposed["kind"] == "Placement"
    assert proposed["metadata"] == current["metadata"]


def test_without_path_the_lab_folder_is_used_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, snapshot = write_scenario("drain_maintenance", tmp_path / ".lab")
    (tmp_path / ".lab" / "lab.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    run = reconciler(capsys, "plan", "--snapshot", snapshot, "--now", NOW)
    assert run.code == 2, run.err
    assert ".lab/cluster-state" in run.err


# --- errors ---------------------------------------------------------------------------------


def test_missing_folder_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, snapshot = write_scenario("rule_pin", tmp_path)
    run = reconciler(capsys, "plan", tmp_path / "nowhere", "--snapshot", snapshot)
    assert run.code == 1
    assert run.err.startswith("error: ")
    assert run.out == ""


def test_snapshot_of_another_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, snapshot = write_scenario("rule_pin", tmp_path)
    data = json.loads(snapshot.read_text())
    snapshot.write_text(json.dumps({**data, "cluster": "prod"}))
    run = reconciler(capsys, "plan", folder, "--snapshot", snapshot, "--now", NOW)
    assert run.code == 1
    assert "'prod'" in run.err
    assert "'lab'" in run.err
    assert "hint:" in run.err


def test_snapshot_with_hosts_not_in_the_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, snapshot = write_scenario("rule_pin", tmp_path)
    data = Snapshot.model_validate_json(snapshot.read_text())
    stray = data.hosts[0].model_copy(update={"name": "kvm-09"})
    changed = data.model_copy(update={"hosts": [*data.hosts, stray]})
    snapshot.write_text(changed.model_dump_json(by_alias=True))
    run = reconciler(capsys, "plan", folder, "--snapshot", snapshot, "--now", NOW)
    assert run.code == 1
    assert "kvm-09" in run.err
    assert "hint:" in run.err


def test_bad_history_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, snapshot = write_scenario("rule_pin", tmp_path)
    history = tmp_path / "history.yaml"
    history.write_text("imbalanceRounds: {x86_64: many}\n")
    run = reconciler(capsys, "plan", folder, "--snapshot", snapshot, "--history", history)
    assert run.code == 1
    assert "history" in run.err
    assert "imbalanceRounds" in run.err


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--format", "xml"],
        ["plan", "--bogus"],
        ["plan", "a", "b"],
        ["plan", "--now", "yesterday"],
        ["plan", "--now", "2025-03-01T12:00:00"],
        ["place", "--memory", "4GiB"],
        ["place", "--vcpus", "2", "--memory", "lots"],
        ["place", "--vcpus", "0", "--memory", "4GiB"],
        ["place", "--vcpus", "2", "--memory", "4GiB", "--labels", "novalue"],
        ["place", "--vcpus", "2", "--memory", "4GiB", "--hugepages", "1000B"],
    ],
)
def test_usage_errors_exit_1_not_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """2 means "changes" (plan) or "no host fits" (place), so a typo must not exit 2."""
    run = reconciler(capsys, *argv)
    assert run.code == 1
    assert "usage:" in run.err
    assert run.out == ""


def test_usage_error_exit_code_of_the_installed_command() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler", "plan", "--format", "xml"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "usage:" in proc.stderr


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    run = reconciler(capsys, "plan", "--help")
    assert run.code == 0
    assert "0  no changes" in run.out
    assert "2  changes" in run.out
    assert "1  error" in run.out
    run = reconciler(capsys, "place", "--help")
    assert run.code == 0
    assert "2  no host fits" in run.out


# --- place ----------------------------------------------------------------------------------


def test_place_prints_the_best_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, snapshot = write_scenario("rule_host_anti_affinity", tmp_path)
    args = ("place", "--vcpus", "2", "--memory", "4GiB", folder, "--snapshot", snapshot)
    run = reconciler(capsys, *args, "--name", "web-9", "--now", NOW)
    assert run.code == 0, run.err
    first = run.out.splitlines()[0]
    assert first.startswith("Best host: kvm-0")
    # web-* may not run on kvm-01 (gen old): it is listed with why not.
    kvm01 = next(li for li in run.out.splitlines() if li.strip().startswith("kvm-01 "))
    assert " no " in kvm01
    as_json = reconciler(capsys, *args, "--name", "web-9", "--now", NOW, "--format", "json")
    assert as_json.code == 0
    result = PlaceResult.model_validate_json(as_json.out)
    assert result.host == first.removeprefix("Best host: ")
    assert result.host != "kvm-01"


def test_place_with_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, snapshot = write_scenario("rule_host_affinity", tmp_path)
    run = reconciler(
        capsys,
        "place",
        folder,
        "--snapshot",
        snapshot,
        "--vcpus",
        "2",
        "--memory",
        "4GiB",
        "--labels",
        "gpu=yes",
        "team=ml",
        "--format",
        "json",
    )
    assert run.code == 0, run.err
    assert PlaceResult.model_validate_json(run.out).host == "kvm-03"


def test_place_when_nothing_fits_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, snapshot = write_scenario("nothing_fits", tmp_path)
    args = ("place", folder, "--snapshot", snapshot, "--vcpus", "2", "--memory", "1TiB")
    run = reconciler(capsys, *args)
    assert run.code == 2, run.err
    lines = run.out.splitlines()
    assert lines[0] == "No host fits."
    for host in ("kvm-02", "kvm-03"):
        assert any(li.strip().startswith(host + " ") for li in lines)


def test_place_with_hugepages_fits_only_where_the_pages_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, snapshot = write_scenario("rule_host_anti_affinity", tmp_path)
    doc = json.loads(snapshot.read_text())
    names = sorted(h["name"] for h in doc["hosts"])
    roomy = names[-1]
    for h in doc["hosts"]:  # 4 GiB is 2,048 pages of 2 MiB: one host has exactly that many
        h["hugepagesFree"] = {"2048": 2048 if h["name"] == roomy else 2047}
    snapshot.write_text(json.dumps(doc))
    args = ("place", folder, "--snapshot", snapshot, "--vcpus", "2", "--memory", "4GiB")
    run = reconciler(capsys, *args, "--hugepages", "2MiB", "--format", "json")
    assert run.code == 0, run.err
    result = PlaceResult.model_validate_json(run.out)
    assert result.host == roomy
    why = {c.host: c.reasons for c in result.candidates}
    assert why[names[0]] == [
        f"{names[0]} has room for 2047 hugepages of 2048 KiB, the VMs planned there need 2048"
    ]
    run = reconciler(capsys, *args, "--hugepages", "1GiB")
    assert run.code == 2, "no host offers 1 GiB pages"
    assert "room for 0 hugepages of 1048576 KiB" in run.out


# --- live -----------------------------------------------------------------------------------


@pytest.mark.libvirt
def test_plan_observes_the_hosts_without_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --snapshot, plan observes through libvirt (here its test driver)."""
    pytest.importorskip("libvirt")
    (tmp_path / "cluster.yaml").write_text(
        "apiVersion: placement/v1alpha1\nkind: Cluster\nmetadata: {name: live}\n"
        "spec:\n  hosts:\n    - {name: node-1, uri: 'test:///default'}\n"
    )
    run = reconciler(capsys, "plan", tmp_path, "--now", NOW, "--format", "json")
    assert run.code == 0, run.err
    plan = Plan.model_validate_json(run.out)
    assert plan.cluster == "live"
    assert [(h.host, h.known) for h in plan.hosts] == [("node-1", True)]
