"""Changing a running workload guest's load, through its console.

``set_load`` finds the lab host that runs the VM now, opens the guest's serial console through
libvirt (``virDomainOpenConsole``), writes one ``set`` line (``assets/workload-init.c`` says
what the guest understands) and reads the guest's answer, which it records in ``lab.json``.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from reconciler.adapters.lab import qemu, workload
from reconciler.adapters.lab.state import Lab, LabHost, require_lab, update_state
from reconciler.errors import ConfigError, LabError

try:
    import libvirt
except ImportError:  # pragma: no cover - depends on the machine
    libvirt = None

_ANSWER_TIMEOUT: Final = 15.0


@dataclass(frozen=True)
class LoadAnswer:
    """What a guest answered: where it runs and the workload it has now."""

    vm: str
    host: str
    workload: workload.Workload


def _workload_lab(directory: Path) -> Lab:
    lab = require_lab(directory)
    if not lab.workload:
        raise LabError(
            f"the VMs of the lab in {lab.dir} are firmware VMs, which take no load",
            hint="start it with `reconciler lab up --workload --recreate`",
        )
    return lab


def running_host(lab: Lab, vm: str) -> LabHost:
    """The lab host whose daemon runs ``vm`` now (not a migration's paused target)."""
    assert libvirt is not None
    if vm not in lab.workloads:
        names = ", ".join(sorted(lab.workloads))
        raise LabError(f"the lab in {lab.dir} has no VM {vm!r}", hint=f"name one of {names}")
    for host in lab.hosts:
        if not qemu.host_running(host):
            continue
        conn = qemu.open_conn(host.uri)
        try:
            with contextlib.suppress(libvirt.libvirtError):
                if conn.lookupByName(vm).state()[0] == libvirt.VIR_DOMAIN_RUNNING:
                    return host
        finally:
            conn.close()
    raise LabError(f"no host of the lab in {lab.dir} runs {vm}", hint="see `reconciler lab status`")


def set_load(
    directory: Path, vm: str, changes: dict[str, int | str], *, timeout: float = _ANSWER_TIMEOUT
) -> LoadAnswer:
    """Tell workload guest ``vm`` its new settings (guest keys: cpu, dirty, wss, pattern, peak,
    on, every, to, over); none asks it what it does. Keys left out keep their values.

    The guest's answer is recorded in ``lab.json``. ConfigError when the guest refuses the
    settings (it says why), LabError when it cannot be reached or does not answer.
    """
    if libvirt is None:
        raise LabError(
            "talking to a workload guest needs the libvirt Python bindings",
            hint="pip install libvirt-python",
        )
    directory = directory.resolve()
    lab = _workload_lab(directory)
    host = running_host(lab, vm)
    request = secrets.token_hex(4)
    words = " ".join(f"{k}={v}" for k, v in changes.items())
    line = f"{'set' if changes else 'get'} id={request} {words}".rstrip() + "\n"
    answer = _ask(host, vm, line.encode(), request, timeout)
    if answer.startswith("error"):
        raise ConfigError(
            f"{vm} refused {words}: {answer.split(':', 1)[-1].strip()}",
            hint="change the values and try again",
        )
    settings = dict(word.split("=", 1) for word in answer.split()[2:] if "=" in word)
    try:
        now = workload.from_settings(settings)
    except ValueError as err:
        raise LabError(f"{vm} answered what is not a workload: {answer}") from err

    def record(current: Lab) -> Lab:
        return current.with_workload(vm, now.to_json())

    update_state(directory, record)
    return LoadAnswer(vm=vm, host=host.name, workload=now)


def _ask(host: LabHost, vm: str, line: bytes, request: str, timeout: float) -> str:
    """Write ``line`` on ``vm``'s console and return the guest's answer to ``request``:
    ``ok id=... <settings>`` or ``error id=...: why``."""
    assert libvirt is not None
    # imported here: it needs libvirt-python, which the test-driver lab does without
    from reconciler.adapters.libvirt.connection import ensure_event_loop

    ensure_event_loop()  # a non-blocking stream is fed by libvirt's event loop
    conn = qemu.open_conn(host.uri)
    stream = None
    try:
        dom = conn.lookupByName(vm)
        stream = conn.newStream(libvirt.VIR_STREAM_NONBLOCK)
        # FORCE: take the console over from a client that holds it (a `virsh console`)
        dom.openConsole(None, stream, libvirt.VIR_DOMAIN_CONSOLE_FORCE)
        deadline = time.monotonic() + timeout
        pending = line
        received = b""
        marks = (f"workload ok id={request} ", f"workload error id={request}:")
        while time.monotonic() < deadline:
            if pending:
                sent = stream.send(pending)
                if isinstance(sent, int) and sent > 0:
                    pending = pending[sent:]
            got = stream.recv(4096)
            if isinstance(got, bytes):
                if not got:
                    break  # the console closed: the guest stopped or migrated away
                *lines, received = (received + got).split(b"\n")
                for raw in lines:
                    text = raw.decode(errors="replace")
                    for mark in marks:
                        if mark in text:
                            return text[text.index(mark) + len("workload ") :].strip()
                continue
            time.sleep(0.02)
    except libvirt.libvirtError as err:
        raise LabError(f"cannot talk to {vm} on {host.name}: {err}") from err
    finally:
        if stream is not None:
            with contextlib.suppress(libvirt.libvirtError):
                stream.abort()
        conn.close()
    raise LabError(
        f"{vm} did not answer on its console within {timeout:.0f}s",
        hint="see its console in the lab folder's guests/ (is it still running?)",
    )
