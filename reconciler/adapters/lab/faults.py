"""Faults of one lab host, for tests of what the reconciler does when a host fails.

``kill_host`` ends a host's libvirtd with SIGKILL (a daemon that dies, mid-migration or not);
its VMs keep running, as QEMUs do when a real libvirtd crashes. ``freeze_host`` stops the
daemon with SIGSTOP: it still accepts connections but answers nothing (a hung host) until
``thaw_host``. ``start_host`` starts a killed daemon again, which finds its running VMs.
``power_off_host`` powers a host off as its BMC does (``lab up --bmc``): its VMs end, then
its daemon; the definitions stay for ``start_host``. ``stop_lab`` cleans up after any of them,
a frozen host included.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

from reconciler.adapters.lab import processes, qemu
from reconciler.adapters.lab.state import LabHost, require_lab
from reconciler.errors import LabError


def _qemu_host(directory: Path, name: str) -> LabHost:
    lab = require_lab(directory)
    if lab.driver != "qemu":
        raise LabError(
            f"the lab in {lab.dir} uses the test driver, which has no daemons to fail",
            hint="start a lab with `reconciler lab up` (the qemu driver)",
        )
    return lab.host(name)


def _running_daemon(host: LabHost) -> int:
    pid = qemu.daemon_pid(host)
    if pid is None:
        raise LabError(
            f"libvirtd of lab host {host.name} is not running", hint="start it with start_host"
        )
    return pid


def kill_host(directory: Path, name: str) -> int:
    """SIGKILL the libvirtd of host ``name`` and wait until it is gone; its pid."""
    pid = _running_daemon(_qemu_host(directory, name))
    processes.send(pid, signal.SIGKILL)
    if not processes.wait_gone(pid, 5.0):
        raise LabError(f"libvirtd of lab host {name} (pid {pid}) outlived SIGKILL")
    return pid


def kill_qemus(directory: Path, name: str) -> list[int]:
    """SIGKILL the QEMUs host ``name``'s daemon started (by its pid files, so another lab's VMs
    of the same names are never touched); their pids."""
    host = _qemu_host(directory, name)
    killed = []
    for pidfile in sorted((Path(host.path) / "run" / "qemu").glob("*.pid")):
        pid = processes.read_pid(pidfile)
        if pidfile.name == "driver.pid" or pid is None or not processes.ours(pid, "qemu"):
            continue
        processes.send(pid, signal.SIGKILL)
        killed.append(pid)
    for pid in killed:
        processes.wait_gone(pid, 5.0)
    return killed


def freeze_host(directory: Path, name: str) -> int:
    """SIGSTOP the libvirtd of host ``name``: its calls hang until ``thaw_host``; its pid."""
    pid = _running_daemon(_qemu_host(directory, name))
    if not processes.freeze(pid, 5.0):
        raise LabError(f"libvirtd of lab host {name} (pid {pid}) did not stop")
    return pid


def thaw_host(directory: Path, name: str) -> bool:
    """SIGCONT the libvirtd of host ``name``; False when it was not frozen."""
    pid = _running_daemon(_qemu_host(directory, name))
    if not processes.stopped(pid):
        return False
    processes.send(pid, signal.SIGCONT)
    return True


def start_host(directory: Path, name: str) -> bool:
    """Start the libvirtd of host ``name`` again and wait until it answers.

    A frozen daemon is thawed instead. The new daemon runs in a new mount namespace over the
    same host folder and keeps the persistent definitions in it. When some of the host's
    QEMUs still run, it reconnects to them (a daemon that crashed); when none does, the host
    comes back as a rebooted machine would: its run-time state (``run/``, a tmpfs on a real
    host) is cleared, and its domains are defined and shut off. False when the daemon was
    running already.
    """
    host = _qemu_host(directory, name)
    if qemu.host_running(host):
        return thaw_host(directory, name)
    binaries = qemu.check_requirements()
    hdir = Path(host.path)
    old = processes.read_pid(hdir / "reaper.pid")
    if processes.ours(old, "lab_host.py"):
        # the old supervisor still reaps the QEMUs it adopted: keep it findable by stop_lab
        (hdir / "reaper.pid").rename(hdir / f"reaper-{old}.pid")
    # a pid file of a supervisor that is gone would read as the new one dying at start
    stale = [hdir / "reaper.pid", hdir / "libvirtd.pid", *(hdir / "sock").iterdir()]
    for path in stale:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    if not qemu.qemus_running(host):
        qemu.clear_run_state(host)
    qemu.launch(host, binaries)
    qemu.wait_up(host)
    conn = qemu.connect_when_up(host)
    try:
        conn.listAllDomains(0)  # answers once the daemon has found its domains again
    finally:
        conn.close()
    return True


def power_off_host(directory: Path, name: str) -> None:
    """Power host ``name`` off: every QEMU of it ends (a VM still on it is lost, as on a
    machine without power), then its daemon and supervisor; its definitions stay, and
    ``start_host`` boots it again. Nothing when it is off already."""
    host = _qemu_host(directory, name)
    qemu.stop_host(host, keep_domains=True)
