"""A VM's disks and its migration class, from its domain XML and its host's storage pools.

Pure functions: the observer reads the disks with ``disk_refs``, asks the host for its pools
only when some disk may be local (``needs_pools``), then calls ``resolve_disks`` and
``classify``; the migrator reads them with ``disk_refs`` too, for libvirt's safety check
(``calls.declared_shared``). ``under`` is the one test of a path against the shared prefixes.
The classes (``MigrationClass``):

- ``shared``: running, and every disk is on storage all hosts see: a network disk (rbd, iscsi,
  nbd, gluster, ...), a path under ``spec.sharedStorage``, a volume of a pool of a network type
  (netfs, rbd, gluster, iscsi, ...) or whose folder is under ``spec.sharedStorage``, a
  ``<shareable/>`` disk, an empty cdrom or floppy.
- ``copy``: running, with local disks that libvirt can copy live (``VIR_MIGRATE_NON_SHARED_DISK``):
  each is a volume of one of the host's storage pools, which the target precreates in its
  pool of the same name.
- ``cold``: shut off (its local disks, if any, are pool volumes): volumes and definition move
  while it stays off.
- ``immovable``: a host device, a mediated device, vhost-user, shared memory, a vTPM, a
  virtiofs share, a local disk outside every storage pool (nothing on a target could take
  it), a state neither running nor shut off (crashed, suspended), or unreadable XML.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from reconciler.model.snapshot import (
    MigrationClass,
    Unmigratable,
    UnmigratableReason,
    VmDisk,
    VmRunState,
)

LOCAL_TYPES: Final = frozenset({"file", "block", "dir", "volume"})
SHARED_POOL_TYPES: Final = frozenset(
    {"netfs", "rbd", "gluster", "iscsi", "iscsi-direct", "sheepdog", "vstorage", "mpath"}
)
"""Pool types whose volumes every host reaches over the network."""
LIVE_STATES: Final = frozenset({VmRunState.RUNNING, VmRunState.PAUSED, VmRunState.BLOCKED})
_STORAGE_CODES: Final = frozenset(
    {UnmigratableReason.LOCAL_DISK, UnmigratableReason.NOT_RUNNING, UnmigratableReason.IN_FLIGHT}
)
"""Reasons that do not make a VM immovable: local disks may be copied, a shut-off VM moves
cold, and a VM in flight is a moment, not a property."""


@dataclass(frozen=True, slots=True)
class DiskRef:
    """One ``<disk>`` as the domain XML declares it."""

    target: str
    device: str
    kind: str
    path: str | None = None
    pool: str | None = None
    volume: str | None = None
    protocol: str | None = None
    name: str | None = None
    shareable: bool = False
    readonly: bool = False

    @property
    def source(self) -> str:
        if self.kind == "volume":
            return f"{self.pool or '?'}/{self.volume or '?'}"
        if self.kind == "network":
            return f"{self.protocol or '?'}:{self.name or ''}"
        return self.path or ""


@dataclass(frozen=True, slots=True)
class PoolVolume:
    name: str
    path: str
    capacity: int
    allocation: int


@dataclass(frozen=True, slots=True)
class PoolInfo:
    """A storage pool of one host and its volumes (by name)."""

    name: str
    kind: str
    target: str | None
    volumes: dict[str, PoolVolume] = field(default_factory=dict)


def disk_refs(domain: ET.Element) -> list[DiskRef]:
    """The ``<disk>`` elements of a parsed ``<domain>``, in order."""
    out: list[DiskRef] = []
    for disk in domain.iterfind("devices/disk"):
        target = disk.find("target")
        source = disk.find("source")
        kind = disk.get("type", "file")
        ref = DiskRef(
            target=target.get("dev", "?") if target is not None else "?",
            device=disk.get("device", "disk"),
            kind=kind,
            shareable=disk.find("shareable") is not None,
            readonly=disk.find("readonly") is not None,
        )
        if source is not None:
            path = next((source.get(a) for a in ("file", "dev", "dir") if source.get(a)), None)
            ref = DiskRef(
                target=ref.target,
                device=ref.device,
                kind=kind,
                path=path,
                pool=source.get("pool"),
                volume=source.get("volume"),
                protocol=source.get("protocol"),
                name=source.get("name"),
                shareable=ref.shareable,
                readonly=ref.readonly,
            )
        out.append(ref)
    return out


def under(path: str, prefixes: Sequence[str]) -> bool:
    """Whether ``path`` is one of ``prefixes`` or in a folder of one (``/a`` holds ``/a/b``,
    not ``/ab``); a prefix's trailing slash does not count."""
    for prefix in prefixes:
        p = prefix.rstrip("/")
        if p and (path == p or path.startswith(p + "/")):
            return True
    return False


def _maybe_local(ref: DiskRef, shared_paths: Sequence[str]) -> bool:
    if ref.kind not in LOCAL_TYPES or ref.shareable:
        return False
    if ref.kind == "volume":
        return True
    return ref.path is not None and not under(ref.path, shared_paths)


def needs_pools(refs: Iterable[DiskRef], shared_paths: Sequence[str]) -> bool:
    """Whether some disk may be local: only then is the host asked for its pools."""
    return any(_maybe_local(ref, shared_paths) for ref in refs)


def _pool_shared(pool: PoolInfo, shared_paths: Sequence[str]) -> bool:
    return pool.kind in SHARED_POOL_TYPES or (
        pool.target is not None and under(pool.target, shared_paths)
    )


def resolve_disks(
    refs: Sequence[DiskRef], pools: dict[str, PoolInfo] | None, shared_paths: Sequence[str]
) -> list[VmDisk]:
    """Each disk with where it lives. ``pools`` None: the host's pools are unknown."""
    by_path: dict[str, tuple[PoolInfo, PoolVolume]] = {}
    for pool in (pools or {}).values():
        for vol in pool.volumes.values():
            by_path.setdefault(vol.path, (pool, vol))
    return [_resolve(ref, pools, by_path, shared_paths) for ref in refs]


def _resolve(
    ref: DiskRef,
    pools: dict[str, PoolInfo] | None,
    by_path: dict[str, tuple[PoolInfo, PoolVolume]],
    shared_paths: Sequence[str],
) -> VmDisk:
    base = VmDisk(target=ref.target, source=ref.source, shared=True)
    if ref.kind == "network":
        return base.model_copy(update={"why": f"{ref.protocol or 'network'} disk"})
    if ref.kind not in LOCAL_TYPES:
        # nvme, vhostuser: not storage to copy; their own reasons make the VM immovable
        return base.model_copy(update={"why": f"{ref.kind} disk, nothing to copy"})
    if ref.shareable:
        return base.model_copy(update={"why": "marked shareable"})
    found: tuple[PoolInfo, PoolVolume] | None = None
    if ref.kind == "volume":
        pool = (pools or {}).get(ref.pool or "")
        vol = pool.volumes.get(ref.volume or "") if pool is not None else None
        if pool is not None and vol is not None:
            found = (pool, vol)
    elif ref.path is None:
        if ref.device in ("cdrom", "floppy"):
            return base.model_copy(update={"why": f"empty {ref.device}"})
        return base.model_copy(update={"shared": False, "why": "no source"})
    else:
        if under(ref.path, shared_paths):
            return base.model_copy(update={"why": "under a sharedStorage path"})
        found = by_path.get(ref.path)
    if found is None:
        where = "pools unknown" if pools is None else "in no storage pool of this host"
        return base.model_copy(update={"shared": False, "why": where})
    pool, vol = found
    update: dict[str, object] = {
        "pool": pool.name,
        "volume": vol.name,
        "capacity": vol.capacity,
        "allocation": vol.allocation,
    }
    if _pool_shared(pool, shared_paths):
        update["why"] = f"pool {pool.name} ({pool.kind}) is shared"
        return base.model_copy(update=update)
    update |= {"shared": False, "why": f"volume of the local {pool.kind} pool {pool.name}"}
    return base.model_copy(update=update)


def copyable(disk: VmDisk) -> bool:
    """A local disk libvirt can recreate on a target: a volume of a storage pool."""
    return not disk.shared and disk.pool is not None and disk.volume is not None


def local_disk_blockers(disks: Sequence[VmDisk]) -> list[Unmigratable]:
    """The ``LocalDisk`` reasons of resolved disks: every disk not on shared storage."""
    return [
        Unmigratable(
            code=UnmigratableReason.LOCAL_DISK,
            detail=f"disk {d.target} is local: {d.source} ({d.why})",
        )
        for d in disks
        if not d.shared
    ]


def _mib(n: int | None) -> str:
    return "size unknown" if n is None else f"{n / 2**20:.0f} MiB to copy"


def classify(
    state: VmRunState, blockers: Sequence[Unmigratable], disks: Sequence[VmDisk]
) -> tuple[MigrationClass, list[str]]:
    """The migration class of a VM and the reasons, from its state, blockers and disks."""
    hard = [b.detail for b in blockers if b.code not in _STORAGE_CODES]
    local = [d for d in disks if not d.shared]
    stuck = [d for d in local if not copyable(d)]
    hard += [f"disk {d.target} ({d.source}) is local and {d.why}" for d in stuck]
    if hard:
        return MigrationClass.IMMOVABLE, hard
    copies = [f"disk {d.target}: {d.source}, {_mib(d.allocation)}" for d in local]
    if state is VmRunState.SHUTOFF:
        return MigrationClass.COLD, ["the VM is shut off", *copies]
    if state not in LIVE_STATES:
        return MigrationClass.IMMOVABLE, [f"the VM is {state}: neither running nor shut off"]
    if local:
        return MigrationClass.COPY, copies
    if not disks:
        return MigrationClass.SHARED, ["no disks"]
    return MigrationClass.SHARED, [f"disk {d.target}: {d.why}" for d in disks]


def disk_bytes(disks: Sequence[VmDisk]) -> int:
    """Bytes a move copies of these disks: the allocation of the local ones."""
    return sum(d.allocation or 0 for d in disks if not d.shared)
