"""`reconciler lab` and `reconciler observe` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.adapters.files.snapshot import load_snapshot
from reconciler.adapters.lab import Lab
from reconciler.cli import main


def test_observe_test_driver_lab_table_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "lab"
    assert main(["lab", "up", "--driver", "test", "--dir", str(directory)]) == 0
    out = capsys.readouterr().out
    assert "lab up in" in out
    assert "kvm-01" in out
    assert "cluster-state" in out

    folder = directory / "cluster-state"
    assert main(["observe", str(folder), "--sample-interval", "0"]) == 0
    table = capsys.readouterr().out
    lines = table.splitlines()
    assert lines[0].startswith("cluster lab at ")
    assert "3/3 hosts reachable, 8 VMs" in lines[0]
    assert any(line.split()[:2] == ["kvm-01", "up"] for line in lines)
    web = next(line for line in lines if line.startswith("web-1 "))
    assert web.split()[1:3] == ["kvm-01", "running"]
    assert "app=web" in web
    header = next(line for line in lines if line.startswith("VM ")).split()
    # the migration class: no disks, live-migratable
    assert web.split()[header.index("CLASS")] == "shared"

    assert main(["observe", str(folder), "--format", "json", "--sample-interval", "0"]) == 0
    text = capsys.readouterr().out
    data = json.loads(text)
    assert (data["apiVersion"], data["kind"]) == ("placement/v1alpha1", "Snapshot")
    assert data["cluster"] == "lab"
    assert len(data["vms"]) == 8
    assert data["inFlight"] == []
    saved = tmp_path / "snap.json"
    saved.write_text(text)
    assert len(load_snapshot(saved).hosts) == 3

    assert main(["lab", "status", "--dir", str(directory)]) == 0
    assert "kvm-02  up" in capsys.readouterr().out
    assert main(["lab", "down", "--dir", str(directory)]) == 0
    assert not directory.exists()


def test_observe_defaults_to_a_running_lab(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["lab", "up", "--driver", "test", "--vms", "2"]) == 0
    capsys.readouterr()
    assert main(["observe", "--format", "json", "--sample-interval", "0"]) == 0
    captured = capsys.readouterr()
    assert ".lab/cluster-state" in captured.err
    assert len(json.loads(captured.out)["vms"]) == 2
    assert main(["lab", "down"]) == 0


def test_unreachable_host_exits_1_and_is_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "cluster.yaml").write_text(
        "apiVersion: placement/v1alpha1\nkind: Cluster\nmetadata: {name: gone}\n"
        "spec:\n  hosts:\n    - name: kvm-01\n"
        f"      uri: 'qemu+unix:///system?socket={tmp_path}/none/sock'\n"
    )
    assert main(["observe", str(folder)]) == 1
    captured = capsys.readouterr()
    assert "kvm-01  unreachable" in captured.out
    assert "warning: host kvm-01 unreachable" in captured.err


def test_lab_errors_are_messages_not_tracebacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["lab", "status", "--dir", str(tmp_path / "none")]) == 1
    assert "error: no lab in" in capsys.readouterr().err


@pytest.mark.lab
def test_observe_real_lab(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    folder = str(lab.cluster_dir)
    assert main(["observe", folder, "--sample-interval", "0.2"]) == 0
    table = capsys.readouterr().out
    assert "3/3 hosts reachable, 8 VMs" in table
    assert main(["observe", folder, "--format", "json", "--sample-interval", "0.2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert all(vm["cpuUsed"] is not None for vm in data["vms"])
    assert main(["lab", "status", "--dir", lab.dir]) == 0
    assert capsys.readouterr().out.count(" running") == 8
