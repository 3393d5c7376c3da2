"""Target volumes a failed disk move may have left behind, removed when their host answers.

Before a move creates volumes on a target (libvirt precreating them for a live copy, or a
cold move creating them itself), they are noted here; after the move they are either the VM's
disks (it runs or is defined there: the note is dropped) or leftovers to delete. A target that
died mid-copy cannot be asked then: the note stays, in a file of the state directory when there
is one (``leftover-volumes.json``, a ``files.json_store.JsonStore`` like the status: replaced
atomically and flushed to disk, so a restarted reconciler finds it), and the volume is deleted
on a later move once that host answers again. A ledger that cannot be read or written is a
warning: the note in memory still serves the process.

A noted volume is deleted only when no domain defined on its host refers to it (by path, or
by pool and name): a move whose outcome was misjudged, or a VM defined there since, keeps its
disk. Each volume was checked absent on the target before its move started. A volume the shut-off
copy of its own VM refers to (a cold move stopped midway) stays noted: it goes once that copy
is discarded.

A live copy notes its source volumes too, before libvirt starts (libvirt undefines the source
as the move ends, so a reconciler stopped then would otherwise lose track of them), each
``after`` the move's target: such a volume is deleted only once its own VM runs on that
target, with a volume of the same pool and name there of the same capacity, and no domain on
the source refers to it; a domain of its own VM active on the source (the move did not
happen) keeps it and drops the note; otherwise it waits.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import libvirt

from reconciler.adapters.files.json_store import JsonStore
from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.adapters.libvirt.volumes import Volume, verify_volumes
from reconciler.errors import ReconcilerError

log = logging.getLogger(__name__)

RETRY_AFTER: Final = 60.0
"""Seconds before a host that did not answer is tried again within one process."""


@dataclass(frozen=True)
class Leftover:
    host: str
    pool: str
    volume: str
    vm_uuid: str
    after: str = ""
    """A live copy's source volume: the move's target, where its VM must run first ("": a
    volume a move creates on its target)."""


class Leftovers:
    """The noted volumes; ``path`` keeps them across restarts (None: this process only)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._file = _ledger(path) if path is not None else None
        self._lock = threading.Lock()
        self._failed_at: dict[str, float] = {}
        self._moving: set[str] = set()
        """VMs whose move runs now in this process: their volumes are not leftovers yet."""
        self._entries: list[Leftover] = self._load()

    def _load(self) -> list[Leftover]:
        if self._file is None:
            return []
        try:
            return self._file.load() or []
        except ReconcilerError as err:  # unread, it still serves this process from now on
            log.warning("%s", err)
            return []

    def _save(self) -> None:
        if self._file is None:
            return
        try:
            self._file.save(self._entries)
        except ReconcilerError as err:  # the note in memory still serves this process
            log.warning("%s", err)

    def entries(self) -> list[Leftover]:
        with self._lock:
            return list(self._entries)

    def expect(
        self, host: str, volumes: Iterable[Volume], vm_uuid: str, *, after: str = ""
    ) -> None:
        """Note ``volumes`` as about to be created on ``host`` by a move of ``vm_uuid``; with
        ``after``, as the source volumes of a live copy to ``after``, left behind once it
        runs there."""
        with self._lock:
            self._moving.add(vm_uuid)
            known = set(self._entries)
            for v in volumes:
                entry = Leftover(host, v.pool, v.name, vm_uuid, after)
                if entry not in known:
                    self._entries.append(entry)
            self._save()

    def forget(self, host: str, volumes: Iterable[Volume], vm_uuid: str) -> None:
        """They are the VM's disks now, not leftovers."""
        names = {(v.pool, v.name) for v in volumes}
        with self._lock:
            self._moving.discard(vm_uuid)
            self._entries = [
                e for e in self._entries if not (e.host == host and (e.pool, e.volume) in names)
            ]
            self._save()

    def remove(self, pool: ConnectionPool, host: str, vm_uuid: str | None = None) -> list[str]:
        """Delete the noted volumes of ``host`` (of the move of ``vm_uuid`` only, when given)
        that no domain there uses; notes on what was not."""
        notes: list[str] = []
        with self._lock:
            self._moving.discard(vm_uuid or "")
            mine = [
                e
                for e in self._entries
                if e.host == host
                and (e.vm_uuid == vm_uuid if vm_uuid else e.vm_uuid not in self._moving)
            ]
        try:
            conn = pool.get(host)
            used = _used(conn)
        except (ReconcilerError, libvirt.libvirtError) as err:
            self._failed_at[host] = time.monotonic()
            kept = [f"{e.pool}/{e.volume}" for e in mine]
            if kept:
                notes.append(
                    f"{host} did not answer ({err}): volumes {', '.join(kept)} are noted "
                    "and will be deleted when it answers again"
                )
            return notes
        self._failed_at.pop(host, None)
        for entry in mine:
            note = _delete(conn, entry, used, pool)
            if note is not None and note.startswith("could not"):
                notes.append(note)
                continue
            if note == _WAIT:
                continue
            if note is not None:
                log.info("%s", note)
            with self._lock:
                self._entries = [e for e in self._entries if e != entry]
                self._save()
        return notes

    def sweep(self, pool: ConnectionPool) -> None:
        """Try every host with noted volumes that was not just found silent."""
        now = time.monotonic()
        for host in sorted({e.host for e in self.entries()}):
            if host not in pool.uris:
                continue
            if now - self._failed_at.get(host, -RETRY_AFTER) < RETRY_AFTER:
                continue
            for note in self.remove(pool, host):
                log.warning("leftover volumes: %s", note)


def _ledger(path: Path) -> JsonStore[list[Leftover]]:
    """The ledger's file: a JSON list of the noted volumes."""
    return JsonStore(
        path,
        what="leftover volumes record",
        parse=lambda data: [Leftover(**e) for e in data],
        dump=lambda entries: json.dumps([asdict(e) for e in entries], indent=1),
        mode=0o644,
        if_unreadable="volumes noted in it are not deleted by this reconciler",
    )


_WAIT = "wait"


def _used(conn: Any) -> dict[str, tuple[str, bool]]:
    """Paths and ``pool/volume`` names the domains defined on ``conn``'s host refer to, each
    with the UUID of the domain and whether it is active."""
    used: dict[str, tuple[str, bool]] = {}
    for dom in conn.listAllDomains(0):
        with contextlib.suppress(libvirt.libvirtError, ET.ParseError):
            root = ET.fromstring(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
            user = (str(dom.UUIDString()), bool(dom.isActive()))
            for source in root.iterfind("devices/disk/source"):
                for key in ("file", "dev"):
                    if source.get(key):
                        used[str(source.get(key))] = user
                if source.get("pool") and source.get("volume"):
                    used[f"{source.get('pool')}/{source.get('volume')}"] = user
    return used


def _delete(
    conn: Any, entry: Leftover, used: dict[str, tuple[str, bool]], hosts: ConnectionPool
) -> str | None:
    """Delete one noted volume; what happened, None when it was not there. ``hosts``: where a
    live copy's source volume is checked to have arrived (:func:`_arrived`)."""
    where = f"{entry.pool}/{entry.volume} on {entry.host}"
    try:
        pool = conn.storagePoolLookupByName(entry.pool)
        with contextlib.suppress(libvirt.libvirtError):
            pool.refresh(0)
        vol = pool.storageVolLookupByName(entry.volume)
    except libvirt.libvirtError:
        return None
    try:
        user = used.get(vol.path()) or used.get(f"{entry.pool}/{entry.volume}")
        if user == (entry.vm_uuid, False):
            return _WAIT  # the shut-off copy of its VM: it goes when that copy is discarded
        if user is not None:
            return f"kept volume {where}: a domain there uses it"
        if entry.after and not _arrived(hosts, entry, int(vol.info()[1])):
            return _WAIT  # its VM is not (yet) running on the target with its copy
        vol.delete(0)
    except libvirt.libvirtError as err:
        return f"could not delete volume {where}: {err}"
    return f"deleted leftover volume {where}"


def _arrived(pool: ConnectionPool, entry: Leftover, capacity: int) -> bool:
    """Whether the VM of ``entry`` (a live copy's source volume) runs on ``entry.after`` with a
    volume of the same pool and name there of ``capacity`` bytes; False when that host does
    not answer or cannot tell."""
    copy = Volume("", entry.pool, entry.volume, capacity, 0, None, "")
    try:
        conn = pool.get(entry.after)
        running = conn.lookupByUUIDString(entry.vm_uuid).state()[0] == libvirt.VIR_DOMAIN_RUNNING
        return running and verify_volumes(conn, [copy]) is None
    except (ReconcilerError, libvirt.libvirtError):
        return False
