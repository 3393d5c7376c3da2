"""Rollouts carried out by ``reconciler run`` on a real lab, judged from libvirt, git and the
commands' own marks.

The per-host command (``rollout_lab_command.py``) writes a timestamped mark and restarts that
lab host's libvirtd, its "reboot". While the rollout runs, a sampler looks at every host
through libvirt a few times a second and notes which VMs run where.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.adapters.lab import Lab
from tests.e2e.test_apply_cli import assert_settled
from tests.e2e.test_run_lab import metric, wait_until
from tests.gitrepos import git, state_remote
from tests.net import free_port

pytestmark = [pytest.mark.lab, pytest.mark.long]
libvirt = pytest.importorskip("libvirt")

ROOT = Path(__file__).resolve().parents[2]
COMMAND = Path(__file__).with_name("rollout_lab_command.py")
HOSTS = ("kvm-01", "kvm-02", "kvm-03")
TRAILERS = (
    "%(trailers:key=Reconciler-Rollout-Host,key=Reconciler-Rollout-Step,"
    "key=Reconciler-Rollout-Outcome,valueonly,separator=%x20)"
)


def policy() -> str:
    return (
        "apiVersion: placement/v1alpha1\nkind: BalancePolicy\nmetadata: {name: lab}\n"
        "spec: {mode: apply, interval: 10m, threshold: 100, minUptime: 0s, basis: allocated}\n"
    )


def rollout(
    marks: Path,
    lab: Lab,
    *,
    checks: str = "[]",
    ready_timeout: str = "1m",
    hosts: tuple[str, ...] = HOSTS,
) -> str:
    argv = [sys.executable, str(COMMAND), str(marks), str(lab.dir), "{host}"]
    return (
        "apiVersion: placement/v1alpha1\nkind: Rollout\nmetadata: {name: patch}\nspec:\n"
        f"  hosts: [{', '.join(hosts)}]\n"
        "  eachHost:\n"
        "    commands:\n"
        "      - name: reboot-daemon\n"
        f"        argv: {json.dumps(argv)}\n"
        f"        env: {{PYTHONPATH: {json.dumps(str(ROOT))}}}\n"
        "        timeout: 60s\n"
        "        safeToRepeat: false\n"
        f"    ready: {{timeout: {ready_timeout}, interval: 1s, settle: 3s, checks: {checks}}}\n"
    )


def folder_of(lab: Lab, tmp_path: Path, marks: Path, *, pinned: str | None, **kw: Any) -> Path:
    """The lab's cluster folder with the rollout, mode apply, no balance, no placement, and
    ``pinned`` (a VM on kvm-01) pinned there."""
    folder = tmp_path / "cluster-state"
    shutil.copytree(lab.cluster_dir, folder)
    (folder / "policy.yaml").write_text(policy())
    (folder / "placement.yaml").write_text(
        "apiVersion: placement/v1alpha1\nkind: Placement\nmetadata: {name: lab}\nspec: {vms: {}}\n"
    )
    rules = f"[{{name: keep, type: pin, vms: {{names: [{pinned}]}}, hosts: {{names: [kvm-01]}}}}]"
    (folder / "rules.yaml").write_text(
        "apiVersion: placement/v1alpha1\nkind: PlacementRules\nmetadata: {name: lab}\n"
        f"spec: {{rules: {rules if pinned is not None else '[]'}}}\n"
    )
    (folder / "rollouts").mkdir()
    (folder / "rollouts" / "patch.yaml").write_text(rollout(marks, lab, **kw))
    return folder


class Sampler:
    """Which VMs run on which host, looked at through libvirt until stopped: (time, host,
    running VMs) for every host that answered."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.samples: list[tuple[float, str, tuple[str, ...]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for host in self.lab.hosts:
                at = time.time()
                try:
                    conn = libvirt.open(host.uri)
                except libvirt.libvirtError:
                    continue  # restarting: it runs no VM the rollout did not drain
                try:
                    running = tuple(sorted(d.name() for d in conn.listAllDomains() if _runs(d)))
                except libvirt.libvirtError:
                    continue
                finally:
                    conn.close()
                self.samples.append((at, host.name, running))
            self._stop.wait(0.2)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def running_on(self, host: str, start: float, end: float) -> set[str]:
        return {vm for at, h, vms in self.samples if h == host and start <= at <= end for vm in vms}


def _runs(dom: Any) -> bool:
    try:
        return bool(dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING)
    except libvirt.libvirtError:
        return False


def read_marks(marks: Path) -> list[tuple[str, str, float]]:
    if not marks.exists():
        return []
    out = []
    for line in marks.read_text().splitlines():
        host, what, at = line.split()
        out.append((host, what, float(at)))
    return out


def spans(marks: Path) -> dict[str, tuple[float, float]]:
    found = read_marks(marks)
    starts = {h: at for h, what, at in found if what == "start"}
    ends = {h: at for h, what, at in found if what == "end"}
    return {h: (starts[h], ends[h]) for h in starts if h in ends}


def records(person: Path) -> list[tuple[str, str, str, float]]:
    """(host, step, outcome, unix time) of every rollout commit on main, oldest first."""
    git(person, "fetch", "-q", "origin")
    out = []
    log = git(person, "log", "--reverse", "origin/main", f"--format=%ct {TRAILERS}")
    for line in log.splitlines():
        parts = line.split()
        if len(parts) == 4:
            at, host, step, outcome = parts
            out.append((host, step, outcome, float(at)))
    return out


def run(folder: Path, *extra: str, log: Path, port: int) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reconciler",
                "run",
                *extra,
                "--listen",
                f"127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=folder.parent,
        )


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_rollout_patches_every_host_once_survives_a_kill_and_records_every_step(
    own_lab: Lab, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    marks = tmp_path / "marks"
    folder = folder_of(
        own_lab, tmp_path, marks, pinned=None, checks='[{name: up, argv: ["true"], timeout: 10s}]'
    )
    before = assert_settled(own_lab)
    (tmp_path / "git").mkdir()
    url, person = state_remote(tmp_path / "git", folder)
    log = tmp_path / "run.log"

    def instance(name: str) -> tuple[subprocess.Popen[bytes], int]:
        port = free_port()
        proc = run(
            folder,
            "--repo",
            url,
            "--cache-dir",
            str(tmp_path / name / "cache"),
            "--state-dir",
            str(tmp_path / name / "state"),
            "--identity",
            name,
            log=log,
            port=port,
        )
        procs.append(proc)
        return proc, port

    def recorded(host: str, step: str, outcome: str) -> Callable[[], bool]:
        return lambda: any(r[:3] == (host, step, outcome) for r in records(person))

    with Sampler(own_lab) as sampler:
        first, first_port = instance("a")
        wait_until("a leads", lambda: metric(first_port, "reconciler_leader") == 1, 60, log)
        _, second_port = instance("b")
        wait_until("b stands by", lambda: metric(second_port, "reconciler_leader") == 0, 60, log)
        # in the middle of kvm-02's steps: its command done, not yet given back
        wait_until(
            "kvm-02's command recorded",
            recorded("kvm-02", "command/reboot-daemon", "succeeded"),
            240,
            log,
        )
        first.send_signal(signal.SIGKILL)
        first.wait()
        wait_until("b leads", lambda: metric(second_port, "reconciler_leader") == 1, 60, log)
        wait_until("kvm-03 given back", recorded("kvm-03", "undrain", "succeeded"), 240, log)
    steps = records(person)
    # every host marked once, in order, one at a time
    found = read_marks(marks)
    assert [(h, w) for h, w, _ in found] == [(h, w) for h in HOSTS for w in ("start", "end")]
    worked = spans(marks)
    undrained = {h: at for h, s, o, at in steps if s == "undrain" and o == "succeeded"}
    drained = {h: at for h, s, o, at in steps if s == "drain" and o == "started"}
    for host in HOSTS:
        start, _ = worked[host]
        # no VM ran on the host between its mark's start and its being given back (the commit
        # time is whole seconds: a second of margin, taken against the rollout)
        assert sampler.running_on(host, start, undrained[host] - 1) == set(), host
        assert sampler.samples, "the sampler looked"
    order = [drained[h] for h in HOSTS]
    for a, b in itertools.pairwise(HOSTS):
        assert undrained[a] <= drained[b], f"{b} was taken out before {a} was given back"
    assert order == sorted(order)
    # every step of every host in git, begun and ended
    for host in HOSTS:
        mine = [(s, o) for h, s, o, _ in steps if h == host]
        assert mine == [
            ("drain", "started"),
            ("drain", "succeeded"),
            ("command/reboot-daemon", "started"),
            ("command/reboot-daemon", "succeeded"),
            ("ready", "started"),
            ("ready", "passed"),
            ("ready", "succeeded"),
            ("undrain", "succeeded"),
        ], host
    # the standby took over where a left off: both wrote records, none twice
    git(person, "pull", "-q", "origin", "main")
    progress = json.loads(
        (person / "cluster-state" / "rollouts" / "patch.progress.json").read_text()
    )
    assert {r["by"] for r in progress["records"]} == {"a", "b"}
    # every VM runs exactly once, as many as before
    after = assert_settled(own_lab)
    assert sorted(after) == sorted(before)


def test_a_pinned_vm_named_before_anything_starts_a_failing_check_stops_at_the_second_host(
    own_lab: Lab, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    marks = tmp_path / "marks"
    check = "[{name: not-kvm-02, argv: [sh, -c, 'test \"$0\" != kvm-02', '{host}'], timeout: 5s}]"
    on_01 = sorted(vm for vm, host in assert_settled(own_lab).items() if host == "kvm-01")
    assert on_01, "the lab puts VMs on kvm-01"
    pinned = on_01[0]
    # kvm-03 first, the failing check on kvm-02 second, kvm-01 (its VM pinned) third
    order = ("kvm-03", "kvm-02", "kvm-01")
    folder = folder_of(
        own_lab, tmp_path, marks, pinned=pinned, checks=check, ready_timeout="8s", hosts=order
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    state = tmp_path / "state"

    def reconciler(*args: str, options: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        command = [*args, str(folder), "--state-dir", str(state), *options]
        return subprocess.run(
            [sys.executable, "-m", "reconciler", *command],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )

    plan = reconciler("rollout", "plan", "patch")
    assert plan.returncode == 3, plan.stdout + plan.stderr
    assert (
        f"   blocked: {pinned} is pinned to kvm-01 by rule keep (immovable.action: block)"
        in plan.stdout.splitlines()
    )
    assert "blocked at kvm-01" in plan.stdout
    assert not marks.exists(), "a plan starts nothing"
    daemon_01 = (Path(own_lab.host("kvm-01").path) / "libvirtd.pid").read_text()

    log, port = tmp_path / "run.log", free_port()
    procs.append(run(folder, str(folder), "--state-dir", str(state), log=log, port=port))
    wait_until(
        "the rollout stops",
        lambda: metric(port, "reconciler_rollout_phase", 'phase="Stopped"') == 1,
        240,
        log,
    )
    status = reconciler("rollout", "status", "patch", options=("--format", "json"))
    assert status.returncode == 3, status.stderr
    data = json.loads(status.stdout)
    assert (data["phase"], data["stoppedHost"], data["stoppedAt"]["step"]) == (
        "Stopped",
        "kvm-02",
        "ready",
    )
    assert data["out"] == ["kvm-02"]
    # the host stays drained; kvm-01, the third, was never touched
    time.sleep(3)
    conn = libvirt.open(own_lab.host("kvm-02").uri)
    try:
        assert [d.name() for d in conn.listAllDomains() if _runs(d)] == []
    finally:
        conn.close()
    assert [h for h, _, _ in read_marks(marks)] == ["kvm-03", "kvm-03", "kvm-02", "kvm-02"]
    assert (Path(own_lab.host("kvm-01").path) / "libvirtd.pid").read_text() == daemon_01
    assert metric(port, "reconciler_rollout_hosts_out", 'rollout="patch"') == 1
    assert_settled(own_lab)
