"""How the lab's workload guests boot: their domain, their console log, their start.

A workload guest boots Debian's cloud kernel straight from its file with the initrd of
``guest_image``, under TCG (``<domain type='qemu'>``, whatever the lab's firmware VMs use:
this kernel does not boot under KVM on every machine, and CI machines have no KVM). Its
settings are on the kernel command line (``workload.cmdline``). Its serial port is a pty,
which ``lab load`` talks to through libvirt, and whose output libvirt also appends to
``<dir>/guests/<vm>.log``: the same file on every lab host, so it follows the VM when it
migrates. ``wait_ready`` reads that file for the guest's ``workload ready``.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final
from xml.sax.saxutils import escape

from reconciler.adapters.lab.layout import indent, template
from reconciler.adapters.lab.state import LabVm
from reconciler.adapters.lab.workload import Workload, cmdline
from reconciler.adapters.libvirt.domain_metadata import render_metadata
from reconciler.errors import LabError

CONSOLE_LOGS: Final = "guests"
READY: Final = b"workload ready"
BOOT_TIMEOUT: Final = 240.0
"""Emulated guests that boot all at once on a busy machine of two cores take their time."""


@dataclass(frozen=True)
class GuestBoot:
    """What workload guests boot from (copies in the lab folder) and what each one does."""

    kernel: Path
    initrd: Path
    kernel_package: str
    workloads: dict[str, Workload] = field(default_factory=dict)


def console_log(directory: Path, vm: str) -> Path:
    """Where the console output of workload guest ``vm`` is appended."""
    return directory / CONSOLE_LOGS / f"{vm}.log"


def domain_xml(vm: LabVm, boot: GuestBoot, log: Path) -> str:
    """The libvirt domain XML of a workload guest of ``vm``."""
    return template("workload-domain.xml.in").substitute(
        name=vm.name,
        uuid=vm.uuid,
        metadata=indent(render_metadata(vm.labels), 4),
        memory_mib=vm.memory_mib,
        vcpus=vm.vcpus,
        kernel=escape(str(boot.kernel)),
        initrd=escape(str(boot.initrd)),
        cmdline=escape(cmdline(boot.workloads[vm.name])),
        console_log=escape(str(log), {"'": "&apos;"}),
    )


def wait_ready(dom: Any, log: Path, *, timeout: float = BOOT_TIMEOUT) -> None:
    """Wait until the guest says ``workload ready`` in its console log ``log``.

    LabError, with the end of its console, when the guest stops or does not say it in time.
    """
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError):
            if READY in log.read_bytes():
                return
        if not dom.isActive():
            raise LabError(
                f"workload guest {dom.name()} stopped while it booted{tail(log)}",
                hint=f"see {log}",
            )
        if time.monotonic() > deadline:
            raise LabError(
                f"workload guest {dom.name()} did not start its /init within {timeout:.0f}s"
                f"{tail(log)}",
                hint=f"see {log}; a busy machine boots emulated guests slowly",
            )
        time.sleep(0.1)


def tail(log: Path, lines: int = 6) -> str:
    """The end of a console log, indented on lines of its own."""
    try:
        text = log.read_bytes().decode(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return "".join(f"\n  {line.rstrip()}" for line in text)


def install(boot: GuestBoot, directory: Path) -> GuestBoot:
    """``boot`` with its kernel and initrd linked (or copied) into ``<directory>/guest/``.

    Every QEMU of the lab reads them when it starts, a migration's target included, so the lab
    keeps its own: a rebuilt cache does not change a running lab.
    """
    folder = directory / "guest"
    folder.mkdir(parents=True, exist_ok=True)
    placed = []
    for source, name in ((boot.kernel, "vmlinuz"), (boot.initrd, "initrd.gz")):
        target = folder / name
        target.unlink(missing_ok=True)
        try:
            target.hardlink_to(source)
        except OSError:  # another filesystem
            shutil.copyfile(source, target)
        placed.append(target)
    return replace(boot, kernel=placed[0], initrd=placed[1])
