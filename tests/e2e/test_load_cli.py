"""The load over a window as a user meets it, on a test-driver lab (basis used): ``plan`` and
``observe`` say when the load is a short sample, ``apply`` makes no balance move on one unless
``--balance-on-sample``, and a fresh window ``run`` keeps is what they decide on. ``run`` itself
samples into the state directory and reports what it does not know."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconciler.adapters.files.load_samples import FileLoadSamples
from reconciler.cli import main
from reconciler.core.load_samples import HostSample, added
from reconciler.model.load import LoadSpec
from tests.e2e.test_plan_cli import reconciler
from tests.e2e.test_run_cli import REPO
from tests.net import free_port
from tests.waiting import wait_for

POLICY = (
    "apiVersion: placement/v1alpha1\nkind: BalancePolicy\nmetadata: {name: lab}\n"
    "spec:\n  mode: apply\n  basis: used\n  score: {cpu: 1, memory: 0}\n  holdRounds: 1\n"
    "  minUptime: 0s\n  cooldown: 0s\n"
)
NO_RULES = "apiVersion: placement/v1alpha1\nkind: PlacementRules\nmetadata: {name: lab}\nspec: {}\n"
NO_PLACEMENT = "apiVersion: placement/v1alpha1\nkind: Placement\nmetadata: {name: lab}\nspec: {}\n"


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    """Six VMs on kvm-01, one each on kvm-02 and kvm-03, 4 CPUs each; no rules, no placement."""
    pytest.importorskip("libvirt")
    assert main(["lab", "up", "--driver", "test", "--dir", str(tmp_path / "lab")]) == 0
    folder = tmp_path / "lab" / "cluster-state"
    (folder / "policy.yaml").write_text(POLICY)
    (folder / "rules.yaml").write_text(NO_RULES)
    (folder / "placement.yaml").write_text(NO_PLACEMENT)
    return folder


VMS = {
    "kvm-01": ["app-1", "cache-1", "db-1", "web-1", "web-2", "web-3"],
    "kvm-02": ["db-2"],
    "kvm-03": ["erp"],
}


def keep_samples(state: Path, cores: dict[str, float], *, age: float = 0.0) -> None:
    """Ten minutes of run's samples, every 30 s, ending ``age`` seconds ago."""
    spec = LoadSpec()
    end = time.time() - age
    store = None
    for k in range(21):
        at = end - 600 + 30 * k
        samples = [
            HostSample(
                host,
                at,
                tuple(
                    (vm, f"uuid-{vm}", 1, round(cores[vm] * 30 * k * 1e9))
                    for vm in vms
                    if vm in cores
                ),
            )
            for host, vms in VMS.items()
        ]
        store = added(store, "lab", spec, samples, at)
    assert store is not None
    FileLoadSamples("lab", state).save(store)


def test_a_short_sample_is_said_and_apply_balances_on_it_only_when_asked(
    lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    shown = reconciler(capsys, "plan", lab, "--state-dir", state)
    assert shown.code == 2
    assert "Load: the observation's own short CPU sample, not the 10m window: run keeps no" in (
        shown.out
    )
    assert "Balance" in shown.out  # the plan shows what balance would do on it
    looked = reconciler(capsys, "observe", lab, "--state-dir", state)
    assert "load: the observation's own short CPU sample" in looked.out
    dry = reconciler(capsys, "apply", lab, "--state-dir", state, "--dry-run")
    assert "Moves: none" in dry.out
    assert "no balance move on a short sample" in dry.out
    asked = reconciler(
        capsys, "apply", lab, "--state-dir", state, "--dry-run", "--balance-on-sample"
    )
    assert re.search(r"kvm-01 -> kvm-0[23] .* Balance", asked.out), asked.out


def test_a_fresh_window_decides_and_a_stale_one_is_a_short_sample(
    lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    # over the window kvm-01's six VMs are nearly idle: 0.6 cores of 4 against 0.5 elsewhere
    calm = {vm: 0.1 for vm in VMS["kvm-01"]} | {"db-2": 0.5, "erp": 0.5}
    keep_samples(state, calm)
    quiet = reconciler(capsys, "plan", lab, "--state-dir", state)
    assert quiet.code == 0, quiet.out
    assert "Load: mean over 10m, from samples" in quiet.out
    assert re.search(r"kvm-01 .* 15% ->  15% .*\(cpu now", quiet.out), quiet.out
    looked = reconciler(capsys, "observe", lab, "--state-dir", state)
    assert "GUESTS 10M MEAN" in looked.out
    assert re.search(r"kvm-01 .* 0\.60 ", looked.out), looked.out
    # a VM sampled for none of the window: unknown, its host left out of balance
    keep_samples(state, {k: v for k, v in calm.items() if k != "erp"})
    unknown = reconciler(capsys, "plan", lab, "--state-dir", state, "--format", "json")
    load = json.loads(unknown.out)["load"]
    assert load["unknownVms"] == ["erp"]
    assert load["unknownHosts"] == ["kvm-03"]
    # run stopped sampling an hour ago: a short sample again
    keep_samples(state, calm, age=3600)
    stale = reconciler(capsys, "plan", lab, "--state-dir", state)
    assert "run's last sample in" in stale.out
    assert "is 1h old" in stale.out


def test_run_samples_into_the_state_directory_and_reports_what_it_cannot_know(
    lab: Path, tmp_path: Path
) -> None:
    (lab / "policy.yaml").write_text(
        POLICY.replace("mode: apply", "mode: observe")
        + "  interval: 2s\n  load: {window: 20s, sampleEvery: 1s}\n"
    )
    state = tmp_path / "state"
    port = free_port()
    log = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reconciler",
            "run",
            str(lab),
            "--state-dir",
            str(state),
            "--listen",
            f"127.0.0.1:{port}",
            "--log-format",
            "json",
        ],
        stderr=log,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    samples = FileLoadSamples("lab", state)
    try:
        wait_for(lambda: (s := samples.load()) is not None and s.last is not None, 60)
        first = samples.load()
        assert first is not None
        wait_for(lambda: (s := samples.load()) is not None and s.last != first.last, 30)
        status = state / "lab" / "status.json"
        wait_for(lambda: _load_known(status) is not None, 60)
        # libvirt's test driver reports no CPU time: every running VM is unknown, not idle
        known = _load_known(status)
        assert known is not None
        assert known["status"] is False
        assert known["reason"] == "WindowMissing"
        assert "8 VM(s) and 3 host(s)" in str(known["message"])
        metrics = _get(port, "/metrics")
        assert 'reconciler_load_unknown{cluster="lab",kind="vm"} 8.0' in metrics
        assert 'reconciler_load_unknown{cluster="lab",kind="host"} 3.0' in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
    assert proc.returncode == 0, (tmp_path / "run.log").read_text()[-2000:]


def _load_known(status: Path) -> dict[str, object] | None:
    try:
        data = json.loads(status.read_text())
    except (OSError, ValueError):
        return None
    found: dict[str, object] | None = next(
        (c for c in data.get("conditions", []) if c.get("type") == "LoadKnown"), None
    )
    return found


def _get(port: int, path: str) -> str:
    import httpx

    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5).text
