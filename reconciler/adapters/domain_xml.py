"""Facts read from a libvirt domain XML: sizes and whether the VM can be live-migrated.

Pure functions over XML text; the observer calls them with what ``virDomainGetXMLDesc`` gave.

What blocks live migration (``UnmigratableReason``):

- ``LocalDisk``: a ``file``, ``block``, ``dir`` or ``volume`` disk whose source is not on shared
  storage. Network disks (rbd, iscsi, nbd, gluster, ...), a cdrom or floppy without a source, a
  disk marked ``<shareable/>`` and a path under one of ``shared_paths`` are fine.
- ``HostDevice``: a ``<hostdev>`` (PCI, USB, SCSI), an ``<interface type='hostdev'>`` (SR-IOV)
  or an ``nvme`` disk: hardware of this host passed through.
- ``MediatedDevice``: a ``<hostdev type='mdev'>`` (vGPU and the like).
- ``Vtpm``: a ``<tpm>`` device: its state lives on this host.
- ``HostPassthroughCpu``: ``<cpu mode='host-passthrough'>`` (or ``maximum``) while the cluster's
  hosts report different CPU models.
- ``SharedMemory``: ``<shmem>`` (ivshmem) or a ``vhostuser`` disk.
- ``Other``: anything else that stops it, e.g. a virtiofs share or XML that does not parse.

``NotRunning`` and ``InFlight`` come from the VM's state, not its XML; the observer adds them.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from reconciler.model.snapshot import Unmigratable, UnmigratableReason

_LOCAL_DISK_TYPES = {"file", "block", "dir", "volume"}
_SOURCE_ATTRS = ("file", "dev", "dir")


@dataclass(frozen=True)
class DomainFacts:
    """Sizes a domain XML declares (used where the driver's stats leave them out)."""

    vcpus: int
    memory_max: int
    memory_current: int


_UNITS: Final = {
    "b": 1,
    "bytes": 1,
    "k": 1024,
    "kib": 1024,
    "kb": 1000,
    "m": 1024**2,
    "mib": 1024**2,
    "mb": 1000**2,
    "g": 1024**3,
    "gib": 1024**3,
    "gb": 1000**3,
    "t": 1024**4,
    "tib": 1024**4,
    "tb": 1000**4,
}
"""Bytes per unit of libvirt's memory sizes, by lower-case unit."""


def _kib(element: ET.Element | None) -> int | None:
    if element is None or element.text is None:
        return None
    try:
        value = int(element.text.strip())
    except ValueError:
        return None
    return value * _UNITS.get(element.get("unit", "KiB").lower(), 1024)


def domain_facts(domain: ET.Element) -> DomainFacts:
    """vCPUs and memory (bytes) of a parsed ``<domain>``; 0 where the XML lacks them."""
    vcpu = domain.find("vcpu")
    vcpus = 0
    if vcpu is not None:
        try:
            vcpus = int(vcpu.get("current") or (vcpu.text or "0").strip())
        except ValueError:
            vcpus = 0
    memory_max = _kib(domain.find("memory")) or 0
    current = _kib(domain.find("currentMemory"))
    return DomainFacts(
        vcpus=vcpus,
        memory_max=memory_max,
        memory_current=memory_max if current is None else current,
    )


def _under(path: str, prefixes: Sequence[str]) -> bool:
    for prefix in prefixes:
        p = prefix.rstrip("/")
        if p and (path == p or path.startswith(p + "/")):
            return True
    return False


def _disk_blocker(disk: ET.Element, shared_paths: Sequence[str]) -> Unmigratable | None:
    disk_type = disk.get("type", "file")
    device = disk.get("device", "disk")
    target = disk.find("target")
    target_dev = target.get("dev", "?") if target is not None else "?"
    if disk_type == "nvme":
        return Unmigratable(
            code=UnmigratableReason.HOST_DEVICE,
            detail=f"disk {target_dev} is an NVMe controller of this host",
        )
    if disk_type == "vhostuser":
        return Unmigratable(
            code=UnmigratableReason.SHARED_MEMORY,
            detail=f"disk {target_dev} is a vhost-user disk",
        )
    if disk_type not in _LOCAL_DISK_TYPES:
        return None  # network, ...: reachable from every host
    if disk.find("shareable") is not None:
        return None
    source = disk.find("source")
    if source is None:
        if device in ("cdrom", "floppy"):
            return None  # empty drive
        return Unmigratable(
            code=UnmigratableReason.LOCAL_DISK, detail=f"disk {target_dev} has no source"
        )
    if disk_type == "volume":
        where = f"volume {source.get('pool', '?')}/{source.get('volume', '?')}"
        return Unmigratable(
            code=UnmigratableReason.LOCAL_DISK,
            detail=f"disk {target_dev} is storage {where} (not known to be shared)",
        )
    path = next((source.get(a) for a in _SOURCE_ATTRS if source.get(a)), None)
    if path is None:
        if device in ("cdrom", "floppy"):
            return None
        return Unmigratable(
            code=UnmigratableReason.LOCAL_DISK, detail=f"disk {target_dev} has no source path"
        )
    if _under(path, shared_paths):
        return None
    return Unmigratable(
        code=UnmigratableReason.LOCAL_DISK,
        detail=f"{device} {target_dev} is local: {path}",
    )


def migration_blockers(
    domain: ET.Element,
    *,
    shared_paths: Sequence[str] = (),
    cpu_models_differ: bool = False,
) -> list[Unmigratable]:
    """What in this parsed ``<domain>`` stops a live migration; empty when nothing does."""
    out: list[Unmigratable] = []
    devices = domain.find("devices")
    if devices is not None:
        for disk in devices.findall("disk"):
            blocker = _disk_blocker(disk, shared_paths)
            if blocker is not None:
                out.append(blocker)
        for hostdev in devices.findall("hostdev"):
            kind = hostdev.get("type", "?")
            if kind == "mdev":
                addr = hostdev.find("source/address")
                uuid = addr.get("uuid", "?") if addr is not None else "?"
                out.append(
                    Unmigratable(
                        code=UnmigratableReason.MEDIATED_DEVICE, detail=f"mediated device {uuid}"
                    )
                )
            else:
                out.append(
                    Unmigratable(
                        code=UnmigratableReason.HOST_DEVICE,
                        detail=f"{kind} host device {_address(hostdev)}".replace("  ", " "),
                    )
                )
        for iface in devices.findall("interface"):
            if iface.get("type") == "hostdev":
                out.append(
                    Unmigratable(
                        code=UnmigratableReason.HOST_DEVICE,
                        detail=f"interface passes through PCI device {_address(iface)}",
                    )
                )
        for tpm in devices.findall("tpm"):
            backend = tpm.find("backend")
            kind = backend.get("type", "?") if backend is not None else "?"
            out.append(
                Unmigratable(
                    code=UnmigratableReason.VTPM,
                    detail=f"TPM {tpm.get('model', '?')} with {kind} backend",
                )
            )
        for shmem in devices.findall("shmem"):
            out.append(
                Unmigratable(
                    code=UnmigratableReason.SHARED_MEMORY,
                    detail=f"shared memory device {shmem.get('name', '?')}",
                )
            )
        for fs in devices.findall("filesystem"):
            driver = fs.find("driver")
            if driver is not None and driver.get("type") == "virtiofs":
                target = fs.find("target")
                tag = target.get("dir", "?") if target is not None else "?"
                out.append(
                    Unmigratable(code=UnmigratableReason.OTHER, detail=f"virtiofs share {tag}")
                )
    mode = passthrough_cpu_mode(domain)
    if cpu_models_differ and mode is not None:
        out.append(passthrough_blocker(mode))
    return out


def passthrough_cpu_mode(domain: ET.Element) -> str | None:
    """``host-passthrough`` or ``maximum`` when the domain takes the host's own CPU model.

    Such a VM blocks migration only while the cluster's hosts report different CPU models,
    which is known once every host is observed; ``migration_blockers`` checks it then.
    """
    cpu = domain.find("cpu")
    mode = cpu.get("mode") if cpu is not None else None
    return mode if mode in ("host-passthrough", "maximum") else None


def passthrough_blocker(mode: str) -> Unmigratable:
    """The ``HostPassthroughCpu`` reason of a VM whose CPU mode is ``mode``."""
    return Unmigratable(
        code=UnmigratableReason.HOST_PASSTHROUGH_CPU,
        detail=f"CPU mode {mode} and the hosts have different CPU models",
    )


def _address(element: ET.Element) -> str:
    """A short form of a device's source address (PCI, USB or SCSI) for messages."""
    source = element.find("source")
    if source is None:
        return ""
    addr = source.find("address")
    if addr is not None:
        keys = ("domain", "bus", "slot", "function", "device", "unit", "target")
        return ":".join(f"{k}={addr.get(k)}" for k in keys if addr.get(k) is not None)
    vendor, product = source.find("vendor"), source.find("product")
    if vendor is not None and product is not None:
        return f"{vendor.get('id')}:{product.get('id')}"
    adapter = source.find("adapter")
    return adapter.get("name", "") if adapter is not None else ""


def migration_blockers_from_xml(
    xml: str, *, shared_paths: Sequence[str] = (), cpu_models_differ: bool = False
) -> list[Unmigratable]:
    """``migration_blockers`` of a domain XML text; XML that does not parse is ``Other``."""
    try:
        domain = ET.fromstring(xml)
    except ET.ParseError as err:
        return [Unmigratable(code=UnmigratableReason.OTHER, detail=f"domain XML unreadable: {err}")]
    return migration_blockers(
        domain, shared_paths=shared_paths, cpu_models_differ=cpu_models_differ
    )
