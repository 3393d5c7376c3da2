"""``reconciler run`` as a user runs it: processes, a watched folder, HTTP, a standby, signals.

Hosts are libvirt's test driver, so these run wherever libvirt-python is installed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.net import free_port
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
CLUSTER = (
    "apiVersion: placement/v1alpha1\nkind: Cluster\nmetadata: {name: live}\n"
    "spec:\n  hosts:\n    - {name: node-1, uri: 'test:///default'}\n"
)
POLICY = (
    "apiVersion: placement/v1alpha1\nkind: BalancePolicy\nmetadata: {name: p}\n"
    "spec: {mode: observe, interval: 1h}\n"
)


class Instance:
    def __init__(self, folder: Path, state: Path, logs: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = logs.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reconciler",
                "run",
                str(folder),
                "--state-dir",
                str(state),
                "--listen",
                f"127.0.0.1:{self.port}",
                "--log-format",
                "json",
            ],
            stderr=self.log,
            stdout=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )

    def get(self, path: str) -> httpx.Response | None:
        try:
            return httpx.get(self.url + path, timeout=2)
        except httpx.TransportError:
            return None

    def metric(self, line: str) -> bool:
        r = self.get("/metrics")
        return r is not None and line in r.text

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()


@pytest.fixture
def cluster(tmp_path: Path) -> tuple[Path, Path]:
    pytest.importorskip("libvirt")
    folder = tmp_path / "cluster"
    folder.mkdir()
    (folder / "cluster.yaml").write_text(CLUSTER)
    (folder / "policy.yaml").write_text(POLICY)
    return folder, tmp_path / "state"


def _rounds(state: Path) -> int:
    try:
        return int(json.loads((state / "live" / "status.json").read_text())["rounds"])
    except (OSError, ValueError, KeyError):
        return 0


def test_run_reacts_to_edits_stalls_on_an_invalid_policy_and_exits_0_on_sigterm(
    cluster: tuple[Path, Path], tmp_path: Path
) -> None:
    folder, state = cluster
    one = Instance(folder, state, tmp_path / "one.log")
    try:
        wait_for(lambda: _rounds(state) >= 1)
        # the status file is written in the round, the metrics and /healthz just after it
        wait_for(lambda: one.metric('reconciler_host_reachable{cluster="live",host="node-1"} 1.0'))
        assert one.metric('reconciler_leader{cluster="live"} 1.0')
        r = one.get("/healthz")
        assert r is not None
        assert r.status_code == 200
        # an edit is acted on within seconds, not at the next interval (1 h)
        before = _rounds(state)
        (folder / "policy.yaml").write_text(POLICY.replace("interval: 1h", "interval: 2h"))
        latency = wait_for(lambda: _rounds(state) > before, timeout=10)
        assert latency < 10
        (folder / "policy.yaml").write_text(POLICY.replace("mode: observe", "mode: aply"))
        wait_for(lambda: (x := one.get("/healthz")) is not None and x.status_code == 503)
        r = one.get("/healthz")
        assert r is not None
        assert "aply" in r.json()["message"]
        (folder / "policy.yaml").write_text(POLICY)
        wait_for(lambda: (x := one.get("/healthz")) is not None and x.status_code == 200)
        one.proc.send_signal(signal.SIGTERM)
        assert one.proc.wait(20) == 0
    finally:
        one.close()
    lines = [json.loads(x) for x in (tmp_path / "one.log").read_text().splitlines() if x]
    assert any(x.get("trigger") == "desired-state-changed" for x in lines)
    assert all(x.get("cluster") == "live" for x in lines if "round" in x)


def test_a_standby_takes_over_when_the_active_instance_is_killed(
    cluster: tuple[Path, Path], tmp_path: Path
) -> None:
    folder, state = cluster
    one = Instance(folder, state, tmp_path / "one.log")
    two: Instance | None = None
    try:
        wait_for(lambda: one.metric('reconciler_leader{cluster="live"} 1.0'))
        two = Instance(folder, state, tmp_path / "two.log")
        standby = two
        # 200 from the start ("starting"), "standby" once it has found the lock held
        wait_for(
            lambda: (x := standby.get("/healthz")) is not None and x.json()["state"] == "standby"
        )
        r = two.get("/healthz")
        assert r is not None
        assert r.status_code == 200
        assert two.metric('reconciler_leader{cluster="live"} 0.0')
        one.proc.kill()
        one.proc.wait()
        took = wait_for(lambda: standby.metric('reconciler_leader{cluster="live"} 1.0'))
        assert took < 15  # the lock is freed at once; the standby looks every 2 s
        two.proc.send_signal(signal.SIGTERM)
        assert two.proc.wait(20) == 0
    finally:
        one.close()
        if two is not None:
            two.close()


def test_run_from_a_repository_reads_each_new_commit(
    cluster: tuple[Path, Path], tmp_path: Path
) -> None:
    from tests.gitrepos import git, state_remote

    folder, state = cluster
    url, person = state_remote(tmp_path, folder)
    port = free_port()
    log = (tmp_path / "repo.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reconciler",
            "run",
            "--repo",
            url,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--poll",
            "1",
            "--state-dir",
            str(state),
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stderr=log,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )

    def health() -> httpx.Response | None:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
        except httpx.TransportError:
            return None

    def revision() -> str | None:
        try:
            status = json.loads((state / "live" / "status.json").read_text())
        except (OSError, ValueError):
            return None
        found = status.get("observedRevision")
        return found if isinstance(found, str) else None

    try:
        first = git(person, "rev-parse", "HEAD").strip()
        wait_for(lambda: revision() == first, timeout=30)
        # a person's commit breaks the policy: the next round reads that commit's files
        policy = person / "cluster-state" / "policy.yaml"
        policy.write_text(POLICY.replace("mode: observe", "mode: aply"))
        git(person, "commit", "-qam", "a typo")
        git(person, "push", "-q", "origin", "main")
        wait_for(lambda: (r := health()) is not None and r.status_code == 503, timeout=30)
        r = health()
        assert r is not None
        assert "aply" in r.json()["message"]
        # and the fix in the commit after it
        policy.write_text(POLICY)
        git(person, "commit", "-qam", "the fix")
        git(person, "push", "-q", "origin", "main")
        fixed = git(person, "rev-parse", "HEAD").strip()
        wait_for(lambda: revision() == fixed, timeout=30)
        wait_for(lambda: (r := health()) is not None and r.status_code == 200, timeout=30)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        log.close()
