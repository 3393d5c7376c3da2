"""What a lab is made of, and ``lab.json``, the record of what ``start_lab`` started."""

from __future__ import annotations

import fcntl
import json
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal

from reconciler.errors import LabError

Driver = Literal["qemu", "test"]

DEFAULT_DIR: Final = Path(".lab")
STATE_FILE: Final = "lab.json"
LOCK_FILE: Final = "lab.lock"
MAX_QEMU_HOSTS: Final = 16
MAX_VMS: Final = 200
UUID_NS: Final = uuid.UUID("6f1d6c1e-2b8a-4f55-9c57-6c61622d7663")


@dataclass(frozen=True)
class LabVm:
    """One VM of the lab and the host it starts on."""

    name: str
    host: str
    memory_mib: int
    vcpus: int
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def uuid(self) -> str:
        return str(uuid.uuid5(UUID_NS, f"vm/{self.name}"))


@dataclass(frozen=True)
class LabHost:
    """One lab host: a libvirt daemon (``qemu``) or a test-driver node file (``test``)."""

    name: str
    uri: str
    host_uuid: str
    path: str
    """The host's folder (qemu) or node file (test)."""
    migration_port_min: int = 0
    rack: str = "r1"
    exporter_port: int = 0
    """The loopback port of the host's libvirt exporter (``lab up --metrics``); 0 without."""
    bmc_port: int = 0
    """The loopback port of the host's Redfish BMC (``lab up --bmc``); 0 without."""


@dataclass(frozen=True)
class Lab:
    """What ``start_lab`` set up, as kept in ``lab.json``."""

    dir: str
    driver: Driver
    hosts: list[LabHost]
    vms: list[LabVm]
    virt_type: str = ""
    """``kvm`` or ``qemu`` (TCG) for the qemu driver; ``test`` for the test driver."""
    already_up: bool = False
    """True when ``start_lab`` found this lab running and left it as it was."""
    seconds: float = 0.0
    """How long ``start_lab`` took."""
    workloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each VM's workload (``workload.Workload.to_json``) when its guests are workload guests
    (``lab up --workload``): as started, then as ``lab load`` last set it. Empty otherwise."""
    kernel_package: str = ""
    """The Debian package the workload guests' kernel comes from."""
    boot_seconds: float = 0.0
    """How long the slowest workload guest took from its start to its ``/init`` running."""
    prometheus_port: int = 0
    """The loopback port of the lab's Prometheus (``lab up --metrics``); 0 without."""

    @property
    def workload(self) -> bool:
        """True when the lab's VMs are workload guests."""
        return bool(self.workloads)

    def with_workload(self, vm: str, data: dict[str, Any]) -> Lab:
        """This lab with ``vm``'s workload recorded as ``data``."""
        return replace(self, workloads={**self.workloads, vm: data})

    @property
    def cluster_dir(self) -> Path:
        return Path(self.dir) / "cluster-state"

    def host(self, name: str) -> LabHost:
        """The host called ``name``; ``LabError`` lists the lab's hosts when there is none."""
        for host in self.hosts:
            if host.name == name:
                return host
        names = ", ".join(h.name for h in self.hosts)
        raise LabError(f"the lab in {self.dir} has no host {name!r}", hint=f"use one of {names}")


@dataclass(frozen=True)
class HostStatus:
    name: str
    uri: str
    up: bool
    pid: int | None
    error: str | None = None
    exporter: str | None = None
    """The URL of the host's libvirt exporter (``lab up --metrics``)."""
    bmc: str | None = None
    """The URL of the host's Redfish BMC (``lab up --bmc``)."""


@dataclass(frozen=True)
class VmStatus:
    name: str
    host: str
    state: str
    workload: str | None = None
    """What a workload guest was last told to do (``Workload.describe``)."""


@dataclass(frozen=True)
class LabStatus:
    dir: str
    driver: Driver
    hosts: list[HostStatus]
    vms: list[VmStatus]
    prometheus: str | None = None
    """The URL of the lab's Prometheus (``lab up --metrics``)."""


def write_state(lab: Lab) -> None:
    data = asdict(lab)
    data.pop("already_up")
    path = Path(lab.dir) / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def update_state(directory: Path, change: Callable[[Lab], Lab]) -> Lab:
    """Apply ``change`` to the lab recorded in ``directory`` and record the result, one writer
    at a time (a lock file beside ``lab.json``)."""
    with open(directory / LOCK_FILE, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            lab = change(require_lab(directory))
            write_state(lab)
            return lab
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_lab(directory: Path) -> Lab | None:
    """The lab recorded in ``directory``, or None when there is none."""
    path = directory.resolve() / STATE_FILE
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return Lab(
            dir=data["dir"],
            driver=data["driver"],
            hosts=[LabHost(**h) for h in data["hosts"]],
            vms=[LabVm(**v) for v in data["vms"]],
            virt_type=data.get("virt_type", ""),
            seconds=data.get("seconds", 0.0),
            workloads=data.get("workloads", {}),
            kernel_package=data.get("kernel_package", ""),
            boot_seconds=data.get("boot_seconds", 0.0),
            prometheus_port=data.get("prometheus_port", 0),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise LabError(
            f"{path} is not a lab state file: {err}",
            hint=f"remove {directory} by hand if nothing of the lab is running",
        ) from err


def require_lab(directory: Path) -> Lab:
    """The lab recorded in ``directory``; ``LabError`` when there is none."""
    lab = read_lab(directory)
    if lab is None:
        raise LabError(
            f"no lab in {directory.resolve()}", hint="start one with `reconciler lab up`"
        )
    return lab
