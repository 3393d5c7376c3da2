"""``reconciler apply`` on a real lab of libvirt daemons, as a user runs it.

Each test starts its own small lab (apply moves VMs; the shared session lab stays as it was).
After every run the lab is checked the way an operator would: every VM runs exactly once, none
is paused, each is defined exactly where it runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from reconciler.adapters.lab import Lab, read_lab
from reconciler.cli import main
from reconciler.config import load_desired
from reconciler.model.status import MoveOutcome, ReconcileStatus

pytestmark = pytest.mark.lab

libvirt = pytest.importorskip("libvirt")


def domains(lab: Lab) -> dict[str, list[tuple[str, bool, int]]]:
    """VM name -> [(host, defined persistently, state)] over every host of the lab."""
    out: dict[str, list[tuple[str, bool, int]]] = {}
    for host in lab.hosts:
        conn = libvirt.open(host.uri)
        try:
            for dom in conn.listAllDomains():
                try:
                    seen = (host.name, bool(dom.isPersistent()), dom.state()[0])
                except libvirt.libvirtError:  # it left while we looked (a migration ending)
                    continue
                out.setdefault(dom.name(), []).append(seen)
        finally:
            conn.close()
    return out


def assert_sound(lab: Lab) -> dict[str, str]:
    """Every VM runs exactly once, none paused, defined exactly where it runs; VM -> host."""
    where: dict[str, str] = {}
    for vm, seen in domains(lab).items():
        running = [h for h, _, s in seen if s == libvirt.VIR_DOMAIN_RUNNING]
        paused = [h for h, _, s in seen if s == libvirt.VIR_DOMAIN_PAUSED]
        defined = [h for h, persistent, _ in seen if persistent]
        assert len(running) == 1, f"{vm} runs on {running}"
        assert not paused, f"{vm} is paused on {paused}"
        assert defined == running, f"{vm} is defined on {defined}, runs on {running}"
        where[vm] = running[0]
    return where


def in_flight(lab: Lab) -> list[str]:
    """``vm@host`` for every domain with an active job (a migration under way) on any host."""
    busy: list[str] = []
    for host in lab.hosts:
        conn = libvirt.open(host.uri)
        try:
            for dom in conn.listAllDomains():
                try:
                    if dom.jobInfo()[0] != libvirt.VIR_DOMAIN_JOB_NONE:
                        busy.append(f"{dom.name()}@{host.name}")
                except libvirt.libvirtError:  # it left while we looked
                    continue
        finally:
            conn.close()
    return busy


def assert_settled(lab: Lab, timeout: float = 60.0) -> dict[str, str]:
    """``assert_sound`` once no migration is in flight on any host (bounded by ``timeout``).

    For the moments right after a client was killed, timed out or stopped: a peer-to-peer
    migration goes on inside the daemons after the client that started it is gone, so the VM
    may for a moment run on its source beside a paused incoming copy on its target. That is a
    migration in flight, not a fault: the judgement waits until the daemons have ended it. A
    VM left paused, twice or undefined with no job in flight on either side is still a fault.
    """
    deadline = time.monotonic() + timeout
    while True:
        busy = in_flight(lab)
        if not busy:
            try:
                return assert_sound(lab)
            except AssertionError:
                # judged wrong only if no migration began while we looked
                if not in_flight(lab) or time.monotonic() > deadline:
                    raise
                continue
        if time.monotonic() > deadline:
            raise AssertionError(f"migrations still in flight after {timeout:g} s: {busy}")
        time.sleep(0.1)


def reconciler(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_apply_balances_the_lab_and_a_second_apply_does_nothing(
    own_lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, state = own_lab.cluster_dir, tmp_path / "state"
    before = assert_sound(own_lab)
    code, out, err = reconciler(
        capsys, "apply", folder, "--yes", "--state-dir", state, "--format", "json"
    )
    assert code == 0, err + out
    status = ReconcileStatus.model_validate_json(out)
    assert status.last_result is not None
    moves = status.last_result.moves
    assert moves, "the lab starts unbalanced"
    assert {m.outcome for m in moves} == {MoveOutcome.SUCCEEDED}
    after = assert_sound(own_lab)
    assert {m.vm: m.target for m in moves} == {v: h for v, h in after.items() if before[v] != h}
    # Limits, as the test knows them: migrations that overlapped in time never exceeded
    # parallel.cluster, and no VM moved twice.
    desired = load_desired(folder)
    spans = [
        (m.started_at, m.started_at + timedelta(seconds=m.seconds or 0))
        for m in moves
        if m.started_at is not None
    ]
    worst = max(sum(a <= t < b for a, b in spans) for t, _ in spans)
    assert worst <= desired.policy.spec.parallel.cluster
    assert len(moves) == len({m.vm for m in moves}) <= desired.policy.spec.batch
    # the records are on the VMs
    code, out, _ = reconciler(capsys, "observe", folder, "--format", "json")
    snap = json.loads(out)
    records = {v["name"]: v["reconciler"] for v in snap["vms"]}
    for m in moves:
        assert records[m.vm]["lastMovedTo"] == m.target
        assert records[m.vm]["lastPlanId"] == status.last_result.plan_id
    # the spread is now under the threshold, and nothing is left to do
    code, out, err = reconciler(capsys, "plan", folder, "--state-dir", state)
    assert code == 0, out + err
    code, out, err = reconciler(capsys, "apply", folder, "--yes", "--state-dir", state)
    assert code == 0, err
    assert "Nothing was moved" in out
    assert assert_sound(own_lab) == after


def test_dry_run_moves_nothing_and_without_yes_off_a_terminal_it_refuses(
    own_lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, state = own_lab.cluster_dir, tmp_path / "state"
    before = assert_sound(own_lab)
    code, out, _ = reconciler(capsys, "apply", folder, "--dry-run", "--state-dir", state)
    assert code == 0
    assert "Nothing was moved" in out
    assert assert_sound(own_lab) == before


def _apply_process(folder: Path, state: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reconciler",
            "apply",
            str(folder),
            "--yes",
            "--state-dir",
            str(state),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def _wait_for_line(proc: subprocess.Popen[str], text: str, timeout: float = 60) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"never printed {text!r}: {''.join(lines)}")


def _one_at_a_time(folder: Path) -> None:
    """parallel 1 and a batch of 4, so there is a queue to interrupt."""
    policy = folder / "policy.yaml"
    text = policy.read_text()
    lines = [ln for ln in text.splitlines() if not ln.strip().startswith(("batch:", "parallel:"))]
    out: list[str] = []
    for ln in lines:
        out.append(ln)
        if ln.strip() == "spec:":
            out += ["  batch: 4", "  parallel: {cluster: 1}"]
    policy.write_text("\n".join(out) + "\n")


def test_sigterm_lets_the_running_migration_finish_and_starts_no_other(
    own_lab: Lab, tmp_path: Path
) -> None:
    folder, state = own_lab.cluster_dir, tmp_path / "state"
    _one_at_a_time(folder)
    proc = _apply_process(folder, state)
    _wait_for_line(proc, "migrating ")
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, rest
    assert "Interrupted" in rest or "interrupted" in rest
    assert_sound(own_lab)
    status = json.loads((state / own_lab_name(folder) / "status.json").read_text())
    outcomes = Counter(m["outcome"] for m in status["lastResult"]["moves"])
    assert outcomes["succeeded"] + outcomes["aborted"] + outcomes["failed"] <= 1
    assert outcomes["skipped"] >= 1


def own_lab_name(folder: Path) -> str:
    return load_desired(folder).cluster.metadata.name


def test_sigkill_mid_batch_then_apply_again_moves_no_vm_twice(
    own_lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, state = own_lab.cluster_dir, tmp_path / "state"
    _one_at_a_time(folder)
    proc = _apply_process(folder, state)
    _wait_for_line(proc, "succeeded ")
    proc.kill()
    proc.wait(timeout=30)
    assert proc.stdout is not None
    proc.stdout.close()
    assert_settled(own_lab)
    # The lock died with its holder: the next apply starts, and sees the records.
    code, _, err = reconciler(capsys, "apply", folder, "--yes", "--state-dir", state)
    assert code in (0, 3), err
    after = assert_sound(own_lab)
    code, out, _ = reconciler(capsys, "observe", folder, "--format", "json")
    records: dict[str, Any] = {v["name"]: v["reconciler"] for v in json.loads(out)["vms"]}
    assert all(r["moves"] <= 1 for r in records.values()), records
    assert set(after) == set(records)


def test_a_second_apply_is_refused_while_one_holds_the_cluster_whatever_its_state_dir(
    own_lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from reconciler.adapters.files.lock import FileLease, cluster_lock_path
    from reconciler.config import load_desired

    folder = own_lab.cluster_dir
    cluster = load_desired(folder).cluster
    hosts = [(h.name, h.uri) for h in cluster.spec.hosts]
    lock = FileLease(cluster_lock_path(cluster.metadata.name, hosts), command="run")
    assert lock.acquire()
    try:
        for state in ("state-1", "state-2"):
            code, _, err = reconciler(
                capsys, "apply", folder, "--yes", "--state-dir", tmp_path / state
            )
            assert code == 1
            assert f"pid {os.getpid()}" in err
            assert "is held by run" in err
        started = time.monotonic()
        code, _, err = reconciler(
            capsys, "apply", folder, "--yes", "--lock-timeout", "1s", "--state-dir", tmp_path
        )
        assert code == 1
        assert time.monotonic() - started >= 1.0, "it waited for the holder"
        assert "waited 1 s" in err
    finally:
        lock.release()
    assert read_lab(Path(own_lab.dir)) is not None


def test_a_vm_shut_down_while_its_move_waits_is_skipped_named_and_exit_3(
    own_lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, state = own_lab.cluster_dir, tmp_path / "state"
    _one_at_a_time(folder)
    code, out, err = reconciler(capsys, "plan", folder, "--format", "json", "--state-dir", state)
    assert code == 2, err
    moves = json.loads(out)["moves"]
    assert len(moves) >= 2
    first, second = moves[0], moves[1]
    proc = _apply_process(folder, state)
    _wait_for_line(proc, f"migrating {first['vm']}")
    host = next(h for h in own_lab.hosts if h.name == second["source"])
    conn = libvirt.open(host.uri)
    try:
        conn.lookupByName(second["vm"]).destroy()
    finally:
        conn.close()
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3, rest
    assert f"skipped {second['vm']}" in rest
    assert "NotRunning" in rest or "not running" in rest
    seen = domains(own_lab)
    assert [h for h, _, s in seen[second["vm"]]] == [second["source"]], "left where it was"
    for vm, where in seen.items():
        if vm != second["vm"]:
            assert [s for _, _, s in where] == [libvirt.VIR_DOMAIN_RUNNING], vm


def test_drain_apply_empties_the_host_and_undrain_moves_nothing_back(
    own_lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, state = own_lab.cluster_dir, tmp_path / "state"
    before = assert_sound(own_lab)
    busy = Counter(before.values()).most_common(1)[0][0]
    code, out, err = reconciler(
        capsys, "drain", busy, folder, "--apply", "--yes", "--state-dir", state
    )
    assert code == 0, out + err
    after = assert_sound(own_lab)
    assert busy not in after.values(), f"{busy} still runs VMs: {after}"
    assert reconciler(capsys, "undrain", busy, folder)[0] == 0
    assert assert_sound(own_lab) == after
