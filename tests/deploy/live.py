"""A real ``reconciler run`` on a libvirt test-driver lab, scraped by a real Prometheus.

Both are processes on loopback ports chosen free; the Prometheus server is Debian's
``/usr/bin/prometheus``, started on a temporary configuration and data folder (the package's
own service, if any, is not used).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from reconciler.cli import main
from tests.deploy.promtools import REPO, RULES
from tests.net import free_port

SCRAPE_SECONDS = 1
POLICY_EDITS = {
    # act (the test driver cannot migrate: every move fails, which the dashboard shows)
    "  mode: propose ": "  mode: apply ",
    # a round every 2 s, so a few seconds hold several rounds
    "  interval: 15m ": "  interval: 2s ",
}
LOAD = (
    "  load: {{source: prometheus, window: 20s, sampleEvery: 1s, "
    "prometheus: {{url: '{url}', timeout: 2s}}}}\n"
)
"""CPU as used, over a 20 s window from the lab's own Prometheus (its exporters read the test
driver's made-up CPU times), so a few seconds give a window."""


def lab_folder(directory: Path) -> tuple[Path, str]:
    """A test-driver lab (3 hosts, 8 VMs, unbalanced) with its exporters and Prometheus, whose
    policy acts every 2 s, always, on the CPU its VMs use over a window read from that
    Prometheus; the cluster folder and the lab Prometheus's URL. Stop it with ``lab down``."""
    args = ["lab", "up", "--driver", "test", "--metrics", "--dir", str(directory)]
    assert main(args) == 0
    url = f"http://127.0.0.1:{json.loads((directory / 'lab.json').read_text())['prometheus_port']}"
    folder = directory / "cluster-state"
    policy = folder / "policy.yaml"
    text = policy.read_text()
    for old, new in POLICY_EDITS.items():
        assert old in text, f"the lab's policy.yaml changed: no {old.strip()!r}"
        text = text.replace(old, new)
    text = re.sub(r"(?m)^  basis: \w+", "  basis: used", text)
    text = re.sub(r"(?ms)^  load:.*?(?=^  \w)", LOAD.format(url=url), text)
    policy.write_text(text.split("\n  windows:")[0] + "\n")  # no windows: act at any time
    return folder, url


class Process:
    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log_path = log
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            argv, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=log.parent
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text().splitlines()[-20:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def start_run(folder: Path, directory: Path) -> tuple[Process, int]:
    port = free_port()
    argv = [sys.executable, "-m", "reconciler", "run", str(folder)]
    argv += ["--state-dir", str(directory / "state"), "--listen", f"127.0.0.1:{port}"]
    run = Process(argv, directory / "run.log", env={**os.environ, "PYTHONPATH": str(REPO)})
    return run, port


def start_prometheus(binary: str, target_port: int, directory: Path) -> tuple[Process, str]:
    port = free_port()
    config = directory / "prometheus.yml"
    config.write_text(
        f"global: {{scrape_interval: {SCRAPE_SECONDS}s, evaluation_interval: 1s}}\n"
        f"rule_files: [{RULES}]\n"
        "scrape_configs:\n"
        "  - job_name: reconciler\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n"
    )
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={directory / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    return Process(argv, directory / "prometheus.log"), f"http://127.0.0.1:{port}"


class PromApi:
    """Prometheus's HTTP API: /api/v1/query and friends, raising on an error answer."""

    def __init__(self, url: str) -> None:
        self.url = url

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def get(self, path: str, **params: Any) -> Any:
        r = httpx.get(f"{self.url}{path}", params=params, timeout=10)
        body = r.json()
        assert body.get("status") == "success", f"{path} {params}: {r.status_code} {body}"
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.get("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", f"{expr}: {data['resultType']}"
        result: list[dict[str, Any]] = data["result"]
        return result

    def query_range(self, expr: str, start: float, end: float, step: float) -> Any:
        return self.get("/api/v1/query_range", query=expr, start=start, end=end, step=step)


@contextlib.contextmanager
def backfilled_prometheus(
    directory: Path, openmetrics: str, *, scrape_interval: str
) -> Iterator[str]:
    """A real Prometheus on a free loopback port whose database holds the series of
    ``openmetrics`` (backfilled with promtool, kept ten years); its URL while it runs."""
    from tests.deploy.promtools import binary
    from tests.waiting import wait_for

    promtool, server = binary("promtool"), binary("prometheus")
    source = directory / "series.om"
    source.write_text(openmetrics)
    data = directory / "tsdb"
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    config = directory / "prometheus.yml"
    config.write_text(f"global: {{scrape_interval: {scrape_interval}}}\n")
    port = free_port()
    proc = Process(
        [
            server,
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            "--storage.tsdb.retention.time=10y",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        directory / "prometheus.log",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: PromApi(url).ready() or not proc.alive(), 60, "Prometheus to start")
        assert proc.alive(), proc.tail()
        yield url
    finally:
        proc.stop()
