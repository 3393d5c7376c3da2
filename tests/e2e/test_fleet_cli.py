"""``reconciler run`` over a folder of clusters, as a user runs it: one process, many clusters.

Hosts are libvirt's test driver. A broken cluster folder stalls alone; clusters added to or
removed from the folder are picked up; every series carries its cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.fleets import write_fleet
from tests.net import free_port
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


class FleetProcess:
    def __init__(self, args: list[str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reconciler",
                "run",
                *args,
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

    def status(self) -> dict[str, object]:
        r = self.get("/status")
        return r.json() if r is not None and r.status_code == 200 else {}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()


def _rounds(state: Path, cluster: str) -> int:
    try:
        return int(json.loads((state / cluster / "status.json").read_text())["rounds"])
    except (OSError, ValueError, KeyError):
        return 0


def test_one_process_serves_every_cluster_folder_and_a_broken_one_stalls_alone(
    tmp_path: Path,
) -> None:
    pytest.importorskip("libvirt")
    root, state = tmp_path / "clusters", tmp_path / "state"
    names = write_fleet(root, tmp_path / "nodes", 3, interval="2s")
    (root / "broken").mkdir()
    (root / "broken" / "cluster.yaml").write_text("kind: Nope\n")
    (root / "notes").mkdir()  # a folder without cluster.yaml is no cluster
    fleet = FleetProcess(
        [str(root), "--state-dir", str(state), "--concurrency", "2"], tmp_path / "run.log"
    )
    try:
        # every valid cluster reconciled, on its own schedule, judged from its status file
        wait_for(lambda: all(_rounds(state, n) >= 2 for n in names))
        status = fleet.status()
        assert status["held"] == names
        assert status["assigned"] == ["broken", *names]
        invalid = status["invalid"]
        assert isinstance(invalid, dict)
        assert list(invalid) == ["broken"]
        assert "unknown kind 'Nope'" in invalid["broken"]
        r = fleet.get("/metrics")
        assert r is not None
        for name in names:
            assert f'reconciler_leader{{cluster="{name}"}} 1.0' in r.text
            assert f'reconciler_reconciles_total{{cluster="{name}",result="ok"}}' in r.text
        assert 'reconciler_fleet_cluster_invalid{folder="broken"} 1.0' in r.text
        health = fleet.get("/healthz")
        assert health is not None
        assert health.status_code == 200

        # a cluster added to the folder is picked up; one removed is let go
        added = write_fleet(root, tmp_path / "nodes", 1, interval="2s", prefix="late")
        wait_for(lambda: _rounds(state, added[0]) >= 1, timeout=30)
        shutil.rmtree(root / names[0])
        wait_for(lambda: names[0] not in str(fleet.status().get("held", names[0])), timeout=30)
        stopped_at = _rounds(state, names[0])
        # the broken folder fixed: served at the next look
        shutil.copytree(root / names[1], root / "broken", dirs_exist_ok=True)
        (root / "broken" / "cluster.yaml").write_text(
            (root / names[1] / "cluster.yaml")
            .read_text()
            .replace(f"{{name: {names[1]}}}", "{name: mended}")
        )
        wait_for(lambda: _rounds(state, "mended") >= 1, timeout=30)
        assert _rounds(state, names[0]) == stopped_at
        fleet.proc.send_signal(signal.SIGTERM)
        assert fleet.proc.wait(30) == 0
    finally:
        fleet.close()
    lines = [json.loads(x) for x in (tmp_path / "run.log").read_text().splitlines() if x]
    rounds = [x for x in lines if "round" in x and "cluster" in x]
    assert {x["cluster"] for x in rounds} >= {*names, added[0], "mended"}


def test_a_cluster_folder_is_still_served_alone(tmp_path: Path) -> None:
    """PATH that is itself a cluster folder: the single-cluster run, no /status."""
    pytest.importorskip("libvirt")
    root, state = tmp_path / "clusters", tmp_path / "state"
    (name,) = write_fleet(root, tmp_path / "nodes", 1, interval="1h")
    one = FleetProcess([str(root / name), "--state-dir", str(state)], tmp_path / "run.log")
    try:
        wait_for(lambda: _rounds(state, name) >= 1)
        r = one.get("/status")
        assert r is not None
        assert r.status_code == 404
    finally:
        one.close()


def test_two_cluster_folders_with_one_name_are_both_refused_and_neither_is_reconciled(
    tmp_path: Path,
) -> None:
    pytest.importorskip("libvirt")
    root, state = tmp_path / "clusters", tmp_path / "state"
    names = write_fleet(root, tmp_path / "nodes", 3, interval="1h")
    twin = root / names[1] / "cluster.yaml"
    own = twin.read_text()
    twin.write_text(own.replace(f"{{name: {names[1]}}}", f"{{name: {names[0]}}}"))
    fleet = FleetProcess([str(root), "--state-dir", str(state)], tmp_path / "run.log")
    try:
        wait_for(lambda: _rounds(state, names[2]) >= 1 and fleet.status()["invalid"] != {})
        status = fleet.status()
        invalid = status["invalid"]
        assert isinstance(invalid, dict)
        assert sorted(invalid) == names[:2]
        assert f"cluster name '{names[0]}' is also declared by {names[1]}" in invalid[names[0]]
        assert f"cluster name '{names[0]}' is also declared by {names[0]}" in invalid[names[1]]
        assert "give each cluster folder a metadata.name of its own" in invalid[names[0]]
        assert status["held"] == [names[2]]
        assert _rounds(state, names[0]) == 0  # neither folder was reconciled
        r = fleet.get("/metrics")
        assert r is not None
        assert f'reconciler_fleet_cluster_invalid{{folder="{names[1]}"}} 1.0' in r.text
        # each given a name of its own: both served at the next look
        twin.write_text(own)
        wait_for(lambda: all(_rounds(state, n) >= 1 for n in names[:2]), timeout=30)
        wait_for(lambda: fleet.status()["invalid"] == {}, timeout=30)
        assert fleet.status()["held"] == names
    finally:
        fleet.close()
