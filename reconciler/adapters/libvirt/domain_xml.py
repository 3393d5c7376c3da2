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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from reconciler.adapters.libvirt.compatibility import Needs, needs_of
from reconciler.adapters.libvirt.domain_disks import DiskRef, disk_refs, under
from reconciler.adapters.libvirt.domain_metadata import (
    DomainMetadata,
    no_metadata,
    parse_metadata_element,
)
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
    if under(path, shared_paths):
        return None
    return Unmigratable(
        code=UnmigratableReason.LOCAL_DISK,
        detail=f"{device} {target_dev} is local: {path}",
    )


def _hostdev_blocker(hostdev: ET.Element, _shared: Sequence[str]) -> Unmigratable | None:
    kind = hostdev.get("type", "?")
    if kind == "mdev":
        addr = hostdev.find("source/address")
        uuid = addr.get("uuid", "?") if addr is not None else "?"
        return Unmigratable(
            code=UnmigratableReason.MEDIATED_DEVICE, detail=f"mediated device {uuid}"
        )
    return Unmigratable(
        code=UnmigratableReason.HOST_DEVICE,
        detail=f"{kind} host device {_address(hostdev)}".replace("  ", " "),
    )


def _interface_blocker(iface: ET.Element, _shared: Sequence[str]) -> Unmigratable | None:
    if iface.get("type") != "hostdev":
        return None
    return Unmigratable(
        code=UnmigratableReason.HOST_DEVICE,
        detail=f"interface passes through PCI device {_address(iface)}",
    )


def _tpm_blocker(tpm: ET.Element, _shared: Sequence[str]) -> Unmigratable | None:
    backend = tpm.find("backend")
    kind = backend.get("type", "?") if backend is not None else "?"
    return Unmigratable(
        code=UnmigratableReason.VTPM, detail=f"TPM {tpm.get('model', '?')} with {kind} backend"
    )


def _shmem_blocker(shmem: ET.Element, _shared: Sequence[str]) -> Unmigratable | None:
    return Unmigratable(
        code=UnmigratableReason.SHARED_MEMORY,
        detail=f"shared memory device {shmem.get('name', '?')}",
    )


def _filesystem_blocker(fs: ET.Element, _shared: Sequence[str]) -> Unmigratable | None:
    driver = fs.find("driver")
    if driver is None or driver.get("type") != "virtiofs":
        return None
    target = fs.find("target")
    tag = target.get("dir", "?") if target is not None else "?"
    return Unmigratable(code=UnmigratableReason.OTHER, detail=f"virtiofs share {tag}")


_DEVICE_BLOCKERS: Final[
    tuple[tuple[str, Callable[[ET.Element, Sequence[str]], Unmigratable | None]], ...]
] = (
    ("disk", _disk_blocker),
    ("hostdev", _hostdev_blocker),
    ("interface", _interface_blocker),
    ("tpm", _tpm_blocker),
    ("shmem", _shmem_blocker),
    ("filesystem", _filesystem_blocker),
)
"""Each ``<devices>`` child that can block a migration, in the order they are reported."""
_BLOCKER_OF: Final = dict(_DEVICE_BLOCKERS)


def _device_blockers(devices: ET.Element | None, shared_paths: Sequence[str]) -> list[Unmigratable]:
    """The blockers among ``<devices>``' children, by kind in ``_DEVICE_BLOCKERS`` order."""
    if devices is None:
        return []
    found: dict[str, list[ET.Element]] | None = None
    for element in devices:  # one pass: most domains have none of these kinds
        if element.tag in _BLOCKER_OF:
            found = found or {}
            found.setdefault(element.tag, []).append(element)
    out: list[Unmigratable] = []
    if found:
        for kind, blocker_of in _DEVICE_BLOCKERS:
            for element in found.get(kind, ()):
                blocker = blocker_of(element, shared_paths)
                if blocker is not None:
                    out.append(blocker)
    return out


def migration_blockers(
    domain: ET.Element,
    *,
    shared_paths: Sequence[str] = (),
    cpu_models_differ: bool = False,
) -> list[Unmigratable]:
    """What in this parsed ``<domain>`` stops a live migration; empty when nothing does."""
    out = _device_blockers(domain.find("devices"), shared_paths)
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


class DomainReading(NamedTuple):
    """What the observer takes from one domain XML."""

    facts: DomainFacts
    metadata: DomainMetadata
    blockers: list[Unmigratable]
    """Found in the XML alone; a CPU mode that blocks only among mixed hosts is not here."""
    passthrough: str | None
    """``passthrough_cpu_mode`` of the domain."""
    disks: tuple[DiskRef, ...] = ()
    """Its ``<disk>`` elements, for ``domain_disks.resolve_disks`` against the host's pools."""
    needs: Needs | None = None
    """What it asks of a target host (CPU, machine type; huge pages for the planner)."""


def read_domain(xml: str | None, *, shared_paths: Sequence[str] = ()) -> DomainReading:
    """Everything the observer needs from one domain XML (None: libvirt gave none).

    XML that does not parse gives one ``Other`` blocker and no facts.
    """
    if xml is None:
        return _unreadable("domain XML not available")
    try:
        domain = ET.fromstring(xml)
    except ET.ParseError as err:
        return _unreadable(f"domain XML unreadable: {err}")
    return read_parsed_domain(domain, shared_paths=shared_paths)


_DOC: Final = "reconciler-document"
"""The element each text is wrapped in when several are parsed at once."""


def read_domains(
    xmls: Sequence[str | None], *, shared_paths: Sequence[str] = ()
) -> list[DomainReading]:
    """``read_domain`` of each text; the same answers, parsed in one go where they allow.

    One ElementTree parse of all of them, each wrapped in an element of its own, costs about
    half of one parse each (a parser per document is a large share of a small document).
    It is used only when every wrapper holds exactly one element and nothing else; otherwise
    (a text that does not parse alone, an XML declaration or DOCTYPE, which only a document's
    start may have) each text is parsed on its own.
    """
    present = [xml for xml in xmls if xml is not None]
    together = _parse_together(present) if len(present) > 1 else None
    if together is None:
        return [read_domain(xml, shared_paths=shared_paths) for xml in xmls]
    domains = iter(together)
    return [
        _unreadable("domain XML not available")
        if xml is None
        else read_parsed_domain(next(domains), shared_paths=shared_paths)
        for xml in xmls
    ]


def _parse_together(xmls: list[str]) -> list[ET.Element] | None:
    """The root element of each text, or None unless each parses as one document alone."""
    wrapped = f"<{_DOC}>" + f"</{_DOC}><{_DOC}>".join(xmls) + f"</{_DOC}>"
    try:
        outer = ET.fromstring(f"<{_DOC}s>{wrapped}</{_DOC}s>")
    except ET.ParseError:
        return None
    if len(outer) != len(xmls):
        return None
    roots: list[ET.Element] = []
    for doc in outer:
        if len(doc) != 1 or (doc.text and doc.text.strip()):
            return None
        root = doc[0]
        if root.tail and root.tail.strip():
            return None  # text after the root: not a document on its own
        root.tail = None  # as alone: a document's root has no text after it
        roots.append(root)
    return roots


def read_parsed_domain(domain: ET.Element, *, shared_paths: Sequence[str] = ()) -> DomainReading:
    """``read_domain`` of a parsed ``<domain>``."""
    return DomainReading(
        facts=domain_facts(domain),
        metadata=parse_metadata_element(domain),
        blockers=_device_blockers(domain.find("devices"), shared_paths),
        passthrough=passthrough_cpu_mode(domain),
        disks=tuple(disk_refs(domain)),
        needs=needs_of(domain),
    )


def _unreadable(detail: str) -> DomainReading:
    return DomainReading(
        facts=DomainFacts(vcpus=0, memory_max=0, memory_current=0),
        metadata=no_metadata(),
        blockers=[Unmigratable(code=UnmigratableReason.OTHER, detail=detail)],
        passthrough=None,
    )
