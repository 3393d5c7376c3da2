"""A cold move of a shut-off VM (class cold): volumes streamed to the target's same-named
pools, the definition moved, still shut off; the source cleaned only after verification.

For each local volume a volume of the same name, format and capacity is created in the target's
pool of the same name (``volumes.prepare_copy`` checked first that none is there) and filled
from the source through libvirt streams (``virStorageVolDownload`` into ``virStorageVolUpload``);
the definition is defined on the target (file paths pointed at the new volumes), still shut off.
Verified (defined once on the target, each target volume with the source's capacity), the source
definition is undefined and then its volumes deleted. On any failure the target definition and
volumes made are removed (``leftovers`` keeps the volumes of a target that does not answer, to
delete when it does) and the source stays as it was.

Streams are sparse (``VIR_STORAGE_VOL_DOWNLOAD_SPARSE_STREAM`` into ``..._UPLOAD_SPARSE_STREAM``):
holes travel as lengths, so a mostly empty volume copies in the time of its data and stays
sparse on the target. The definition defined on the target carries the source's metadata, the
move's intent included: a reconciler stopped between defining it and undefining the source
finds the VM defined on both hosts with the same intent, shut off on both, and removes the
target's copy (:func:`discard_copy`); the source was never touched before verification.

The copy is bounded by ``migration.copy.timeoutPerGiB`` (else ``timeoutPerGiB``) x the GiB of
its disks, and stops when the caller sets ``abort``. It never raises for the move: a source or
target that does not answer before anything started is a result with ``succeeded=False``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any, Final

import libvirt

from reconciler.adapters.libvirt.leftovers import Leftovers
from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.adapters.libvirt.results import ended, failed_before_start
from reconciler.adapters.libvirt.volumes import (
    NOT_STARTED,
    DiskMoveError,
    Volume,
    prepare_copy,
    verify_volumes,
)
from reconciler.errors import ReconcilerError
from reconciler.model.migration import MigrationProgress, MigrationResult
from reconciler.model.plan import Move

log = logging.getLogger(__name__)

CHUNK: Final = 4 * 1024**2
"""Bytes asked of the source's stream at a time."""

_HOLE = -3
"""What ``recvFlags`` returns with ``VIR_STREAM_RECV_STOP_AT_HOLE`` when a hole comes next."""


def _volume_xml(vol: Volume) -> str:
    fmt = f"<target><format type='{vol.format}'/></target>" if vol.format else ""
    return (
        f"<volume><name>{vol.name}</name><capacity unit='bytes'>{vol.capacity}</capacity>"
        f"<allocation unit='bytes'>0</allocation>{fmt}</volume>"
    )


class _Copy:
    """Streams one volume after another, watching the time limit and ``abort``."""

    def __init__(
        self,
        move: Move,
        limit: float,
        abort: threading.Event,
        on_progress: Callable[[MigrationProgress], None],
    ) -> None:
        self.move, self.limit, self.abort, self.on_progress = move, limit, abort, on_progress
        self.started = time.monotonic()
        self.sent = 0
        self.holes = 0
        self.total = 0

    def stream(self, src: Any, dst: Any, vol: Volume, target_vol: Any) -> None:
        source_vol = src.storagePoolLookupByName(vol.pool).storageVolLookupByName(vol.name)
        down, up = src.newStream(0), dst.newStream(0)
        try:
            source_vol.download(down, 0, 0, libvirt.VIR_STORAGE_VOL_DOWNLOAD_SPARSE_STREAM)
            target_vol.upload(up, 0, 0, libvirt.VIR_STORAGE_VOL_UPLOAD_SPARSE_STREAM)
            while True:
                self._check()
                data = down.recvFlags(CHUNK, libvirt.VIR_STREAM_RECV_STOP_AT_HOLE)
                if data == _HOLE:
                    length = down.recvHole(0)
                    up.sendHole(length, 0)
                    self.holes += length
                    continue
                if isinstance(data, int) or not data:  # -2: would block (not in blocking mode)
                    break
                view = memoryview(data)
                while view:
                    sent = up.send(view.tobytes())
                    view = view[sent:]
                self.sent += len(data)
                self._report()
            down.finish()
            up.finish()
        except BaseException:
            for stream in (down, up):
                with contextlib.suppress(libvirt.libvirtError):
                    stream.abort()
            raise

    def _check(self) -> None:
        elapsed = time.monotonic() - self.started
        if self.abort.is_set():
            raise DiskMoveError("stopped on request")
        if elapsed > self.limit:
            raise DiskMoveError(f"ran past its limit of {self.limit:g}s")

    def _report(self) -> None:
        elapsed = time.monotonic() - self.started
        progress = MigrationProgress(
            vm=self.move.vm,
            phase="disk",
            elapsed=round(elapsed, 3),
            data_total=self.total,
            data_processed=self.sent,
            data_remaining=max(0, self.total - self.sent),
            disk_total=self.total,
            disk_processed=self.sent,
            bytes_per_second=self.sent / elapsed if elapsed > 0 else 0.0,
        )
        try:
            self.on_progress(progress)
        except Exception:
            log.exception("progress callback failed for %s", self.move.vm)


def _definition(dom: Any, created: dict[str, Any]) -> str:
    """The inactive XML with file and block disks pointed at the new volumes' paths."""
    root = ET.fromstring(
        dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE | libvirt.VIR_DOMAIN_XML_SECURE)
    )
    for disk in root.iterfind("devices/disk"):
        target, source = disk.find("target"), disk.find("source")
        dev = target.get("dev") if target is not None else None
        if dev in created and source is not None and disk.get("type") in ("file", "block"):
            source.set("file" if disk.get("type") == "file" else "dev", created[dev].path())
    return ET.tostring(root, encoding="unicode")


def cold_move(
    pool: ConnectionPool,
    leftovers: Leftovers,
    move: Move,
    *,
    limit: float,
    on_progress: Callable[[MigrationProgress], None],
    abort: threading.Event,
    uuid: str | None,
) -> MigrationResult:
    """Move shut-off ``move.vm`` with its volumes within ``limit`` seconds; verified before the
    source is cleaned."""
    began = time.monotonic()
    try:
        setup = prepare_copy(pool, move, uuid, shut_off=True)
        _absent(setup.dst, setup.uuid, move)
    except NOT_STARTED as err:
        return failed_before_start(move, began, f"not started: {err}")
    src, dom, found, volumes, dst = setup.src, setup.dom, setup.uuid, setup.volumes, setup.dst
    created: dict[str, Any] = {}
    defined: Any = None
    copy = _Copy(move, limit, abort, on_progress)
    copy.total = sum(v.allocation for v in volumes)
    leftovers.expect(move.target, volumes, found)
    try:
        for vol in volumes:
            target_pool = dst.storagePoolLookupByName(vol.pool)
            created[vol.target] = target_pool.createXML(_volume_xml(vol), 0)
            copy.stream(src, dst, vol, created[vol.target])
        defined = dst.defineXML(_definition(dom, created))
        problem = verify_volumes(dst, volumes) or _defined_once(dst, found)
        if problem is not None:
            raise DiskMoveError(f"not verified: {problem}")
        # from here the target's copies are the VM's disks and the source's are leftovers
        leftovers.forget(move.target, volumes, found)
        leftovers.expect(move.source, volumes, found)
        dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_KEEP_NVRAM)
    except (libvirt.libvirtError, DiskMoveError) as err:
        # the source's volumes are its disks again, the target's leftovers again
        leftovers.forget(move.source, volumes, found)
        leftovers.expect(move.target, volumes, found)
        notes = _undo(leftovers, pool, move, defined, found)
        return ended(move, began, error="; ".join([f"cold move failed: {err}", *notes]))
    notes = leftovers.remove(pool, move.source, found)
    return ended(move, began, succeeded=True, error="; ".join(notes) or None, data_bytes=copy.sent)


def _absent(dst: Any, uuid: str, move: Move) -> None:
    try:
        dst.lookupByUUIDString(uuid)
    except libvirt.libvirtError:
        return
    raise DiskMoveError(f"{move.target} already has a domain with the UUID of {move.vm}")


def _defined_once(dst: Any, uuid: str) -> str | None:
    try:
        dom = dst.lookupByUUIDString(uuid)
    except libvirt.libvirtError as err:
        return f"not defined on the target: {err}"
    if not dom.isPersistent() or dom.isActive():
        return "on the target it is not a persistent shut-off definition"
    return None


def _undo(
    leftovers: Leftovers, pool: ConnectionPool, move: Move, defined: Any, uuid: str
) -> list[str]:
    """Remove what this move made on the target: the definition, then the volumes (noted as
    leftovers when the target does not answer, deleted when it does again)."""
    notes: list[str] = []
    if defined is not None:
        try:
            defined.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_KEEP_NVRAM)
        except libvirt.libvirtError as err:
            notes.append(f"its new definition on {move.target} could not be removed: {err}")
    return notes + leftovers.remove(pool, move.target, uuid)


def discard_copy(pool: ConnectionPool, leftovers: Leftovers, host: str, uuid: str) -> None:
    """Remove the shut-off copy of domain ``uuid`` a stopped cold move left on ``host``: its
    definition, then the volumes noted for it; ReconcilerError when that cannot be done."""
    try:
        dom = pool.call(host, lambda c: c.lookupByUUIDString(uuid))
        if dom.isActive():
            raise ReconcilerError(f"the copy of {uuid} on {host} runs: it is kept")
        dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_KEEP_NVRAM)
    except libvirt.libvirtError as err:
        raise ReconcilerError(f"the copy of {uuid} on {host} could not be removed: {err}") from err
    for note in leftovers.remove(pool, host, uuid):
        log.warning("%s", note)
