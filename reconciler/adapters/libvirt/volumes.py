"""The storage-pool volumes behind a VM's local disks, on its source and on a move's target.

Used by the moves that copy disks (``copy_move`` live, ``cold_move`` shut off) before they
change anything (:func:`prepare_copy`: the VM, its volumes, a target whose pools of the same
names hold none of them) and after (:func:`verify_volumes`: each target volume present with
the source's capacity). A target pool that already holds a volume of that name refuses the
move: libvirt would copy over it, and nothing here overwrites a volume.
"""

from __future__ import annotations

import contextlib
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any, Final

import libvirt

from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.errors import HostTimeout, HostUnreachable
from reconciler.model.plan import Move


class DiskMoveError(Exception):
    """A step of a disk move failed; the message says which."""


@dataclass(frozen=True)
class Volume:
    """A local disk of the VM as a storage-pool volume of the source host."""

    target: str
    pool: str
    name: str
    capacity: int
    allocation: int
    format: str | None
    path: str


def source_volumes(conn: Any, dom: Any, disks: list[str]) -> list[Volume]:
    """The pool volumes behind the guest devices ``disks`` of ``dom`` (its inactive XML)."""
    root = ET.fromstring(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    out: list[Volume] = []
    for disk in root.iterfind("devices/disk"):
        target = disk.find("target")
        dev = target.get("dev") if target is not None else None
        if dev not in disks:
            continue
        source = disk.find("source")
        if source is None:
            raise DiskMoveError(f"disk {dev} has no source")
        try:
            if disk.get("type") == "volume":
                pool = conn.storagePoolLookupByName(source.get("pool"))
                vol = pool.storageVolLookupByName(source.get("volume"))
            else:
                path = source.get("file") or source.get("dev")
                vol = conn.storageVolLookupByPath(path)
                pool = vol.storagePoolLookupByVolume()
            _kind, capacity, allocation = vol.info()
            vxml = ET.fromstring(vol.XMLDesc(0))
        except libvirt.libvirtError as err:
            raise DiskMoveError(f"disk {dev}: no storage volume found: {err}") from err
        fmt = vxml.find("target/format")
        out.append(
            Volume(
                target=str(dev),
                pool=pool.name(),
                name=vol.name(),
                capacity=int(capacity),
                allocation=int(allocation),
                format=fmt.get("type") if fmt is not None else None,
                path=vol.path(),
            )
        )
    missing = set(disks) - {v.target for v in out}
    if missing:
        raise DiskMoveError(f"disks {', '.join(sorted(missing))} not found in the definition")
    return out


def _target_volume(conn: Any, vol: Volume) -> Any | None:
    """The target's volume of the same pool and name, or None when it has none."""
    try:
        pool = conn.storagePoolLookupByName(vol.pool)
    except libvirt.libvirtError as err:
        raise DiskMoveError(f"the target has no storage pool {vol.pool}: {err}") from err
    with contextlib.suppress(libvirt.libvirtError):
        pool.refresh(0)
    try:
        return pool.storageVolLookupByName(vol.name)
    except libvirt.libvirtError:
        return None


def refuse_existing(conn: Any, volumes: list[Volume]) -> None:
    """Raise when the target's pools cannot take ``volumes``: a pool missing, a name taken."""
    for vol in volumes:
        if _target_volume(conn, vol) is not None:
            raise DiskMoveError(
                f"the target's pool {vol.pool} already holds a volume {vol.name}; "
                "it is never overwritten"
            )


def verify_volumes(conn: Any, volumes: list[Volume]) -> str | None:
    """None when each target volume is present with the source's capacity, else why not."""
    for vol in volumes:
        try:
            there = _target_volume(conn, vol)
            capacity = int(there.info()[1]) if there is not None else None
        except (libvirt.libvirtError, DiskMoveError) as err:
            return f"volume {vol.pool}/{vol.name} could not be checked on the target: {err}"
        if capacity is None:
            return f"volume {vol.pool}/{vol.name} is missing on the target"
        if capacity != vol.capacity:
            return (
                f"volume {vol.pool}/{vol.name} has {capacity} bytes on the target, "
                f"{vol.capacity} on the source"
            )
    return None


NOT_STARTED: Final = (libvirt.libvirtError, DiskMoveError, HostUnreachable, HostTimeout)
"""What ``prepare_copy`` raises: the move has not started and nothing has changed."""


@dataclass(frozen=True)
class CopySetup:
    """What a disk-copying move works on, looked up and checked before it changes anything."""

    src: Any
    """The source host's connection."""
    dom: Any
    uuid: str
    volumes: list[Volume]
    dst: Any
    """The target host's connection."""


def prepare_copy(
    pool: ConnectionPool, move: Move, uuid: str | None, *, shut_off: bool
) -> CopySetup:
    """Look up ``move.vm`` on its source (by UUID when known), the volumes to copy and the
    target, and refuse a target pool that already holds one of them. ``shut_off``: a cold
    move, which refuses a running VM. Raises one of ``NOT_STARTED``, a source or target that
    does not answer included."""
    src = pool.get(move.source)
    dom = src.lookupByUUIDString(uuid) if uuid else src.lookupByName(move.vm)
    if shut_off and dom.isActive():
        raise DiskMoveError(f"{move.vm} is running on {move.source}, not shut off")
    volumes = source_volumes(src, dom, list(move.disks))
    dst = pool.get(move.target)
    refuse_existing(dst, volumes)
    return CopySetup(src=src, dom=dom, uuid=dom.UUIDString(), volumes=volumes, dst=dst)
