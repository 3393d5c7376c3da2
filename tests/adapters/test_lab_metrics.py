"""The lab's metrics on the test-driver lab: real exporters and a real Prometheus, no root."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
import pytest
import yaml

from reconciler.adapters import lab as lab_api
from reconciler.adapters.lab import metrics
from reconciler.cli import main
from reconciler.errors import LabError
from tests.lab_fixtures import pid_alive


@pytest.fixture
def _binaries() -> None:
    for name in (metrics.EXPORTER, metrics.PROMETHEUS):
        if shutil.which(name) is None:
            pytest.skip(f"{name} is not installed (make setup installs it)")


@pytest.mark.usefixtures("_binaries")
def test_metrics_of_a_test_driver_lab(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "lab"
    assert (
        main(
            ["lab", "up", "--driver", "test", "--hosts", "2", "--metrics", "--dir", str(directory)]
        )
        == 0
    )
    try:
        assert "Prometheus: http://127.0.0.1:" in capsys.readouterr().out
        assert main(["lab", "status", "--format", "json", "--dir", str(directory)]) == 0
        status = json.loads(capsys.readouterr().out)
        url = status["prometheus"]
        assert url.startswith("http://127.0.0.1:")
        config = yaml.safe_load((directory / "metrics" / "prometheus.yml").read_text())
        assert config["global"]["scrape_interval"] == "5s"
        targets = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            active = httpx.get(f"{url}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
            targets = {t["labels"]["host"]: t for t in active}
            if len(targets) == 2 and all(t["health"] == "up" for t in targets.values()):
                break
            time.sleep(0.5)
        assert sorted(targets) == ["kvm-01", "kvm-02"]
        assert all(t["health"] == "up" for t in targets.values()), targets
        for host in status["hosts"]:
            assert targets[host["name"]]["scrapeUrl"] == host["exporter"]
            # the exporter reads that host: its VMs, and only those
            text = httpx.get(host["exporter"], timeout=5).text
            names = {v["name"] for v in status["vms"] if v["host"] == host["name"]}
            exported = {
                line.split('domain="')[1].split('"')[0]
                for line in text.splitlines()
                if line.startswith("libvirt_domain_info_virtual_cpus{")
            }
            assert exported == names
        pids = lab_api.lab_processes(directory)
        assert len(pids) == 3, "two exporters and a Prometheus"
    finally:
        assert main(["lab", "down", "--dir", str(directory)]) == 0
    deadline = time.monotonic() + 5
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if pid_alive(p)], "lab down leaves a metrics process"


def test_a_missing_exporter_says_which_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = metrics._find
    monkeypatch.setattr(metrics, "_find", lambda n: None if n == metrics.EXPORTER else real(n))
    with pytest.raises(LabError, match="need prometheus-libvirt-exporter") as info:
        lab_api.start_lab(tmp_path / "lab", driver="test", metrics=True)
    assert "apt-get install --no-install-recommends prometheus-libvirt-exporter" in (
        info.value.hint or ""
    )
    assert not (tmp_path / "lab").exists(), "nothing started"
