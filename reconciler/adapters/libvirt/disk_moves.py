"""Moves that copy disks: live with ``VIR_MIGRATE_NON_SHARED_DISK`` (class copy) and cold
moves of shut-off VMs (class cold), each verified before the source is cleaned.

Live copy: the local disks the plan names are copied over NBD (``VIR_MIGRATE_PARAM_MIGRATE_DISKS``
lists them, so disks on shared storage are never copied); for a storage-pool volume the target
daemon precreates the volume in its pool of the same name. Before it starts, a target pool
that already holds a volume of that name refuses the move (libvirt would copy over it). After
libvirt's move is verified (the VM runs on the target only), each target volume must be present
with the source's capacity; only then are the source volumes deleted. A failed move deletes the
target volumes it created, so a failed copy leaves nothing behind and the source as it was.

Cold move: for each local volume a volume of the same name, format and capacity is created in
the target's pool of the same name and filled from the source through libvirt streams
(``virStorageVolDownload`` into ``virStorageVolUpload``); the definition is defined on the target
(file paths pointed at the new volumes), still shut off. Verified (defined once on the target,
each target volume with the source's capacity), the source definition is undefined and then its
volumes deleted. On any failure the target definition and volumes made are removed and the
source stays as it was.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

import libvirt

from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.errors import HostTimeout, HostUnreachable, ReconcilerError
from reconciler.model.desired import DesiredState
from reconciler.model.migration import MigrationProgress, MigrationResult
from reconciler.model.plan import Move

if TYPE_CHECKING:
    from reconciler.adapters.libvirt.migrator import LibvirtMigrator, MigrationCall

log = logging.getLogger(__name__)

GIB: Final = 1024**3
CHUNK: Final = 4 * 1024**2


class DiskMoveError(Exception):
    """A step of a disk move failed; the message says which."""


def copy_call(call: MigrationCall, desired: DesiredState, move: Move) -> MigrationCall:
    """``call`` for a live move that copies ``move.disks``, with ``migration.copy`` applied."""
    tuning = desired.policy.spec.migration
    over = tuning.copy_moves
    params = dict(call.params)
    params[libvirt.VIR_MIGRATE_PARAM_MIGRATE_DISKS] = list(move.disks)
    if over.bandwidth is not None:
        if over.bandwidth > 0:
            params[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH] = over.bandwidth
        else:
            params.pop(libvirt.VIR_MIGRATE_PARAM_BANDWIDTH, None)
    flags = call.flags | libvirt.VIR_MIGRATE_NON_SHARED_DISK
    for allowed, flag in (
        (over.auto_converge, libvirt.VIR_MIGRATE_AUTO_CONVERGE),
        (over.post_copy, libvirt.VIR_MIGRATE_POSTCOPY),
    ):
        if allowed is True:
            flags |= flag
        elif allowed is False:
            flags &= ~flag
    return replace(call, params=params, flags=flags)


def copy_time_limit(desired: DesiredState, move: Move, memory: int) -> tuple[float, str]:
    """Seconds a move that copies disks may run, and how that was reckoned.

    ``migration.copy.timeoutPerGiB`` (else ``timeoutPerGiB``) x the GiB copied: guest memory
    plus the disks' allocation.
    """
    tuning = desired.policy.spec.migration
    per = (tuning.copy_moves.timeout_per_gib or tuning.timeout_per_gib).total_seconds()
    gib = max(1, math.ceil((memory + move.disk_bytes) / GIB))
    return per * gib, f"timeoutPerGiB {per:g}s x {gib} GiB of memory and disks"


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

    dom: Any
    uuid: str
    volumes: list[Volume]
    dst: Any


def prepare_copy(
    src: Any, pool: ConnectionPool, move: Move, uuid: str | None, *, shut_off: bool
) -> CopySetup:
    """Look up ``move.vm`` on ``src`` (by UUID when known), the volumes to copy and the target,
    and refuse a target pool that already holds one of them. ``shut_off``: a cold move, which
    refuses a running VM. Raises one of ``NOT_STARTED``."""
    dom = src.lookupByUUIDString(uuid) if uuid else src.lookupByName(move.vm)
    if shut_off and dom.isActive():
        raise DiskMoveError(f"{move.vm} is running on {move.source}, not shut off")
    volumes = source_volumes(src, dom, list(move.disks))
    dst = pool.get(move.target)
    refuse_existing(dst, volumes)
    return CopySetup(dom=dom, uuid=dom.UUIDString(), volumes=volumes, dst=dst)


def live_copy(
    migrator: LibvirtMigrator,
    pool: ConnectionPool,
    move: Move,
    *,
    on_progress: Callable[[MigrationProgress], None],
    abort: threading.Event,
    uuid: str | None,
) -> MigrationResult:
    """A live move with its local disks copied, verified, then the source volumes deleted."""
    began = time.monotonic()
    src = pool.get(move.source)  # raises: nothing started yet
    try:
        setup = prepare_copy(src, pool, move, uuid, shut_off=False)
    except NOT_STARTED as err:
        return failed_before_start(move, began, f"not started: {err}")
    found, volumes = setup.uuid, setup.volumes
    leftovers = migrator.leftovers
    leftovers.expect(move.target, volumes, found)  # libvirt may precreate them
    try:
        result = migrator.migrate_live(pool, move, on_progress=on_progress, abort=abort, uuid=found)
    except ReconcilerError:  # the source stopped answering before anything started
        leftovers.remove(pool, move.target, found)
        raise
    if not result.succeeded:
        notes: list[str] = []
        if move.target not in (*result.running_on, *result.paused_on):
            notes = leftovers.remove(pool, move.target, found)  # libvirt precreated
        else:
            leftovers.forget(move.target, volumes, found)
        return result.model_copy(update={"error": "; ".join([result.error or "", *notes])})
    leftovers.forget(move.target, volumes, found)
    problem = verify_volumes(pool.get(move.target), volumes)
    if problem is not None:  # the VM runs there; keep every copy and say so
        return result.model_copy(
            update={"error": f"moved, but {problem}; the source volumes are kept"}
        )
    leftovers.expect(move.source, volumes, found)  # noted first: a crash now loses no track
    cleaned = leftovers.remove(pool, move.source, found)
    return result.model_copy(update={"error": "; ".join(cleaned) or result.error})


def failed_before_start(move: Move, began: float, error: str) -> MigrationResult:
    """A move that failed before anything changed, timed from ``began`` (monotonic)."""
    return MigrationResult(
        vm=move.vm,
        source=move.source,
        target=move.target,
        succeeded=False,
        error=error,
        seconds=round(time.monotonic() - began, 3),
    )
