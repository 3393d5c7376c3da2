"""``start_lab``, ``stop_lab`` and ``lab_status``: the lab as a whole, for either driver."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from reconciler.adapters.lab import processes, qemu
from reconciler.adapters.lab.bmc import bmc_url, check_bmc_requirements, start_bmcs, stop_bmcs
from reconciler.adapters.lab.cluster_folder import write_cluster_state
from reconciler.adapters.lab.guest_boot import GuestBoot
from reconciler.adapters.lab.guest_image import ensure_guest
from reconciler.adapters.lab.layout import lab_layout
from reconciler.adapters.lab.metrics import (
    check_metrics_requirements,
    exporter_url,
    prometheus_url,
    start_metrics,
    stop_metrics,
)
from reconciler.adapters.lab.state import (
    DEFAULT_DIR,
    MAX_QEMU_HOSTS,
    MAX_VMS,
    Driver,
    HostStatus,
    Lab,
    LabStatus,
    VmStatus,
    read_lab,
    require_lab,
    write_state,
)
from reconciler.adapters.lab.testdriver import start_test_lab
from reconciler.adapters.lab.workload import from_json, guest_memory, read_workloads
from reconciler.errors import LabError


def start_lab(
    directory: Path = DEFAULT_DIR,
    *,
    hosts: int = 3,
    vms: int = 8,
    driver: Driver = "qemu",
    recreate: bool = False,
    workload: bool = False,
    workload_file: Path | None = None,
    metrics: bool = False,
    bmc: bool = False,
    boot_seconds: float = 5.0,
    say: Callable[[str], None] = lambda _: None,
) -> Lab:
    """Start a lab of ``hosts`` hosts and ``vms`` VMs in ``directory`` and write its folder.

    With ``workload`` the VMs are workload guests (qemu driver only) doing what
    ``workload_file`` declares (the lab's own ``assets/workload.yaml`` when None); their kernel
    and initrd are built first where the cache lacks them (``guest_image``), which ``say``
    tells of. With ``metrics`` an exporter per host and a Prometheus scraping them run too.
    With ``bmc`` every host gets a Redfish BMC (``bmc``) whose power-on takes
    ``boot_seconds``; the cluster folder then gives each host its ``power`` section.
    When a lab already runs there it is left alone (``Lab.already_up``), unless ``recreate``
    stops it first. ``LabError`` says what is missing on this machine and how to fix it;
    ``ConfigError`` what is wrong in the workload file.
    """
    began = time.monotonic()
    directory = directory.resolve()
    if hosts < 1 or (driver == "qemu" and hosts > MAX_QEMU_HOSTS):
        limit = MAX_QEMU_HOSTS if driver == "qemu" else "any"
        raise LabError(f"a lab has 1 to {limit} hosts, not {hosts}", hint="change --hosts")
    if not 0 <= vms <= MAX_VMS:
        raise LabError(f"a lab has 0 to {MAX_VMS} VMs, not {vms}", hint="change --vms")
    if (workload or workload_file is not None) and driver != "qemu":
        raise LabError(
            "workload guests need real daemons: the test driver runs no VMs",
            hint="drop --driver test, or --workload",
        )
    existing = read_lab(directory)
    if existing is not None:
        if not recreate and _lab_running(existing):
            return replace(existing, already_up=True)
        stop_lab(directory)
    elif directory.exists() and any(directory.iterdir()):
        raise LabError(
            f"{directory} exists and is not a lab folder",
            hint="choose another --dir or remove that folder",
        )
    layout = lab_layout(hosts, vms)
    boot = None
    if workload or workload_file is not None:
        layout = [replace(vm, memory_mib=guest_memory(vm)) for vm in layout]
        workloads = read_workloads(workload_file, layout)
        qemu.check_requirements()  # before a build that would be of no use here
        image = ensure_guest(say=say)
        boot = GuestBoot(image.kernel, image.initrd, image.kernel_package, workloads)
    binaries = check_metrics_requirements() if metrics else {}
    if bmc:
        if driver != "qemu":
            raise LabError(
                "lab BMCs switch real daemons: the test driver has none",
                hint="drop --driver test, or --bmc",
            )
        check_bmc_requirements()
    if driver == "test":
        lab = start_test_lab(directory, hosts, layout)
    else:
        lab = qemu.start_qemu_lab(directory, hosts, layout, boot)
    if metrics:
        write_state(lab)  # so that `lab down` finds what to stop if the metrics fail
        try:
            lab = start_metrics(lab, binaries)
        except BaseException:
            with contextlib.suppress(Exception):
                stop_lab(directory)
            raise
    if bmc:
        write_state(lab)  # so that `lab down` finds what to stop if a BMC fails
        try:
            lab = start_bmcs(lab, qemu.check_requirements()["setsid"], boot_seconds=boot_seconds)
        except BaseException:
            with contextlib.suppress(Exception):
                stop_lab(directory)
            raise
    write_cluster_state(lab)
    lab = replace(lab, seconds=round(time.monotonic() - began, 3))
    write_state(lab)
    return lab


def _lab_running(lab: Lab) -> bool:
    if lab.driver == "test":
        return all(Path(h.path).is_file() for h in lab.hosts)
    return any(qemu.host_running(h) for h in lab.hosts)


def stop_lab(directory: Path = DEFAULT_DIR) -> Lab:
    """Stop the lab in ``directory``: its VMs, daemons and QEMUs (by pid file), then its folder.

    Only processes the lab's pid files name, and whose command line confirms it, are stopped;
    a frozen daemon is thawed first, a killed one leaves its QEMUs to stop by pid file.
    """
    directory = directory.resolve()
    lab = require_lab(directory)
    stop_metrics(lab)
    stop_bmcs(lab)  # first: a BMC would boot a host being stopped
    if lab.driver == "qemu":
        processes.parallel(lab.hosts, qemu.stop_host)
    shutil.rmtree(directory)
    return lab


def lab_status(directory: Path = DEFAULT_DIR) -> LabStatus:
    """Each host of the lab in ``directory`` (up or down) and the VMs the running ones have.

    A frozen host (its daemon stopped by ``freeze_host``) is down, and not asked for its VMs:
    it would not answer.
    """
    directory = directory.resolve()
    lab = require_lab(directory)
    hosts: list[HostStatus] = []
    vms: list[VmStatus] = []
    for host in lab.hosts:
        error = None
        if lab.driver == "qemu":
            pid = qemu.daemon_pid(host)
            up = pid is not None
            if pid is None:
                error = "libvirtd is not running"
            elif processes.stopped(pid):
                up, error = False, f"libvirtd (pid {pid}) is frozen; thaw it with thaw_host"
        else:
            pid, up = None, Path(host.path).is_file()
        if up and qemu.have_bindings():
            try:
                vms += qemu.host_vms(host)
            except LabError as err:
                up, error = False, err.message
        hosts.append(
            HostStatus(
                host.name,
                host.uri,
                up,
                pid if up else None,
                error,
                exporter_url(host),
                bmc_url(host),
            )
        )
    vms = [
        replace(vm, workload=from_json(lab.workloads[vm.name]).describe())
        if vm.name in lab.workloads
        else vm
        for vm in vms
    ]
    return LabStatus(
        dir=str(directory),
        driver=lab.driver,
        hosts=hosts,
        vms=vms,
        prometheus=prometheus_url(lab),
    )
