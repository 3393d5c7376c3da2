"""Real BMCs on loopback for the power drivers' tests.

- ``sushy_emulator``: OpenStack's Redfish emulator (sushy-tools' ``sushy-emulator``) with its
  fake systems driver, basic authentication from an htpasswd file (bcrypt, as it requires),
  optionally HTTPS with a certificate made here. Its systems apply a reset after a delay, as
  hardware does; the emulator draws it at random between 1 and 11 s, which this starts it
  with at its lower end (at most 1 s) so a test stays quick.
- ``ipmi_bmc``: pyghmi's BMC simulator (``pyghmi.ipmi.bmc.Bmc``, what OpenStack's VirtualBMC
  is built on) in a process of its own, speaking IPMI 2.0 (RMCP+) over UDP, holding a power
  state that chassis control switches.
- ``self_signed``: a certificate and key for 127.0.0.1, by ``openssl``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.net import free_port

USER = "admin"
PASSWORD = "s3cret-Pa55word"
"""The BMCs' password in these tests (never a real one)."""

_SUSHY = """
import random, sys
random.randint = lambda low, high: low  # the delay of a reset: its lower end, at most 1 s
from sushy_tools.emulator.main import main
sys.exit(main())
"""

_IPMI = """
import sys
import threading
import pyghmi.ipmi.bmc as bmc

class Sim(bmc.Bmc):
    state = sys.argv[4]
    def get_power_state(self):
        return self.state
    def power_on(self):
        self.state = "on"
        print("on", flush=True)
    def power_off(self):
        self.state = "off"
        print("off", flush=True)
    def power_shutdown(self):
        self.state = "off"
        print("shutdown", flush=True)

sim = Sim({sys.argv[2]: sys.argv[3]}, port=int(sys.argv[1]), address="127.0.0.1")
print("ready", flush=True)
sim.listen()
"""


@dataclass
class Emulator:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def said(self) -> str:
        return self.log.read_text(errors="replace")


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate and its key for 127.0.0.1 (an EC key: quick to make)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return cert, key


def _htpasswd(path: Path, user: str, password: str) -> None:
    import bcrypt  # sushy-tools' own dependency, which reads the file

    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    path.write_text(f"{user}:{digest}\n")


@contextlib.contextmanager
def sushy_emulator(
    directory: Path,
    systems: Sequence[tuple[str, str]] = (("kvm-07", "On"),),
    *,
    tls: tuple[Path, Path] | None = None,
) -> Iterator[Emulator]:
    """sushy-emulator on 127.0.0.1 with fake systems ``(name, power state)``, each with the
    UUID ``00000000-0000-0000-0000-00000000000N`` (N from 1)."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    _htpasswd(directory / "htpasswd", USER, PASSWORD)
    fakes = [
        {"uuid": f"00000000-0000-0000-0000-{i:012d}", "name": name, "power_state": state,
         "nics": []}
        for i, (name, state) in enumerate(systems, start=1)
    ]  # fmt: skip
    lines = [
        "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'",
        f"SUSHY_EMULATOR_LISTEN_PORT = {port}",
        f"SUSHY_EMULATOR_AUTH_FILE = {str(directory / 'htpasswd')!r}",
        "SUSHY_EMULATOR_FAKE_DRIVER = True",
        f"SUSHY_EMULATOR_STATE_DIR = {str(directory / 'state')!r}",
        f"SUSHY_EMULATOR_FAKE_SYSTEMS = {fakes!r}",
    ]
    if tls is not None:
        lines += [f"SUSHY_EMULATOR_SSL_CERT = {str(tls[0])!r}"]
        lines += [f"SUSHY_EMULATOR_SSL_KEY = {str(tls[1])!r}"]
    config = directory / "emulator.conf"
    config.write_text("\n".join(lines) + "\n")
    log = directory / "emulator.log"
    scheme = "https" if tls is not None else "http"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", _SUSHY, "--config", str(config)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "SUSHY_EMULATOR_CONFIG": str(config)},
        )  # fmt: skip
    emulator = Emulator(f"{scheme}://127.0.0.1:{port}", process, log)
    try:
        _wait_until_up(emulator)
        yield emulator
    finally:
        _stop(process)


def _wait_until_up(emulator: Emulator) -> None:
    ends = time.monotonic() + 30
    while time.monotonic() < ends:
        if emulator.process.poll() is not None:
            raise RuntimeError(f"sushy-emulator exited: {emulator.said()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{emulator.url}/redfish/v1", verify=False, timeout=1).is_success:
                return
        time.sleep(0.1)
    raise RuntimeError(f"sushy-emulator did not answer in 30 s: {emulator.said()[-2000:]}")


def _stop(process: subprocess.Popen[Any]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def free_udp_port() -> int:
    """A UDP port on 127.0.0.1 that nothing is bound to at the time of the call."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class IpmiBmc:
    address: str
    """``127.0.0.1:PORT``, as a host's power.address gives it."""
    process: subprocess.Popen[str]
    seen: list[str]
    """What chassis control did so far, in order: on, off, shutdown."""

    def actions(self, count: int) -> list[str]:
        """What chassis control did, once it did ``count`` things (within 5 s)."""
        ends = time.monotonic() + 5
        while len(self.seen) < count and time.monotonic() < ends:
            time.sleep(0.02)
        return list(self.seen)


@contextlib.contextmanager
def ipmi_bmc(state: str = "on") -> Iterator[IpmiBmc]:
    """pyghmi's BMC simulator on a UDP port of 127.0.0.1, user ``USER`` with ``PASSWORD``,
    its power ``state`` (on or off) at the start."""
    port = free_udp_port()
    process = subprocess.Popen(
        [sys.executable, "-c", _IPMI, str(port), USER, PASSWORD, state],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    first = process.stdout.readline().strip()
    if first != "ready":
        _stop(process)
        raise RuntimeError(f"the IPMI simulator did not start: {first}")
    seen: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            seen.append(line.strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield IpmiBmc(f"127.0.0.1:{port}", process, seen)
    finally:
        _stop(process)
        reader.join(timeout=5)
        if process.stdout is not None:
            process.stdout.close()
