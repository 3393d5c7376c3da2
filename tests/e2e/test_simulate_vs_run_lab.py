"""The simulator against the real thing: ``run`` balances a lab of workload guests on the load
the lab's Prometheus measures, for ``$RECONCILER_SIM_VS_RUN_MINUTES`` minutes (20 by default)
while the guests' load shifts; then ``simulate --prometheus --since`` replays the same period
from the same start through the same policy. The moves the simulator makes must be the moves
``run`` made: the same VMs, from the same hosts to the same hosts, in the same order, each
within a round (and the move's own time) of when ``run`` made it.

What ``run`` did is judged from libvirt alone: the test reads where each VM runs every second
and derives the moves from that, never from the reconciler's records.

Marked ``long`` (20 minutes): the lab CI job's, or run by hand.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters import lab as lab_api
from reconciler.adapters.lab import Lab
from tests.e2e.test_apply_cli import assert_settled
from tests.lab_fixtures import workload_lab
from tests.net import free_port

libvirt = pytest.importorskip("libvirt")

pytestmark = [pytest.mark.lab, pytest.mark.long]

ROOT = Path(__file__).resolve().parents[2]
MINUTES = float(os.environ.get("RECONCILER_SIM_VS_RUN_MINUTES", "20"))
INTERVAL = 30
WORKLOAD = """\
defaults: {cpu: 3, dirty: 0, wss: 8}
vms:
  web-1: {cpu: 40}
  web-2: {cpu: 25}
  web-3: {cpu: 12}
"""
POLICY = """\
apiVersion: placement/v1alpha1
kind: BalancePolicy
metadata: {{name: lab}}
spec:
  mode: apply
  interval: {interval}s
  basis: used
  score: {{cpu: 1, memory: 0}}
  threshold: 12
  margin: 3
  holdRounds: 2
  hostLimit: 95
  minUptime: 0s
  cooldown: 4m
  batch: 1
  drift: adopt
  load:
    source: prometheus
    window: 1m
    statistic: mean
    sampleEvery: 15s
    prometheus: {{url: '{url}'}}
"""
# (share of the period, VM, cpu): the load shifts while run balances; two hosts, and loads
# far apart, so that each decision is clear-cut (a near tie may go either way on figures that
# differ in their last digits)
SHIFTS = ((0.35, "web-1", 2), (0.35, "db-1", 30), (0.65, "web-2", 2), (0.65, "web-1", 45))


@pytest.fixture
def metered_lab(tmp_path: Path) -> Iterator[Lab]:
    with workload_lab(tmp_path, WORKLOAD, hosts=2, vms=5, metrics=True) as lab:
        yield lab


def placement(lab: Lab) -> dict[str, str]:
    return assert_settled(lab)


def reconciler(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        check=False,
    )


def test_the_simulator_makes_the_moves_run_made_on_the_same_load(
    metered_lab: Lab, tmp_path: Path
) -> None:
    lab = metered_lab
    url = lab_api.prometheus_url(lab)
    assert url is not None
    folder = lab.cluster_dir
    (folder / "policy.yaml").write_text(POLICY.format(interval=INTERVAL, url=url))
    (folder / "rules.yaml").write_text(
        "apiVersion: placement/v1alpha1\nkind: PlacementRules\nmetadata: {name: lab}\n"
        "spec:\n  rules: []\n"
    )
    (folder / "placement.yaml").write_text(
        "apiVersion: placement/v1alpha1\nkind: Placement\nmetadata: {name: lab}\nspec:\n  vms: {}\n"
    )
    time.sleep(70)  # a window of load in Prometheus before the first round
    snapshot = tmp_path / "start.json"
    observed = reconciler("observe", str(folder), "--format", "json")
    snapshot.write_text(observed.stdout)
    before = placement(lab)
    log = tmp_path / "run.log"
    began = time.time()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "reconciler", "run", str(folder), "--state-dir",
             str(tmp_path / "state"), "--listen", f"127.0.0.1:{free_port()}"],
            stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
    real: list[tuple[float, str, str, str]] = []
    where = dict(before)
    shifts = list(SHIFTS)
    try:
        while time.time() - began < MINUTES * 60:
            elapsed = time.time() - began
            while shifts and elapsed >= shifts[0][0] * MINUTES * 60:
                _, vm, cpu = shifts.pop(0)
                lab_api.set_load(Path(lab.dir), vm, {"cpu": cpu})
            now = placement(lab)
            for vm, host in now.items():
                if where.get(vm) != host:
                    real.append((elapsed, vm, where[vm], host))
            where = now
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    ended = time.time()
    minutes = math.ceil((ended - began) / 60)
    since = f"{minutes}m"
    simulated = reconciler(
        "simulate", str(folder), "--prometheus", "--since", since, "--snapshot",
        str(snapshot), "--step", "15s", "--format", "json",
    )  # fmt: skip
    assert simulated.returncode == 0, simulated.stderr
    (figures,) = json.loads(simulated.stdout)["policies"]
    offset = (ended - 60 * minutes) - began  # the trace starts this far from run's start
    sim = [(m["at"] + offset, m["vm"], m["source"], m["target"]) for m in figures["moves"]]
    report = (
        f"run (from libvirt): {[(round(t), v, s, d) for t, v, s, d in real]}\n"
        f"simulate:           {[(round(t), v, s, d) for t, v, s, d in sim]}"
    )
    print(report)
    (tmp_path / "compare.txt").write_text(report + "\n")
    assert real, f"run made no move: the scenario shows nothing\n{log.read_text()[-3000:]}"
    assert [m[1:] for m in sim] == [m[1:] for m in real], report
    for (t_sim, *_), (t_real, *_), m in zip(sim, real, figures["moves"], strict=True):
        assert abs(t_sim - t_real) <= INTERVAL + m["seconds"] + 5, report
