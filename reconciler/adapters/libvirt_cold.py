"""Cold move of a shut-off VM: volumes streamed to the target's same-named pools, definition
moved, still shut off; the source cleaned only after verification (see
``libvirt_disk_moves``' module doc for the order and what a failure leaves)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import libvirt

from reconciler.adapters.libvirt_connection import close_connection, open_connection
from reconciler.adapters.libvirt_disk_moves import (
    CHUNK,
    DiskMoveError,
    Volume,
    copy_time_limit,
    delete_volumes,
    refuse_existing,
    source_volumes,
    verify_volumes,
)
from reconciler.model.migration import MigrationProgress, MigrationResult
from reconciler.model.plan import Move

if TYPE_CHECKING:
    from reconciler.adapters.libvirt_migrator import LibvirtMigrator

log = logging.getLogger(__name__)


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
        self.total = 0

    def stream(self, src: Any, dst: Any, vol: Volume, target_vol: Any) -> None:
        source_vol = src.storagePoolLookupByName(vol.pool).storageVolLookupByName(vol.name)
        down, up = src.newStream(0), dst.newStream(0)
        try:
            source_vol.download(down, 0, 0, 0)
            target_vol.upload(up, 0, 0, 0)
            while True:
                self._check()
                data = down.recv(CHUNK)
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
            elapsed=round(elapsed, 3),
            data_total=self.total,
            data_processed=self.sent,
            data_remaining=max(0, self.total - self.sent),
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
    migrator: LibvirtMigrator,
    move: Move,
    *,
    on_progress: Callable[[MigrationProgress], None],
    abort: threading.Event,
    uuid: str | None,
) -> MigrationResult:
    """Move shut-off ``move.vm`` with its volumes; verified before the source is cleaned."""
    began = time.monotonic()
    source, target = migrator.host_of(move.source), migrator.host_of(move.target)
    src = open_connection(source.uri, migrator.connection)  # raises: nothing started yet
    dst: Any = None
    created: dict[str, Any] = {}
    made: list[Volume] = []
    defined: Any = None
    copy: _Copy | None = None
    try:
        try:
            dom = src.lookupByUUIDString(uuid) if uuid else src.lookupByName(move.vm)
            if dom.isActive():
                raise DiskMoveError(f"{move.vm} is running on {move.source}, not shut off")
            volumes = source_volumes(src, dom, list(move.disks))
            dst = open_connection(target.uri, migrator.connection)
            refuse_existing(dst, volumes)
            _absent(dst, dom.UUIDString(), move)
            limit, _ = copy_time_limit(migrator.desired, move, 0)
            copy = _Copy(move, limit, abort, on_progress)
            copy.total = sum(v.allocation for v in volumes)
            for vol in volumes:
                pool = dst.storagePoolLookupByName(vol.pool)
                created[vol.target] = pool.createXML(_volume_xml(vol), 0)
                made.append(vol)
                copy.stream(src, dst, vol, created[vol.target])
            defined = dst.defineXML(_definition(dom, created))
            problem = verify_volumes(dst, volumes) or _defined_once(dst, dom.UUIDString())
            if problem is not None:
                raise DiskMoveError(f"not verified: {problem}")
            dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_KEEP_NVRAM)
        except (libvirt.libvirtError, DiskMoveError) as err:
            notes = _undo(dst, defined, made, move)
            return _result(move, began, False, "; ".join([f"cold move failed: {err}", *notes]))
        notes = delete_volumes(src, volumes, move.source)
        sent = copy.sent if copy is not None else 0
        return _result(move, began, True, "; ".join(notes) or None, sent)
    finally:
        close_connection(dst)
        close_connection(src)


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


def _undo(dst: Any, defined: Any, made: list[Volume], move: Move) -> list[str]:
    """Remove what this move made on the target: the definition, then the volumes."""
    notes: list[str] = []
    if dst is None:
        return notes
    if defined is not None:
        try:
            defined.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_KEEP_NVRAM)
        except libvirt.libvirtError as err:
            notes.append(f"its new definition on {move.target} could not be removed: {err}")
    notes += delete_volumes(dst, made, move.target)
    return notes


def _result(
    move: Move, began: float, ok: bool, error: str | None, sent: int | None = None
) -> MigrationResult:
    return MigrationResult(
        vm=move.vm,
        source=move.source,
        target=move.target,
        succeeded=ok,
        error=error,
        seconds=round(time.monotonic() - began, 3),
        data_bytes=sent,
    )
