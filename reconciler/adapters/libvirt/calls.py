"""What a migration's libvirt call is made with, and how long it may run: pure, no connection.

The bottom of the migration adapter (``migrator`` on top dispatches to ``live_move``,
``copy_move`` and ``cold_move``, which use ``volumes`` and ``leftovers``; all of them build
their calls here). Tested without libvirt daemons.

- :func:`migration_call`: ``migrateToURI3``'s destination, typed parameters and flags for a
  peer-to-peer live migration (``LIVE | PEER2PEER | PERSIST_DEST | UNDEFINE_SOURCE``): the
  migration URI from the Cluster's ``migration.uri`` template, the listen address from the
  target's ``address``, the bandwidth from ``migration.bandwidth`` (after a switch to post-copy
  too); auto-converge and post-copy only when the policy allows them; ``VIR_MIGRATE_UNSAFE``
  only when asked (:func:`declared_shared`).
- :func:`copy_call`: the same call for a move that copies its local disks
  (``VIR_MIGRATE_NON_SHARED_DISK`` with ``migrate_disks``), ``migration.copy`` applied.
- :func:`declared_shared`: whether the operator's ``spec.sharedStorage`` answers libvirt's
  safety check. libvirt refuses a live migration ("Migration without shared storage is
  unsafe") when a file disk it is not told to copy lies on a file system it does not itself
  know as shared (NFS, CephFS, GlusterFS, ... are known; a local folder, or a cluster file
  system it does not recognise, are not). ``VIR_MIGRATE_UNSAFE`` is what ``virsh migrate
  --unsafe`` passes; it is passed exactly when there is such a disk and every such disk is
  under a declared shared path, never otherwise.
- :func:`watch_limits`: how long the migration may run and how long without progress.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import libvirt

from reconciler.adapters.libvirt.domain_disks import DiskRef, under
from reconciler.model.cluster import Host
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Move
from reconciler.model.snapshot import MigrationClass

GIB: Final = 1024**3
FLAGS: Final = (
    libvirt.VIR_MIGRATE_LIVE
    | libvirt.VIR_MIGRATE_PEER2PEER
    | libvirt.VIR_MIGRATE_PERSIST_DEST
    | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
)


def migration_uri(template: str | None, host: Host) -> str | None:
    """The target's migration URI from the Cluster's template, or None without a template."""
    if template is None:
        return None
    return template.replace("{address}", host.address or host.name).replace("{name}", host.name)


@dataclass(frozen=True)
class MigrationCall:
    """What ``migrateToURI3`` is called with for one move."""

    dest_uri: str
    params: dict[str, Any]
    flags: int


def migration_call(desired: DesiredState, target: Host, *, unsafe: bool = False) -> MigrationCall:
    """The destination URI, typed parameters and flags of a migration to ``target``;
    ``unsafe`` adds ``VIR_MIGRATE_UNSAFE`` (see :func:`declared_shared`)."""
    defaults = desired.cluster.spec.defaults.migration
    template = target.migration.uri or defaults.uri
    bandwidth = target.migration.bandwidth
    if bandwidth is None:
        bandwidth = defaults.bandwidth or 0
    params: dict[str, Any] = {}
    uri = migration_uri(template, target)
    if uri is not None:
        params[libvirt.VIR_MIGRATE_PARAM_URI] = uri
    if target.address is not None:
        params[libvirt.VIR_MIGRATE_PARAM_LISTEN_ADDRESS] = target.address
    if bandwidth > 0:
        params[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH] = bandwidth
    tuning = desired.policy.spec.migration
    flags = FLAGS
    if tuning.auto_converge:
        flags |= libvirt.VIR_MIGRATE_AUTO_CONVERGE
    if tuning.post_copy:
        flags |= libvirt.VIR_MIGRATE_POSTCOPY
    if unsafe:
        flags |= libvirt.VIR_MIGRATE_UNSAFE
    return MigrationCall(
        dest_uri=target.uri, params=_post_copy_bandwidth(params, flags), flags=flags
    )


def _post_copy_bandwidth(params: dict[str, Any], flags: int) -> dict[str, Any]:
    """``params`` with the bandwidth after a switch to post-copy set to the bandwidth before
    it: QEMU's own default there is no limit at all."""
    out = {k: v for k, v in params.items() if k != libvirt.VIR_MIGRATE_PARAM_BANDWIDTH_POSTCOPY}
    if flags & libvirt.VIR_MIGRATE_POSTCOPY and libvirt.VIR_MIGRATE_PARAM_BANDWIDTH in out:
        out[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH_POSTCOPY] = out[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH]
    return out


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
    return replace(call, params=_post_copy_bandwidth(params, flags), flags=flags)


def objected_disks(disks: Sequence[DiskRef], copied: Collection[str]) -> list[DiskRef]:
    """The disks libvirt's safety check holds against a migration on a file system it does not
    know as shared: file disks (and volumes whose file was not found) with a medium, not
    read-only, not among the ``copied`` guest devices. Block, directory and network disks it
    does not hold against one."""
    return [
        d
        for d in disks
        if d.kind in ("file", "volume")
        and (d.path is not None or d.kind == "volume")
        and not d.readonly
        and d.target not in copied
    ]


def declared_shared(
    disks: Sequence[DiskRef], copied: Collection[str], shared_paths: Sequence[str]
) -> bool:
    """Whether to pass ``VIR_MIGRATE_UNSAFE``: some disk libvirt may object to, and every such
    disk a file under a path declared shared (``spec.sharedStorage``)."""
    objected = objected_disks(disks, copied)
    return bool(objected) and all(
        d.kind == "file" and d.path is not None and under(d.path, shared_paths) for d in objected
    )


def time_limit(desired: DesiredState, memory_bytes: int) -> float:
    """Seconds a migration of a guest this big may run: timeoutPerGiB x GiB, rounded up."""
    per_gib = desired.policy.spec.migration.timeout_per_gib.total_seconds()
    return per_gib * max(1, math.ceil(memory_bytes / GIB))


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
class Limits:
    """How long a live migration may run, and without progress, before it is aborted."""

    seconds: float
    why: str
    """How ``seconds`` was reckoned, for the abort's message."""
    stall: float
    """Seconds without a new low of the memory still to send (``progressTimeout``)."""


def watch_limits(desired: DesiredState, move: Move, memory: int) -> Limits:
    """The limits of a live migration of ``move`` whose guest has ``memory`` bytes: by guest
    memory, or for a move that copies disks by memory and disks, with ``migration.copy``'s
    own ``progressTimeout`` when it has one."""
    tuning = desired.policy.spec.migration
    stall = tuning.progress_timeout.total_seconds()
    if move.migration_class is MigrationClass.COPY:
        seconds, why = copy_time_limit(desired, move, memory)
        own = tuning.copy_moves.progress_timeout
        return Limits(seconds, why, own.total_seconds() if own is not None else stall)
    why = (
        f"timeoutPerGiB {tuning.timeout_per_gib.total_seconds():g}s "
        f"x {max(1, math.ceil(memory / GIB))} GiB"
    )
    return Limits(time_limit(desired, memory), why, stall)
