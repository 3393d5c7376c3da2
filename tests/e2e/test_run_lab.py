"""``reconciler run`` with ``mode: apply`` on a real lab: it balances on its own, acts on a
placement edit within seconds, exposes its metrics, and a standby takes over when the active
instance is killed. Afterwards every VM runs exactly once, unpaused, defined where it runs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.adapters.files.text import rewrite_file
from reconciler.adapters.lab import Lab
from reconciler.config.yaml_edit import set_placement
from tests.e2e.test_apply_cli import assert_settled, assert_sound, domains
from tests.net import free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.lab
pytest.importorskip("libvirt")

ROOT = Path(__file__).resolve().parents[2]


def running_on(lab: Lab, vm: str) -> list[str]:
    """Hosts where ``vm`` runs now (mid-migration the incoming copy is paused, not running)."""
    import libvirt

    return [h for h, _, state in domains(lab).get(vm, []) if state == libvirt.VIR_DOMAIN_RUNNING]


def settled(lab: Lab) -> bool:
    """Whether no migration is in flight: what ``assert_sound`` checks, without raising."""
    try:
        assert_sound(lab)
    except AssertionError:
        return False
    return True


def start(folder: Path, state: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reconciler",
                "run",
                str(folder),
                "--state-dir",
                str(state),
                "--listen",
                f"127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def metric(port: int, name: str, labels: str = "") -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    total = None
    for line in text.splitlines():
        if line.startswith(name) and labels in line and not line.startswith("#"):
            m = re.match(rf"{name}(\{{[^}}]*\}})? (\S+)", line)
            if m:
                total = (total or 0.0) + float(m.group(2))
    return total


def wait_until(what: str, check: Callable[[], bool], timeout: float, log: Path) -> float:
    """``wait_for`` with the end of the run's ``log`` in its failure."""
    return wait_for(check, timeout, what, every=0.25, context=lambda: log.read_text()[-3000:])


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    return proc.wait(timeout=120)


def mode_apply(folder: Path, **spec: str) -> None:
    """The lab's policy with mode apply, no windows (always), and these spec lines replaced."""
    policy = folder / "policy.yaml"
    text = re.sub(r"(?m)^  mode: \w+", "  mode: apply", policy.read_text())
    text = re.sub(r"(?ms)^  windows:.*?(?=^  \w|\Z)", "", text)  # always, not in a window
    for key, value in spec.items():
        text = re.sub(rf"(?m)^  {key}: .*$", f"  {key}: {value}", text)
    assert "mode: apply" in text
    assert "windows" not in text
    policy.write_text(text)


def test_run_balances_the_lab_follows_an_edit_and_a_standby_takes_over(
    own_lab: Lab, tmp_path: Path
) -> None:
    folder, state, log = own_lab.cluster_dir, tmp_path / "state", tmp_path / "run.log"
    mode_apply(folder)
    first_port, second_port = free_port(), free_port()
    first = start(folder, state, first_port, log)
    second: subprocess.Popen[bytes] | None = None
    try:
        wait_until(
            "the first instance leads",
            lambda: metric(first_port, "reconciler_leader") == 1,
            60,
            log,
        )
        # It balances on its own: migrations succeed, then a plan has nothing left to do, with
        # no migration in flight around it (a plan does not count a VM that is on its way).
        wait_until(
            "balanced by migrations",
            lambda: (metric(first_port, "reconciler_migrations_total", 'outcome="succeeded"') or 0)
            > 0
            and settled(own_lab)
            and subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "reconciler",
                    "plan",
                    str(folder),
                    "--state-dir",
                    str(tmp_path / "plan-state"),
                ],
                capture_output=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                check=False,
            ).returncode
            == 0
            and settled(own_lab),
            180,
            log,
        )
        for name in (
            "reconciler_reconciles_total",
            "reconciler_spread",
            "reconciler_host_score",
            "reconciler_host_reachable",
            "reconciler_host_last_observed_timestamp_seconds",
        ):
            assert metric(first_port, name) is not None, name
        where = assert_sound(own_lab)
        # A placement edit is acted on within seconds, not at the next interval.
        vm, host = sorted(where.items())[0]
        target = next(h.name for h in own_lab.hosts if h.name != host)
        rewrite_file(folder / "placement.yaml", lambda t: set_placement(t, {vm: target}))
        took = wait_until(
            f"{vm} moved to {target}", lambda: running_on(own_lab, vm) == [target], 60, log
        )
        assert took < 30
        # A second instance stands by, and takes over when the first is killed.
        second = start(folder, state, second_port, log)
        wait_until(
            "the standby answers", lambda: metric(second_port, "reconciler_leader") == 0, 60, log
        )
        stop(first, signal.SIGKILL)
        wait_until(
            "the standby leads", lambda: metric(second_port, "reconciler_leader") == 1, 30, log
        )
        assert stop(second) == 0
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert_settled(own_lab)  # the first was killed, perhaps mid-migration


def test_sigterm_mid_migration_lets_it_finish_and_every_vm_runs_once(
    own_lab: Lab, tmp_path: Path
) -> None:
    folder, state, log = own_lab.cluster_dir, tmp_path / "state", tmp_path / "run.log"
    mode_apply(folder, parallel="{cluster: 1}")
    proc = start(folder, state, free_port(), log)
    try:
        wait_until("a migration starts", lambda: "migrating " in log.read_text(), 90, log)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert_sound(own_lab)
    text = log.read_text()
    started = text.count("migrating ")
    ended = len(re.findall(r"\b(succeeded|failed|aborted) \S+: ", text))
    assert started == ended, "every migration that started was let finish and recorded"
