"""``reconciler rollout plan`` and ``rollout status`` as a user runs them, on the example cluster
(a saved snapshot of it), its records in the state directory or in a state repository."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from reconciler.adapters.files.rollout_progress import FileRolloutProgress, progress_text
from reconciler.cli import main
from reconciler.model.rollout_progress import RolloutProgress, StepOutcome, StepRecord
from tests.gitrepos import git, state_remote
from tests.impact.world import snapshot

REPO = Path(__file__).resolve().parents[2]


def check(kind: str, text: str) -> dict[str, Any]:
    """``text`` parsed, after validating against schemas/<kind>.json."""
    data: dict[str, Any] = json.loads(text)
    schema = json.loads((REPO / "schemas" / f"{kind}.json").read_text())
    jsonschema.validate(data, schema)
    return data


NAME = "kernel-2026-12"
NIGHT = "2026-12-01T23:00:00+01:00"
"""Inside the example rollout's window (Tuesday, 22:00 Europe/Berlin for 6h)."""
T = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "cluster-state"
    shutil.copytree(REPO / "cluster-state", out)
    (tmp_path / "snap.json").write_text(snapshot().model_dump_json(by_alias=True))
    return out


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _rec(host: str | None, step: str, outcome: str, minutes: int, detail: str = "") -> StepRecord:
    return StepRecord(
        host=host,
        step=step,
        outcome=StepOutcome(outcome),
        at=T + timedelta(minutes=minutes),
        by="run@a",
        detail=detail,
    )


RECORDS = [
    _rec(None, "before/ceph-noout", "started", 0),
    _rec(None, "before/ceph-noout", "succeeded", 0, "exit 0"),
    *(
        _rec("kvm-01", step, outcome, 1)
        for step in (
            "drain",
            "shutdown",
            "command/upgrade",
            "command/needrestart",
            "reboot",
            "ready",
            "start",
            "undrain",
        )
        for outcome in ("started", "succeeded")
    ),
    _rec("kvm-02", "drain", "started", 10),
    _rec("kvm-02", "drain", "succeeded", 12),
    _rec("kvm-02", "shutdown", "started", 12),
    _rec("kvm-02", "shutdown", "succeeded", 12),
    _rec("kvm-02", "command/upgrade", "started", 12),
    _rec("kvm-02", "command/upgrade", "failed", 20, "exit 100: E: Sub-process returned an error"),
]


def test_plan_shows_order_evacuation_and_what_blocks(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = str(tmp_path / "snap.json")
    code, out, err = _run(capsys, "rollout", "plan", NAME, str(folder), "--snapshot", snap)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"rollout {NAME} of cluster lab: 3 hosts, one at a time"
    assert lines[1] == "first: before/ceph-noout"
    assert [line.split(":")[0] for line in lines if line[:1].isdigit()] == [
        "1. kvm-01",
        "2. kvm-02",
        "3. kvm-03",
    ]
    assert (
        "   shut down for its turn, started again after: erp is pinned to kvm-03 by rule "
        "erp-pinned" in lines
    )
    # block instead of shutdown: the pinned VM blocks kvm-03 before anything starts
    path = folder / "rollouts" / f"{NAME}.yaml"
    path.write_text(path.read_text().replace("action: shutdown", "action: block"))
    code, out, _ = _run(capsys, "rollout", "plan", NAME, str(folder), "--snapshot", snap)
    assert code == 3
    assert "   blocked: erp is pinned to kvm-03 by rule erp-pinned (immovable.action: block)" in (
        out.splitlines()
    )
    assert out.endswith("blocked at kvm-03: the rollout waits there until it can go\n")
    code, out, _ = _run(
        capsys, "rollout", "plan", NAME, str(folder), "--snapshot", snap, "--format", "json"
    )
    data = check("rolloutplan", out)
    assert data["kind"] == "RolloutPlan"
    assert data["blocked"] is True
    third = data["hosts"][2]
    assert third["host"] == "kvm-03"
    assert third["blockedBy"] == [
        {
            "vm": "erp",
            "host": "kvm-03",
            "why": "erp is pinned to kvm-03 by rule erp-pinned",
            "rule": "erp-pinned",
        }
    ]
    moved = {m["vm"] for h in data["hosts"] for m in h["evacuation"]}
    assert "erp" not in moved
    assert {m["source"] for m in data["hosts"][0]["evacuation"]} == {"kvm-01"}


def test_an_unknown_rollout_names_those_there_are(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, "rollout", "status", "nope", str(folder))
    assert code == 1
    assert "cluster 'lab' has no rollout 'nope' (its rollouts: kernel-2026-12)" in err


def test_status_from_the_state_directory(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    store = FileRolloutProgress("lab", state)
    store.save(RolloutProgress(cluster="lab", rollout=NAME, records=RECORDS))
    check("rolloutprogress", store.path(NAME).read_text())
    argv = ["rollout", "status", NAME, str(folder), "--snapshot", str(tmp_path / "snap.json")]
    argv += ["--state-dir", str(state), "--now", NIGHT]
    code, out, err = _run(capsys, *argv)
    assert (code, err) == (3, "")
    lines = out.splitlines()
    assert lines[0] == f"rollout {NAME} of cluster lab: Stopped, 1 host out (kvm-02)"
    assert lines[1] == (
        "  stopped at kvm-02 command/upgrade: exit 100: E: Sub-process returned an error"
    )
    assert "  kvm-01           done  undrain succeeded 2026-12-01T22:01:00+00:00 by run@a" in lines
    assert any(
        line.startswith("  kvm-02           failed  command/upgrade failed") for line in lines
    )
    assert "  kvm-03           pending" in lines
    code, out, _ = _run(capsys, *argv, "--format", "json")
    data = check("rolloutstatus", out)
    assert (data["phase"], data["stoppedHost"]) == ("Stopped", "kvm-02")
    assert data["stoppedAt"]["step"] == "command/upgrade"
    assert data["out"] == ["kvm-02"]


def test_status_with_no_host_answering_shows_the_records(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(
        capsys,
        "rollout",
        "status",
        NAME,
        str(folder),
        "--state-dir",
        str(tmp_path / "s"),
        "--connect-timeout",
        "0.5",
    )
    assert code == 0
    assert "note: the hosts could not be looked at" in err
    assert out.splitlines()[:2] == [
        f"rollout {NAME} of cluster lab: NotStarted",
        "  (the hosts could not be looked at: from the records alone)",
    ]


def test_unreadable_records_are_an_error(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    path = FileRolloutProgress("lab", state).path(NAME)
    path.parent.mkdir(parents=True)
    path.write_text("{torn")
    code, _, err = _run(
        capsys,
        "rollout",
        "status",
        NAME,
        str(folder),
        "--state-dir",
        str(state),
        "--snapshot",
        str(tmp_path / "snap.json"),
    )
    assert code == 1
    assert "are not JSON" in err
    assert "never starts over" in err


def test_status_from_the_state_repository(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "git").mkdir()
    url, person = state_remote(tmp_path / "git", folder)
    progress = RolloutProgress(cluster="lab", rollout=NAME, records=RECORDS[:4])
    (person / "cluster-state" / "rollouts" / f"{NAME}.progress.json").write_text(
        progress_text(progress)
    )
    git(person, "add", ".")
    git(person, "commit", "--quiet", "-m", "records")
    git(person, "push", "--quiet", "origin", "main")
    code, out, err = _run(
        capsys,
        "rollout",
        "status",
        NAME,
        "--repo",
        url,
        "--cache-dir",
        str(tmp_path / "c"),
        "--snapshot",
        str(tmp_path / "snap.json"),
        "--now",
        NIGHT,
        "--format",
        "json",
    )
    assert (code, err) == (0, "")
    data = check("rolloutstatus", out)
    assert data["phase"] == "InProgress"
    assert [h["state"] for h in data["hosts"]] == ["out", "pending", "pending"]
    assert data["out"] == ["kvm-01"]
    assert data["keepOut"] == ["kvm-01", "kvm-02"]
