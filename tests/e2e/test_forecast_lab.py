"""A daily peak met before it comes, on the lab: ``statistic: forecast`` with a seasonal
``period`` of 10 minutes, a day compressed as ``lab load --schedule`` plays it.

Two lab hosts and three workload guests with the lab's Prometheus (``lab up --workload
--metrics``). ``web-1`` follows a schedule (the code ``lab load --schedule`` runs, in a thread):
10% of its vCPU, 95% from the 4th to the 7th minute of every 10. ``web-2`` (30%) shares its
host, ``web-3`` (30%) is on the other: the hosts are within the threshold except at the peak,
which a guest leaving kvm-01 meets (``web-2``, or ``web-1`` itself before its peak).
``reconciler run`` in apply mode on the lab's Prometheus (``basis: used``, ``statistic:
forecast``, ``period: 10m``, ``history: 1h``, ``horizon: 3m``, ``weight: 1``) for three
cycles; after each of the first two peaks a person puts every guest back where it started
(placement.yaml, which run carries out).

- Cycle 1: web-1 has too little history for a forecast (less than two periods): balance reads
  the window and moves a guest only once the peak has begun (the control).
- Cycle 3: with two periods of history the forecast sees the peak in the next 3 minutes, and a
  balance move is made BEFORE the peak begins: within the horizon of it (not earlier, which
  would be noise) and before web-1's CPU rises (Prometheus's figures of it). ``plan --format
  json`` on the same folder, run meanwhile, lists that very move in ``load.ahead``.

Judged from libvirt (where each guest runs, looked at every second) and from Prometheus's
figures of the guests' CPU, never from the reconciler's own records. Marked ``long``: about 35
minutes (the lab's boot, three 10-minute cycles).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from reconciler.adapters import lab as lab_api
from reconciler.adapters.lab import Lab
from reconciler.adapters.lab.metrics import prometheus_url
from reconciler.adapters.lab.workload import follow, parse_schedule
from reconciler.adapters.prometheus.client import PrometheusClient
from reconciler.model.load import PrometheusSpec
from tests.e2e.test_apply_cli import assert_settled, domains
from tests.lab_fixtures import migrate_plainly, workload_lab
from tests.net import free_port

pytestmark = [pytest.mark.lab, pytest.mark.long]
libvirt = pytest.importorskip("libvirt")

ROOT = Path(__file__).resolve().parents[2]
PERIOD = 600
PEAK_FROM, PEAK_TO = 250, 420
"""Seconds into each cycle the peak holds (a 10-second rise from 240 s)."""
SCHEDULE = "0s:10,240s:10,250s:95,420s:95,430s:10,600s:10"
CYCLES = 3
HORIZON = 180
PUT_BACK = 550
"""Seconds into cycles 1 and 2 the person puts the guests back: after the peak has left the
window, before the next cycle."""
PEAKY, SHARING, OTHER = "web-1", "web-2", "web-3"
START = {PEAKY: "kvm-01", SHARING: "kvm-01", OTHER: "kvm-02"}
WORKLOAD = f"""\
defaults: {{cpu: 0, dirty: 0, wss: 16}}
vms:
  {PEAKY}: {{cpu: 10}}
  {SHARING}: {{cpu: 30}}
  {OTHER}: {{cpu: 30}}
"""
INTERVAL = 15
POLICY = """\
apiVersion: placement/v1alpha1
kind: BalancePolicy
metadata: {{name: lab}}
spec:
  mode: apply
  interval: {interval}s
  basis: used
  score: {{cpu: 1, memory: 0}}
  threshold: 15
  margin: 2
  holdRounds: 2
  hostLimit: 100
  minUptime: 0s
  cooldown: 20s
  batch: 2
  load:
    source: prometheus
    window: 1m
    sampleEvery: 5s
    statistic: forecast
    prometheus: {{url: '{url}', timeout: 5s}}
    forecast: {{period: 10m, history: 1h, horizon: 3m, weight: 1}}
"""
RULES = "apiVersion: placement/v1alpha1\nkind: PlacementRules\nmetadata: {name: lab}\nspec: {}\n"
STREAK = json.dumps(
    {
        "apiVersion": "placement/v1alpha1",
        "kind": "History",
        "imbalanceRounds": {"x86_64": 99, "aarch64": 99},
    }
)
"""For plan: the imbalance seen for rounds already, so that plan balances whenever the hosts
are over the threshold, as run does once holdRounds have passed (plan alone counts no round)."""


def placement(where: dict[str, str]) -> str:
    listed = "".join(f"    {vm}: {host}\n" for vm, host in sorted(where.items()))
    return (
        "apiVersion: placement/v1alpha1\nkind: Placement\nmetadata: {name: lab}\n"
        f"spec:\n  vms:\n{listed}"
    )


@pytest.fixture
def cyclic_lab(tmp_path: Path) -> Iterator[Lab]:
    with workload_lab(tmp_path, WORKLOAD, hosts=2, vms=3, metrics=True) as lab:
        where = assert_settled(lab)
        for vm, host in sorted(START.items()):
            if where[vm] != host:
                migrate_plainly(lab, vm, where[vm], host)
        assert assert_settled(lab) == START
        yield lab


# --- what libvirt and Prometheus say ---------------------------------------------------------


def where(lab: Lab) -> dict[str, str]:
    """VM -> the host it runs on, or "moving" while a migration is in flight."""
    seen = domains(lab)
    out = {}
    for vm in START:
        hosts = [h for h, _, state in seen.get(vm, []) if state == libvirt.VIR_DOMAIN_RUNNING]
        out[vm] = hosts[0] if len(hosts) == 1 else "moving"
    return out


def cpu(url: str, vm: str, start: float, end: float) -> list[tuple[float, float]]:
    """``vm``'s CPU in cores from Prometheus, every 5 s (the lab scrapes every 5 s): the
    largest of its series at each instant (one per host it ran on)."""
    query = f'irate(libvirt_domain_info_cpu_time_seconds_total{{domain="{vm}"}}[30s])'
    spec = PrometheusSpec.model_validate({"url": url, "timeout": "20s"})
    with PrometheusClient(spec) as client:
        series = client.range_query(query, start=start, end=end, step=5)
    points: dict[float, float] = {}
    for s in series:
        for t, v in s.points:
            points[t] = max(v, points.get(t, 0.0))
    return sorted(points.items())


def rise(points: list[tuple[float, float]], began: float) -> tuple[float, float, float]:
    """When the cycle that began at ``began`` rose to its peak, from ``points``: the first
    instant past the middle of its trough (before the peak) and its peak; (when, trough,
    peak)."""

    def median(lo: float, hi: float) -> float:
        got = sorted(v for t, v in points if began + lo <= t < began + hi)
        assert got, f"Prometheus has no figure of {PEAKY} {lo:g}-{hi:g} s into the cycle"
        return got[len(got) // 2]

    trough, peak = median(30, 200), median(PEAK_FROM + 60, PEAK_TO)
    if peak < trough + 0.2:
        pytest.fail(
            f"{PEAKY} never reached its peak: {trough:.2f} cores before it, {peak:.2f} in it "
            "(this machine too busy to run the guest's schedule)"
        )
    middle = (trough + peak) / 2
    when = next((t for t, v in points if began + 200 <= t and v > middle), None)
    assert when is not None, f"{PEAKY} never rose past {middle:.2f} cores in the cycle"
    return when, trough, peak


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Moves:
    """What libvirt showed, looked at every second: (time, where) at each change."""

    changes: list[tuple[float, dict[str, str]]] = field(default_factory=list)

    def look(self, lab: Lab) -> dict[str, str]:
        now = where(lab)
        if not self.changes or self.changes[-1][1] != now:
            self.changes.append((time.time(), now))
        return now

    def first_off_start(self, lo: float, hi: float) -> tuple[float, str, str, str] | None:
        """The first guest seen off its start host between ``lo`` and ``hi``: (when, VM,
        from, to)."""
        for at, now in self.changes:
            if lo <= at < hi:
                for vm, host in sorted(now.items()):
                    if host not in (START[vm], "moving"):
                        return at, vm, START[vm], host
        return None


@dataclass
class Plans:
    """``plan --format json`` run again and again from ``since`` until ``until`` (or a move is
    seen): (began, ended, its JSON or the error it gave)."""

    folder: Path
    state: Path
    history: Path
    since: float
    until: float
    done: threading.Event = field(default_factory=threading.Event)
    seen: list[tuple[float, float, dict[str, Any] | str]] = field(default_factory=list)

    def run(self) -> None:
        while not self.done.is_set() and time.time() < self.until:
            if time.time() < self.since:
                self.done.wait(1)
                continue
            began = time.time()
            argv = [sys.executable, "-m", "reconciler", "plan", str(self.folder),
                    "--state-dir", str(self.state), "--history", str(self.history),
                    "--format", "json"]  # fmt: skip
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            try:
                out = subprocess.run(argv, capture_output=True, timeout=90, env=env, check=False)
            except subprocess.TimeoutExpired:
                self.seen.append((began, time.time(), "plan took over 90 s"))
                continue
            try:
                got: dict[str, Any] | str = (
                    json.loads(out.stdout)
                    if out.returncode in (0, 2)
                    else f"plan exited {out.returncode}: {out.stderr.decode()[-2000:]}"
                )
            except ValueError as err:
                got = f"plan's JSON unreadable: {err}"
            self.seen.append((began, time.time(), got))

    def ahead(self, before: float) -> list[tuple[float, dict[str, Any]]]:
        """The moves plans begun before ``before`` listed as made ahead of time."""
        return [
            (began, move)
            for began, _, got in self.seen
            if began < before and isinstance(got, dict)
            for move in (got.get("load") or {}).get("ahead") or []
        ]


def start_run(folder: Path, state: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "reconciler", "run", str(folder), "--state-dir", str(state),
            "--listen", f"127.0.0.1:{free_port()}"]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)


def stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait(10)


def test_the_peak_of_a_10_minute_day_is_met_by_a_move_before_it_begins(
    cyclic_lab: Lab, tmp_path: Path
) -> None:
    lab = cyclic_lab
    url = prometheus_url(lab)
    assert url, "the lab runs its Prometheus"
    folder = tmp_path / "folder"
    shutil.copytree(lab.cluster_dir, folder)
    (folder / "policy.yaml").write_text(POLICY.format(interval=INTERVAL, url=url))
    (folder / "rules.yaml").write_text(RULES)
    (folder / "placement.yaml").write_text(placement(START))
    history = tmp_path / "streak.json"
    history.write_text(STREAK)
    state, log = tmp_path / "state", tmp_path / "run.log"

    # web-1 follows the schedule, as `reconciler lab load web-1 --schedule ...` does
    schedule = parse_schedule(SCHEDULE)
    assert schedule.period == PERIOD
    stopped = threading.Event()
    told: list[tuple[float, dict[str, int | str]]] = []

    def tell(settings: dict[str, int | str]) -> None:
        lab_api.set_load(Path(lab.dir), PEAKY, settings)
        told.append((time.time(), settings))

    def sleep(seconds: float) -> None:
        stopped.wait(seconds)
        if stopped.is_set():
            raise InterruptedError

    def follow_schedule() -> None:
        with contextlib.suppress(InterruptedError):  # the test ended early
            follow(schedule, tell, clock=time.time, sleep=sleep, cycles=CYCLES)

    t0 = time.time()
    cycles = [t0 + k * PERIOD for k in range(CYCLES)]
    follower = threading.Thread(target=follow_schedule, name="schedule", daemon=True)
    follower.start()
    third = cycles[2]
    plans = Plans(folder, state, history, since=third + 30, until=third + PEAK_FROM)
    planner = threading.Thread(target=plans.run, name="plan", daemon=True)
    moves = Moves()
    proc = start_run(folder, state, log)
    put_back = [False] * (CYCLES - 1)
    try:
        planner.start()
        end = t0 + CYCLES * PERIOD
        while time.time() < end:
            assert proc.poll() is None, f"run ended: {log.read_text()[-3000:]}"
            now = moves.look(lab)
            k = int((time.time() - t0) // PERIOD)
            into = time.time() - t0 - k * PERIOD
            if k < CYCLES - 1 and into >= PUT_BACK and not put_back[k]:
                # a person puts every guest back where it started: run carries it out
                (folder / "placement.yaml").write_text(placement(START))
                put_back[k] = True
            if k == CYCLES - 1 and now != START and "moving" not in now.values():
                plans.done.set()  # the move is made: plan would see a balanced cluster
            time.sleep(max(0.0, 1.0 - (time.time() % 1.0)))
    finally:
        stopped.set()
        plans.done.set()
        code = stop(proc)
        follower.join(30)
        planner.join(120)
    assert code == 0, log.read_text()[-3000:]
    assert_settled(lab)
    assert len(told) >= 5 * CYCLES - 1, told  # every segment of every cycle was told

    figures = cpu(url, PEAKY, t0 - 60, time.time())
    # cycle 1, no forecast (less than two periods of history): a move once the peak has come
    rose1, trough, peak = rise(figures, cycles[0])
    first = moves.first_off_start(cycles[0], cycles[0] + PUT_BACK)
    assert first is not None, (
        f"no balance move in the first peak ({trough:.2f} -> {peak:.2f} cores): "
        f"{moves.changes}\n{log.read_text()[-3000:]}"
    )
    assert first[0] >= rose1, (
        f"a move {rose1 - first[0]:.0f} s before the first peak, with no forecast yet: the "
        f"hosts are not balanced outside the peak ({first})"
    )
    # the guests were put back before the third cycle
    settled = [now for at, now in moves.changes if at < third]
    assert settled[-1] == START, moves.changes

    # cycle 3: the move comes before the peak, within the horizon of it
    rose3, trough, peak = rise(figures, third)
    made = moves.first_off_start(third, third + PEAK_TO)
    assert made is not None, f"no move in the third cycle: {moves.changes}"
    at, vm, source, target = made
    peak_at = third + PEAK_FROM - 10  # the schedule's rise begins
    assert (
        third + PEAK_FROM - 10 - HORIZON - 30 < at
    ), f"a move {third + PEAK_FROM - at:.0f} s before the peak: earlier than its horizon"
    assert at < peak_at, f"the move came {at - peak_at:.0f} s after the peak began: {made}"
    assert at < rose3, f"the move came {at - rose3:.0f} s after web-1's CPU rose: {made}"
    # a guest leaves the host where the peak comes: web-2, or web-1 itself before its peak
    assert source == START[PEAKY], made
    assert vm in (PEAKY, SHARING), made
    # plan, meanwhile, listed that move as made ahead of time
    listed = plans.ahead(before=at)
    assert any(
        (m["vm"], m["source"], m["target"]) == (vm, source, target) for _, m in listed
    ), f"no plan before the move listed it in load.ahead: {plans.seen}"
    errors = [got for _, _, got in plans.seen if isinstance(got, str)]
    assert not errors, errors
    first_listed = min(began for began, m in listed if m["vm"] == vm)
    print(
        f"cycle 1: web-1 rose at +{rose1 - cycles[0]:.0f} s, moved at +{first[0] - cycles[0]:.0f}"
        f" s ({first[1]}); cycle 3: rose at +{rose3 - third:.0f} s, {vm} moved "
        f"{source} -> {target} at +{at - third:.0f} s ({rose3 - at:.0f} s before the rise), "
        f"plan listed it ahead at +{first_listed - third:.0f} s; web-1 {trough:.2f} -> "
        f"{peak:.2f} cores; {len(plans.seen)} plans; "
        f"{timedelta(seconds=round(time.time() - t0))} in all"
    )
