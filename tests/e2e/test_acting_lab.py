"""The one acting path on a real lab: crash consistency judged from libvirt, and ``run --repo``
in apply mode leaving audit commits that ``history`` reads, with a failover that moves nothing
back."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconciler.adapters.lab import Lab
from tests.e2e.test_apply_cli import (
    _apply_process,
    _one_at_a_time,
    assert_settled,
    assert_sound,
    reconciler,
)
from tests.e2e.test_run_lab import (
    ROOT,
    metric,
    mode_apply,
    settled,
    stop,
    wait_until,
)
from tests.gitrepos import git, state_remote
from tests.net import free_port

pytestmark = pytest.mark.lab
pytest.importorskip("libvirt")


def test_sigkill_at_random_moments_then_apply_every_move_is_recorded_on_its_vm(
    own_lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, state = own_lab.cluster_dir, tmp_path / "state"
    _one_at_a_time(folder)
    start = assert_sound(own_lab)
    rnd = random.Random(7)
    for _ in range(4):
        proc = _apply_process(folder, state)
        time.sleep(rnd.uniform(1.0, 3.0))
        proc.kill()
        proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()
        assert_settled(own_lab)  # the migration the kill interrupted may still be ending
    code, _, err = reconciler(capsys, "apply", folder, "--yes", "--state-dir", state)
    assert code in (0, 3), err
    where = assert_sound(own_lab)  # the truth: libvirt
    code, out, _ = reconciler(capsys, "observe", folder, "--format", "json")
    records = {v["name"]: v["reconciler"] for v in json.loads(out)["vms"]}
    moved = {vm for vm, host in where.items() if start[vm] != host}
    assert moved, "something moved"
    for vm in moved:
        record = records[vm]
        assert record.get("lastMovedTo") == where[vm], (vm, record)
        assert record.get("intent") is None, (vm, record)
    assert all(r.get("moves", 0) <= 1 for r in records.values()), records


def _run_repo(
    url: str, state: Path, port: int, log: Path, identity: str
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reconciler",
                "run",
                "cluster-state",
                "--repo",
                url,
                "--poll",
                "1",
                "--state-dir",
                str(state),
                "--cache-dir",
                str(state / "cache"),
                "--identity",
                identity,
                "--listen",
                f"127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


@pytest.mark.long
def test_run_repo_in_apply_mode_commits_its_moves_and_a_standby_moves_nothing_back(
    own_lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = own_lab.cluster_dir
    mode_apply(folder)
    url, person = state_remote(tmp_path, folder)
    log = tmp_path / "run.log"
    first_port, second_port = free_port(), free_port()
    first = _run_repo(url, tmp_path / "a", first_port, log, "first")
    second: subprocess.Popen[bytes] | None = None
    try:

        def audit_commits() -> list[str]:
            git(person, "fetch", "--quiet", "origin")
            out = git(person, "log", "--format=%H", "--grep=Reconciler-Trigger", "origin/main")
            return out.split()

        wait_until("an audit commit", lambda: bool(audit_commits()), 180, log)
        # nothing left to do, with no migration in flight around the plan that says so
        wait_until(
            "balanced",
            lambda: settled(own_lab)
            and reconciler(
                capsys, "plan", "cluster-state", "--repo", url, "--cache-dir", tmp_path / "c"
            )[0]
            == 0
            and settled(own_lab),
            180,
            log,
        )
        where = assert_sound(own_lab)
        code, out, err = reconciler(
            capsys, "history", "--repo", url, "--format", "json", "--cache-dir", tmp_path / "h"
        )
        assert code == 0, err
        entries = [e for e in json.loads(out)["entries"] if e["kind"] == "executed"]
        assert entries, out
        assert {e["trigger"] for e in entries} <= {"schedule", "drift", "merge", "maintenance"}
        moved = {m["vm"]: m["target"] for e in reversed(entries) for m in e["moves"]}
        assert moved
        for vm, target in moved.items():
            if target != "(unlisted)":
                assert where[vm] == target or vm not in where, (vm, target, where)
        # The standby takes over and finds nothing to move back: git follows the cluster.
        second = _run_repo(url, tmp_path / "b", second_port, log, "second")
        wait_until(
            "the standby answers", lambda: metric(second_port, "reconciler_leader") == 0, 60, log
        )
        stop(first, 9)
        wait_until(
            "the standby leads", lambda: metric(second_port, "reconciler_leader") == 1, 60, log
        )
        wait_until(
            "the new leader finished a round",
            lambda: (metric(second_port, "reconciler_reconciles_total") or 0) >= 2,
            120,
            log,
        )
        assert (metric(second_port, "reconciler_migrations_total") or 0) == 0
        assert assert_sound(own_lab) == where
        assert stop(second) == 0
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert_settled(own_lab)  # after a kill
