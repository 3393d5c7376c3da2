"""State between rounds as a user meets it: the status store read by ``plan``, a stable plan id
over live observations, ``plan | head`` ending quietly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.adapters.files.status import FileStatusStore
from reconciler.adapters.lab import Lab
from reconciler.model.status import ReconcileStatus
from tests.e2e.test_plan_cli import NOW, reconciler, write_scenario

ROOT = Path(__file__).resolve().parents[2]


def test_plan_reads_the_imbalance_streak_from_the_status_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, snapshot = write_scenario("hold_rounds_not_reached", tmp_path)
    state = tmp_path / "state"
    args = ("plan", folder, "--snapshot", snapshot, "--now", NOW, "--state-dir", state)
    assert reconciler(capsys, *args).code == 0, "no status: the streak starts at 1"
    FileStatusStore("lab", state).save(
        ReconcileStatus(cluster="lab", imbalance_rounds={"x86_64": 2}, rounds=2)
    )
    run = reconciler(capsys, *args)
    assert run.code == 2, run.err
    assert "Balance" in run.out
    assert "read the status of 2 earlier round(s) (imbalance streak x86_64: 2)" in run.err


def test_a_broken_status_file_is_a_warning_and_treated_as_absent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    folder, snapshot = write_scenario("hold_rounds_not_reached", tmp_path)
    state = tmp_path / "state"
    (state / "lab").mkdir(parents=True)
    (state / "lab" / "status.json").write_text("{not json")
    run = reconciler(capsys, "plan", folder, "--snapshot", snapshot, "--state-dir", state)
    assert run.code == 0, "no status: the streak starts at 1"
    (warning,) = (r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert "status.json is not JSON" in warning
    assert "treated as absent" in warning


def test_a_reader_that_leaves_early_ends_the_command_quietly() -> None:
    proc = subprocess.run(
        f"{sys.executable} -m reconciler schema snapshot | head -1",
        shell=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.stdout == "{\n"
    assert proc.stderr == ""


@pytest.mark.lab
def test_the_same_moves_observed_twice_have_the_same_plan_id(
    lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("plan", lab.cluster_dir, "--format", "json", "--state-dir", tmp_path)
    first, second = reconciler(capsys, *args), reconciler(capsys, *args)
    a, b = json.loads(first.out), json.loads(second.out)
    assert a["observedAt"] != b["observedAt"], "two observations"
    assert [m["vm"] for m in a["moves"]] == [m["vm"] for m in b["moves"]]
    assert a["moves"], "the lab starts unbalanced"
    assert a["planId"] == b["planId"]


@pytest.mark.libvirt
def test_a_live_plan_with_no_host_observed_is_an_error_naming_each_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("libvirt")
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "cluster.yaml").write_text(
        "apiVersion: placement/v1alpha1\nkind: Cluster\nmetadata: {name: gone}\nspec:\n"
        "  hosts:\n"
        f"  - {{name: kvm-01, uri: 'test://{tmp_path}/missing-1.xml'}}\n"
        f"  - {{name: kvm-02, uri: 'test://{tmp_path}/missing-2.xml'}}\n"
    )
    run = reconciler(capsys, "plan", folder, "--state-dir", tmp_path / "s")
    assert run.code == 1, "not 0: a CI job would read 'No changes' as in sync"
    assert "no host of cluster 'gone' could be observed" in run.err
    assert "kvm-01:" in run.err
    assert "kvm-02:" in run.err
    assert "No changes" not in run.out


def test_a_one_shot_command_leaves_the_garbage_collector_as_it_found_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gc

    folder, snapshot = write_scenario("hold_rounds_not_reached", tmp_path)
    assert gc.isenabled()
    assert reconciler(capsys, "plan", folder, "--snapshot", snapshot).code == 0
    assert gc.isenabled(), "a plan called in a long-lived process must not leave gc off"
