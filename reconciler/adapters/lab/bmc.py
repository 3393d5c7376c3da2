"""The lab's BMCs (``lab up --bmc``): one Redfish BMC per lab host, on a loopback port.

Each is OpenStack's Redfish emulator (sushy-tools) run by ``lab_bmc`` with a systems driver
whose one ComputerSystem is the lab host: powering it off ends its VMs and its libvirt daemon,
powering it on starts the daemon again after a boot delay. Its files are in the host's
``bmc/`` folder: ``settings.json`` and ``emulator.conf`` (what it runs with), ``htpasswd``
(basic authentication, bcrypt), ``bmc.pid``, ``bmc.log``, ``boot-seconds``,
``shutdown-seconds`` and ``fault`` (read at every request, so a test or a person changes them
while it runs: ``set_bmc``).

The BMCs' user and password are made at ``lab up`` and written to ``<dir>/bmc.env`` (mode
0600) as the variables the lab's ``cluster.yaml`` names (``LAB_BMC_USER``,
``LAB_BMC_PASSWORD``); nothing prints them: ``set -a; . .lab/bmc.env`` gives them to a shell.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Final, Literal

import httpx

from reconciler.adapters.lab import processes
from reconciler.adapters.lab.state import Lab, LabHost, require_lab
from reconciler.errors import LabError

Fault = Literal["none", "refuse", "hang", "lie"]
FAULTS: Final[tuple[Fault, ...]] = ("none", "refuse", "hang", "lie")
USER_VAR: Final = "LAB_BMC_USER"
PASSWORD_VAR: Final = "LAB_BMC_PASSWORD"
ENV_FILE: Final = "bmc.env"
USER: Final = "lab"
DEFAULT_BOOT_SECONDS: Final = 5.0
_READY_TIMEOUT: Final = 30.0
_MODULE: Final = "reconciler.adapters.lab.lab_bmc"


def check_bmc_requirements() -> None:
    """LabError when sushy-tools (the emulator the lab's BMCs are) is not installed."""
    import importlib.util

    if importlib.util.find_spec("sushy_tools") is None:  # found, not imported: it runs apart
        raise LabError(
            "lab BMCs need sushy-tools, which is not installed",
            hint="pip install 'sushy-tools==2.2.0' (make setup does), or start without --bmc",
        )


def bmc_dir(host: LabHost) -> Path:
    return Path(host.path) / "bmc"


def bmc_url(host: LabHost) -> str | None:
    """The host's BMC, when the lab has them."""
    return f"http://127.0.0.1:{host.bmc_port}" if host.bmc_port else None


def read_env(directory: Path) -> dict[str, str]:
    """The BMCs' variables (``LAB_BMC_USER``, ``LAB_BMC_PASSWORD``) from ``<dir>/bmc.env``."""
    path = directory.resolve() / ENV_FILE
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError as err:
        raise LabError(f"{path} is missing", hint="start the lab with `lab up --bmc`") from err
    return dict(line.split("=", 1) for line in lines if "=" in line)


def _htpasswd(path: Path, password: str) -> None:
    import bcrypt  # sushy-tools' own dependency, which reads the file

    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=6)).decode()
    path.write_text(f"{USER}:{digest}\n")


def start_bmcs(lab: Lab, setsid: str, *, boot_seconds: float = DEFAULT_BOOT_SECONDS) -> Lab:
    """Start a BMC for every host of ``lab``; the lab with their ports. Returns once each
    answers; LabError with the end of its log when one does not."""
    check_bmc_requirements()
    password = secrets.token_urlsafe(18)
    env = Path(lab.dir) / ENV_FILE
    env.touch(mode=0o600)
    env.write_text(f"{USER_VAR}={USER}\n{PASSWORD_VAR}={password}\n")
    hosts = [replace(h, bmc_port=processes.free_port()) for h in lab.hosts]
    for host in hosts:
        folder = bmc_dir(host)
        folder.mkdir(parents=True, exist_ok=True)
        _htpasswd(folder / "htpasswd", password)
        (folder / "boot-seconds").write_text(f"{boot_seconds:g}\n")
        config = folder / "emulator.conf"
        config.write_text(
            "\n".join(
                [
                    "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'",
                    f"SUSHY_EMULATOR_LISTEN_PORT = {host.bmc_port}",
                    f"SUSHY_EMULATOR_AUTH_FILE = {str(folder / 'htpasswd')!r}",
                    "SUSHY_EMULATOR_FAKE_DRIVER = True",
                    f"SUSHY_EMULATOR_STATE_DIR = {str(folder / 'state')!r}",
                    "SUSHY_EMULATOR_FAKE_SYSTEMS = "
                    + repr([{"uuid": host.host_uuid, "name": host.name, "power_state": "On"}]),
                ]
            )
            + "\n"
        )
        settings = folder / "settings.json"
        settings.write_text(
            json.dumps(
                {
                    "lab_dir": lab.dir,
                    "host": host.name,
                    "port": host.bmc_port,
                    "bmc_dir": str(folder),
                    "config": str(config),
                }
            )
        )
        try:
            processes.spawn(
                setsid,
                [sys.executable, "-m", _MODULE, str(settings)],
                pidfile=folder / "bmc.pid",
                log=folder / "bmc.log",
            )
        except (OSError, TimeoutError) as err:
            raise LabError(f"cannot start the BMC of {host.name}: {err}") from err
    for host in hosts:
        _wait_ready(host, password)
    return replace(lab, hosts=hosts)


def _wait_ready(host: LabHost, password: str) -> None:
    folder = bmc_dir(host)
    deadline = time.monotonic() + _READY_TIMEOUT
    url = f"{bmc_url(host)}/redfish/v1/Systems"
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, auth=(USER, password), timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if not processes.alive(processes.read_pid(folder / "bmc.pid")):
            break
        time.sleep(0.1)
    log = folder / "bmc.log"
    raise LabError(
        f"the BMC of {host.name} did not answer on {url}{processes.tail(log)}",
        hint=f"see {log}",
    )


def stop_bmcs(lab: Lab) -> None:
    """Stop the lab's BMCs by their pid files (first, so none boots a host being stopped)."""
    for host in lab.hosts:
        folder = bmc_dir(host)
        pid = processes.read_pid(folder / "bmc.pid")
        if pid is not None:
            processes.terminate(pid, str(folder / "settings.json"))


def set_bmc(
    directory: Path,
    name: str,
    *,
    fault: Fault | None = None,
    boot_seconds: float | None = None,
    shutdown_seconds: float | None = None,
) -> dict[str, str]:
    """Change what host ``name``'s BMC does from its next request on; what it does now."""
    host = require_lab(directory.resolve()).host(name)
    folder = bmc_dir(host)
    if not host.bmc_port or not folder.is_dir():
        raise LabError(f"lab host {name} has no BMC", hint="start the lab with `lab up --bmc`")
    if fault is not None:
        if fault not in FAULTS:
            raise LabError(f"no BMC fault {fault!r}", hint=f"use one of {', '.join(FAULTS)}")
        (folder / "fault").write_text(f"{fault}\n")
    for file, value in (("boot-seconds", boot_seconds), ("shutdown-seconds", shutdown_seconds)):
        if value is not None:
            if value < 0:
                raise LabError(f"{file} cannot be negative: {value}")
            (folder / file).write_text(f"{value:g}\n")
    return bmc_settings(host)


def bmc_settings(host: LabHost) -> dict[str, str]:
    """The host's BMC as set now: url, fault, boot-seconds, shutdown-seconds."""
    folder = bmc_dir(host)

    def read(file: str, default: str) -> str:
        try:
            return (folder / file).read_text().strip() or default
        except FileNotFoundError:
            return default

    return {
        "url": bmc_url(host) or "",
        "fault": read("fault", "none"),
        "boot-seconds": read("boot-seconds", f"{DEFAULT_BOOT_SECONDS:g}"),
        "shutdown-seconds": read("shutdown-seconds", "1"),
        "booting": "yes" if (folder / "booting").exists() else "no",
    }


def env_for(directory: Path) -> dict[str, str]:
    """``os.environ`` with the lab BMCs' variables added (for a `run` started on the lab)."""
    return {**os.environ, **read_env(directory)}
