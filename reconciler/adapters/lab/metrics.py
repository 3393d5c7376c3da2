"""The lab's metrics, as a real site has them: an exporter per host and a Prometheus over them.

``start_metrics`` starts, for every lab host, Debian's ``prometheus-libvirt-exporter`` on a free
loopback port with ``--libvirt.uri`` set to that host's URI, then a Prometheus server on another
free loopback port that scrapes them every 5 s, each target labelled ``host`` with the name of
the lab host it reads. Their files are in ``<dir>/metrics/``: ``prometheus.yml``, the server's
``data/``, and a log and a pid file for each process. ``stop_metrics`` stops exactly the
processes those pid files name, after checking their command lines.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Final

import httpx
import yaml

from reconciler.adapters.lab import processes
from reconciler.adapters.lab.state import Lab, LabHost
from reconciler.errors import LabError

SCRAPE_SECONDS: Final = 5
EXPORTER: Final = "prometheus-libvirt-exporter"
PROMETHEUS: Final = "prometheus"
FOLDER: Final = "metrics"
_READY_TIMEOUT: Final = 30.0
_HTTP_TIMEOUT: Final = 2.0


def _find(binary: str) -> str | None:
    places = (Path("/usr/bin") / binary, Path("/usr/sbin") / binary)
    return shutil.which(binary) or next((str(p) for p in places if p.is_file()), None)


def check_metrics_requirements() -> dict[str, str]:
    """The binaries ``--metrics`` runs, by name; LabError names the package that is missing."""
    found = {}
    for binary, package in ((EXPORTER, EXPORTER), (PROMETHEUS, "prometheus"), ("setsid", "")):
        path = _find(binary)
        if path is None:
            raise LabError(
                f"lab metrics need {binary}, which is not installed",
                hint=f"apt-get install --no-install-recommends {package or 'util-linux'} "
                "(make setup does), or start the lab without --metrics",
            )
        found[binary] = path
    return found


def prometheus_url(lab: Lab) -> str | None:
    """The lab's Prometheus, when it was started with metrics."""
    return f"http://127.0.0.1:{lab.prometheus_port}" if lab.prometheus_port else None


def exporter_url(host: LabHost) -> str | None:
    return f"http://127.0.0.1:{host.exporter_port}/metrics" if host.exporter_port else None


def prometheus_config(lab: Lab) -> str:
    """Prometheus's configuration: every host's exporter, labelled with the host's name."""
    config = {
        "global": {
            "scrape_interval": f"{SCRAPE_SECONDS}s",
            "evaluation_interval": f"{SCRAPE_SECONDS}s",
        },
        "scrape_configs": [
            {
                "job_name": "libvirt",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{h.exporter_port}"], "labels": {"host": h.name}}
                    for h in lab.hosts
                ],
            }
        ],
    }
    header = f"# Written by `reconciler lab up --metrics`: the exporters of the lab in {lab.dir}.\n"
    return header + yaml.safe_dump(config, sort_keys=False)


def _exporter_marker(host: LabHost) -> str:
    return f"--libvirt.uri={host.uri}"


def start_metrics(lab: Lab, binaries: dict[str, str]) -> Lab:
    """Start the exporters and Prometheus of ``lab``; the lab with their ports.

    Returns once every exporter answers and Prometheus is ready; LabError (with the end of
    the process's log) when one of them does not.
    """
    folder = Path(lab.dir) / FOLDER
    (folder / "data").mkdir(parents=True, exist_ok=True)
    hosts = [replace(h, exporter_port=processes.free_port()) for h in lab.hosts]
    lab = replace(lab, hosts=hosts, prometheus_port=processes.free_port())
    for host in hosts:
        _spawn(
            binaries,
            [
                binaries[EXPORTER],
                f"--web.listen-address=127.0.0.1:{host.exporter_port}",
                _exporter_marker(host),
            ],
            pidfile=folder / f"exporter-{host.name}.pid",
            log=folder / f"exporter-{host.name}.log",
        )
    config = folder / "prometheus.yml"
    config.write_text(prometheus_config(lab))
    _spawn(
        binaries,
        [
            binaries[PROMETHEUS],
            f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{lab.prometheus_port}",
            "--storage.tsdb.retention.time=1d",
        ],
        pidfile=folder / "prometheus.pid",
        log=folder / "prometheus.log",
    )
    for host in hosts:
        _wait_ready(
            f"the exporter of {host.name}",
            str(exporter_url(host)),
            folder / f"exporter-{host.name}.pid",
            folder / f"exporter-{host.name}.log",
        )
    _wait_ready(
        "Prometheus",
        f"{prometheus_url(lab)}/-/ready",
        folder / "prometheus.pid",
        folder / "prometheus.log",
    )
    return lab


def _spawn(binaries: dict[str, str], argv: list[str], *, pidfile: Path, log: Path) -> None:
    try:
        processes.spawn(binaries["setsid"], argv, pidfile=pidfile, log=log)
    except (OSError, subprocess.SubprocessError, TimeoutError) as err:
        raise LabError(f"cannot start {argv[0]}: {err}{processes.tail(log)}") from err


def _wait_ready(what: str, url: str, pidfile: Path, log: Path) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=_HTTP_TIMEOUT).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if not processes.alive(processes.read_pid(pidfile)):
            break
        time.sleep(0.1)
    raise LabError(f"{what} did not answer on {url}{processes.tail(log)}", hint=f"see {log.parent}")


def stop_metrics(lab: Lab) -> None:
    """Stop the lab's exporters and Prometheus, by their pid files (nothing when none runs)."""
    folder = Path(lab.dir) / FOLDER
    markers = {"prometheus.pid": f"--config.file={folder / 'prometheus.yml'}"}
    markers |= {f"exporter-{h.name}.pid": _exporter_marker(h) for h in lab.hosts}
    for name, marker in markers.items():
        pid = processes.read_pid(folder / name)
        if pid is not None:
            processes.terminate(pid, marker)
