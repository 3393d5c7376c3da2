"""The qemu lab: one root ``libvirtd`` per host in its own mount namespace, with tiny real VMs."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from reconciler.adapters.lab import guest_boot, processes
from reconciler.adapters.lab.guest_boot import GuestBoot
from reconciler.adapters.lab.layout import host_names, indent, rack, template
from reconciler.adapters.lab.state import UUID_NS, Lab, LabHost, LabVm, VmStatus, write_state
from reconciler.adapters.libvirt.domain_metadata import render_metadata
from reconciler.errors import LabError
from reconciler.model.snapshot import VmRunState

try:  # the test driver mode writes files only and works without libvirt-python
    import libvirt
except ImportError:  # pragma: no cover - depends on the machine
    libvirt = None

PORTS_PER_HOST: Final = 16
_SOCKET_PATH_MAX = 107
_START_TIMEOUT = 15.0
_SUPERVISOR: Final = Path(__file__).with_name("lab_host.py")
"""Run as a script, so it ships as a module of this package (no file of the checkout)."""


# --- requirements ---------------------------------------------------------------------------


def _which(name: str, *extra: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for directory in extra:
        candidate = Path(directory) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def check_requirements() -> dict[str, str]:
    """The binaries the qemu lab runs, by name; ``LabError`` says what is missing and the fix."""
    if libvirt is None:
        raise LabError(
            "the lab needs the libvirt Python bindings, which are not installed",
            hint="pip install libvirt-python (needs libvirt-dev and pkg-config), or "
            "run `reconciler lab up --driver test`",
        )
    if os.geteuid() != 0:
        raise LabError(
            "the lab runs its own root libvirt daemons and must be started as root",
            hint="run it with sudo, or use `reconciler lab up --driver test` (no daemons)",
        )
    found: dict[str, str] = {}
    needs = (
        ("libvirtd", "libvirt-daemon libvirt-daemon-driver-qemu"),
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("unshare", "util-linux"),
        ("setsid", "util-linux"),
    )
    for binary, package in needs:
        path = _which(binary, "/usr/sbin", "/sbin", "/usr/bin")
        if path is None:
            raise LabError(
                f"the lab needs {binary}, which is not installed",
                hint=f"apt-get install --no-install-recommends {package} "
                "(or use `reconciler lab up --driver test`)",
            )
        found[binary] = path
    drivers = list(Path("/usr/lib").glob("*/libvirt/connection-driver/libvirt_driver_qemu.so"))
    drivers += list(Path("/usr/lib64/libvirt/connection-driver").glob("libvirt_driver_qemu.so"))
    if not drivers:
        raise LabError(
            "libvirtd is installed without its QEMU driver",
            hint="apt-get install --no-install-recommends libvirt-daemon-driver-qemu",
        )
    return found


# --- libvirt helpers ------------------------------------------------------------------------


def open_conn(uri: str) -> Any:
    assert libvirt is not None
    libvirt.registerErrorHandler(lambda *_: None, None)
    try:
        return libvirt.open(uri)
    except libvirt.libvirtError as err:
        raise LabError(f"cannot connect to lab host {uri}: {err}") from err


def _virt_type(conn: Any) -> str:
    """``kvm`` when this machine can run KVM guests, else ``qemu`` (TCG)."""
    forced = os.environ.get("RECONCILER_LAB_VIRT_TYPE")
    if forced in ("kvm", "qemu"):
        return forced
    assert libvirt is not None
    try:
        conn.getDomainCapabilities(None, "x86_64", None, "kvm", 0)
    except libvirt.libvirtError:
        return "qemu"
    return "kvm"


def domain_xml(vm: LabVm, virt_type: str) -> str:
    """The libvirt domain XML of a lab VM (tiny, diskless, with its labels in metadata)."""
    return template("domain.xml.in").substitute(
        virt_type=virt_type,
        name=vm.name,
        uuid=vm.uuid,
        metadata=indent(render_metadata(vm.labels), 4),
        memory_mib=vm.memory_mib,
        vcpus=vm.vcpus,
    )


def have_bindings() -> bool:
    """True when libvirt-python is installed (the test driver works without it)."""
    return libvirt is not None


def _socket_uri(socket: Path) -> str:
    return f"qemu+unix:///system?socket={socket}"


# --- start ----------------------------------------------------------------------------------


def start_qemu_lab(
    directory: Path, hosts: int, layout: list[LabVm], boot: GuestBoot | None = None
) -> Lab:
    """Start the daemons of ``hosts`` hosts and the VMs of ``layout`` on them.

    With ``boot`` the VMs are workload guests, and this returns once each one's ``/init``
    runs; without it they are firmware VMs.
    """
    binaries = check_requirements()
    names = host_names(hosts)
    longest = directory / "hosts" / names[-1] / "sock" / "libvirt-sock-admin"
    if len(str(longest)) > _SOCKET_PATH_MAX:
        raise LabError(
            f"the lab folder {directory} is too deep for a unix socket path "
            f"({len(str(longest))} > {_SOCKET_PATH_MAX} characters)",
            hint="use a shorter --dir",
        )
    # Every daemon listens for incoming migrations on 127.0.0.1, so each gets its own ports.
    port_base = 49152 + (zlib.crc32(str(directory).encode()) % 63) * 256
    lab_hosts = []
    for index, name in enumerate(names):
        hdir = directory / "hosts" / name
        lab_hosts.append(
            LabHost(
                name=name,
                uri=_socket_uri(hdir / "sock" / "libvirt-sock"),
                host_uuid=str(uuid.uuid5(UUID_NS, f"host/{directory}/{name}")),
                path=str(hdir),
                migration_port_min=port_base + index * PORTS_PER_HOST,
                rack=rack(index),
            )
        )
    lab = Lab(dir=str(directory), driver="qemu", hosts=lab_hosts, vms=layout)
    directory.mkdir(parents=True, exist_ok=True)
    write_state(lab)  # first, so that `lab down` can clean up a lab that failed half-way
    try:
        if boot is not None:
            boot = guest_boot.install(boot, directory)
        (directory / "qemu-caps-cache").mkdir(exist_ok=True)
        for host in lab_hosts:
            _prepare_host(directory, host)
        # The first daemon probes QEMU's capabilities into the shared cache; the others
        # then start from it (about 1 s each instead of a full probe).
        launch(lab_hosts[0], binaries)
        wait_up(lab_hosts[0])
        for host in lab_hosts[1:]:
            launch(host, binaries)
        for host in lab_hosts[1:]:
            wait_up(host)
        conns = {h.name: connect_when_up(h) for h in lab_hosts}
        try:
            # workload guests always run under TCG (guest_boot says why)
            virt_type = "qemu" if boot else _virt_type(conns[lab_hosts[0].name])
            lab = replace(lab, virt_type=virt_type)
            if boot:
                lab = replace(
                    lab,
                    workloads={n: w.to_json() for n, w in boot.workloads.items()},
                    kernel_package=boot.kernel_package,
                )
                (directory / guest_boot.CONSOLE_LOGS).mkdir(exist_ok=True)
            write_state(lab)
            by_name = {h.name: h for h in lab_hosts}
            booted: list[float] = []

            def start_vm(vm: LabVm) -> None:
                if boot is None:
                    _define_and_start(
                        conns[vm.host], vm, domain_xml(vm, virt_type), by_name[vm.host]
                    )
                    return
                began = time.monotonic()
                log = guest_boot.console_log(directory, vm.name)
                xml = guest_boot.domain_xml(vm, boot, log)
                dom = _define_and_start(conns[vm.host], vm, xml, by_name[vm.host])
                guest_boot.wait_ready(dom, log)
                booted.append(time.monotonic() - began)

            processes.parallel(layout, start_vm)  # QEMU start-up dominates: all at once
            if booted:
                lab = replace(lab, boot_seconds=round(max(booted), 3))
        finally:
            for conn in conns.values():
                conn.close()
    except BaseException:
        with contextlib.suppress(Exception):
            processes.parallel(lab_hosts, stop_host)
            shutil.rmtree(directory)
        raise
    return lab


def _define_and_start(conn: Any, vm: LabVm, xml: str, host: LabHost) -> Any:
    assert libvirt is not None
    try:
        dom = conn.defineXML(xml)
        dom.create()
        return dom
    except libvirt.libvirtError as err:
        log = Path(host.path) / "log" / "qemu" / f"{vm.name}.log"
        raise LabError(
            f"{host.name}: cannot start VM {vm.name}: {err}{processes.tail(log)}",
            hint=f"see {Path(host.path) / 'log'}",
        ) from err


def _prepare_host(directory: Path, host: LabHost) -> None:
    hdir = Path(host.path)
    if hdir.exists():
        shutil.rmtree(hdir)
    for sub in ("etc", "run", "lib", "log", "cache/qemu", "sock"):
        (hdir / sub).mkdir(parents=True)
    values = {
        "name": host.name,
        "host_dir": str(hdir),
        "host_uuid": host.host_uuid,
        "port_min": host.migration_port_min,
        "port_max": host.migration_port_min + PORTS_PER_HOST - 1,
    }
    (hdir / "etc" / "libvirtd.conf").write_text(template("libvirtd.conf.in").substitute(values))
    (hdir / "etc" / "qemu.conf").write_text(template("qemu.conf.in").substitute(values))
    (hdir / "cache" / "qemu" / "capabilities").symlink_to(directory / "qemu-caps-cache")
    # libvirtd resolves its build-time user 'libvirt-qemu' before it reads qemu.conf: give
    # the namespace a passwd/group that has it, leaving the machine's own files untouched.
    passwd = Path("/etc/passwd").read_text()
    group = Path("/etc/group").read_text()
    if not re.search(r"^libvirt-qemu:", passwd, re.M):
        passwd += "libvirt-qemu:x:64055:64055::/var/lib/libvirt:/usr/sbin/nologin\n"
    if not re.search(r"^libvirt-qemu:", group, re.M):
        group += "libvirt-qemu:x:64055:\n"
    (hdir / "passwd").write_text(passwd)
    (hdir / "group").write_text(group)


def launch(host: LabHost, binaries: dict[str, str]) -> None:
    """Start the host's supervisor and libvirtd, detached from this process."""
    hdir = Path(host.path)
    for target in ("/run/libvirt", "/var/lib/libvirt", "/var/log/libvirt", "/var/cache/libvirt"):
        Path(target).mkdir(parents=True, exist_ok=True)  # mount points only
    with open(hdir / "log" / "stdout.log", "ab") as out:
        # setsid -f forks and returns at once: the daemon is detached from this process.
        subprocess.run(
            [
                binaries["setsid"],
                "-f",
                binaries["unshare"],
                "--mount",
                "--propagation",
                "private",
                sys.executable,
                "-I",
                str(_SUPERVISOR),
                str(hdir),
                binaries["libvirtd"],
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=True,
        )


def wait_up(host: LabHost) -> None:
    hdir = Path(host.path)
    sock = hdir / "sock" / "libvirt-sock"
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if sock.is_socket() and processes.alive(processes.read_pid(hdir / "libvirtd.pid")):
            return
        reaper = processes.read_pid(hdir / "reaper.pid")
        if reaper is not None and not processes.alive(reaper):
            break
        time.sleep(0.02)
    raise LabError(
        f"libvirtd of {host.name} did not come up"
        f"{processes.tail(hdir / 'log' / 'stdout.log')}"
        f"{processes.tail(hdir / 'log' / 'libvirtd.log')}",
        hint=f"see {hdir / 'log'}",
    )


def connect_when_up(host: LabHost) -> Any:
    """A connection to a daemon ``wait_up`` saw start, retried while it may still be binding
    its socket (a refused connect there is a matter of milliseconds, more on a busy machine)."""
    deadline = time.monotonic() + _START_TIMEOUT
    while True:
        try:
            return open_conn(host.uri)
        except LabError:
            if time.monotonic() > deadline or not host_running(host):
                raise
            time.sleep(0.05)


# --- running hosts --------------------------------------------------------------------------


def daemon_pid(host: LabHost) -> int | None:
    """The pid of the host's libvirtd when it runs (frozen or not), else None."""
    hdir = Path(host.path)
    pid = processes.read_pid(hdir / "libvirtd.pid")
    return pid if processes.ours(pid, str(hdir)) else None


def host_running(host: LabHost) -> bool:
    return daemon_pid(host) is not None


def qemus_running(host: LabHost) -> bool:
    """True when a QEMU the host's daemon started still runs (by its pid files)."""
    folder = Path(host.path) / "run" / "qemu"
    return any(
        processes.ours(processes.read_pid(pidfile), "qemu")
        for pidfile in folder.glob("*.pid")
        if pidfile.name != "driver.pid"  # the daemon's own
    )


def clear_run_state(host: LabHost) -> None:
    """Empty the host's ``run/`` as a reboot empties a tmpfs: the status files of QEMUs that
    are gone would otherwise be taken for running domains to reconnect to."""
    run = Path(host.path) / "run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()


def stop_host(host: LabHost, *, keep_domains: bool = False) -> None:
    """Stop the host's domains, daemon, QEMUs and supervisors, a frozen daemon included;
    with ``keep_domains`` the definitions stay (a host powered off, not removed)."""
    hdir = Path(host.path)
    daemon = daemon_pid(host)
    if daemon is not None:
        processes.send(daemon, signal.SIGCONT)  # a frozen daemon would hang the calls below
        if not keep_domains:
            with contextlib.suppress(LabError):
                _remove_domains(host.uri)
        processes.terminate(daemon, str(hdir))
    # run/qemu: the VMs; lib/qemu/qmp-*: a capabilities probe, left running by a daemon killed
    # while it probed (it runs daemonized, so the daemon's end does not end it)
    pidfiles = [
        *(hdir / "run" / "qemu").glob("*.pid"),
        *(hdir / "lib" / "qemu").glob("qmp-*/*.pid"),
    ]
    for pidfile in pidfiles:
        qemu = processes.read_pid(pidfile)
        if qemu is not None:
            processes.terminate(qemu, "qemu", timeout=3.0)
    # reaper.pid, and reaper-<pid>.pid of supervisors left from before a restart: each one
    # ends by itself once its libvirtd and QEMUs are gone
    for pidfile in hdir.glob("reaper*.pid"):
        reaper = processes.read_pid(pidfile)
        if reaper is not None and not processes.wait_gone(reaper, 2.0):
            processes.terminate(reaper, "lab_host.py")


def _remove_domains(uri: str) -> None:
    assert libvirt is not None
    conn = open_conn(uri)
    try:
        for dom in conn.listAllDomains(0):
            with contextlib.suppress(libvirt.libvirtError):
                if dom.isActive():
                    dom.destroy()
            with contextlib.suppress(libvirt.libvirtError):
                dom.undefine()
    finally:
        conn.close()


def host_vms(host: LabHost) -> list[VmStatus]:
    assert libvirt is not None
    conn = open_conn(host.uri)
    try:
        out = []
        for dom in conn.listAllDomains(0):
            try:
                state = dom.state()[0]
            except libvirt.libvirtError:
                continue
            out.append(VmStatus(dom.name(), host.name, VmRunState.from_code(state).value))
        return sorted(out, key=lambda v: v.name)
    finally:
        conn.close()
