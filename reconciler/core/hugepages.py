"""Huge pages as a capacity: what a VM backed by them takes, what a host has room for.

A host's *room* in pages of one size is what it has free plus what the VMs on it hold, both
as observed: migrations between observed hosts move pages, they do not make or free them, so
the room stays put while the planner moves VMs and a host may take VMs of a size as long as
the pages of all the VMs planned onto it fit that room. A host that reported no free pages
(its driver has no ``getFreePages``, or did not answer) has no room to keep: it is not
limited. A host that reported sizes, but not a VM's, offers no page of it: room 0.

Nothing here runs when no VM uses huge pages: the model then carries no rooms.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from reconciler.core.capacity import INACTIVE_STATES
from reconciler.model.snapshot import HostState, Snapshot, VmState

DEFAULT_PAGE_KIB: Final = 2048
"""The page size of ``<hugepages/>`` without a ``<page>``: x86_64's default huge page."""

Need = tuple[int, int]
"""(page size in KiB, pages)."""


def pages_for(memory: int, page_kib: int) -> int:
    """Pages of ``page_kib`` KiB that hold ``memory`` bytes (rounded up)."""
    return -(-memory // (page_kib * 1024)) if page_kib > 0 else 0


def need_of(vm: VmState) -> Need | None:
    """The pages ``vm`` holds on its host: only while it is active, as its memory."""
    if vm.hugepage_kib is None or vm.hugepages <= 0 or vm.state in INACTIVE_STATES:
        return None
    return vm.hugepage_kib, vm.hugepages


def rooms(hosts: Iterable[HostState], vms: Iterable[VmState]) -> dict[str, dict[int, int]]:
    """Host name -> page size -> room, for the hosts that reported free pages."""
    out: dict[str, dict[int, int]] = {
        h.name: dict(h.hugepages_free) for h in hosts if h.hugepages_free is not None
    }
    for vm in vms:
        need = need_of(vm)
        room = out.get(vm.host)
        if need is not None and room is not None:
            room[need[0]] = room.get(need[0], 0) + need[1]
    return out


def pages_moved(
    hosts: Sequence[HostState], moves: Iterable[tuple[VmState, str]]
) -> list[HostState]:
    """``hosts`` after each VM of ``moves`` went from its host to the one named with it: the
    pages it holds are free where it was and taken where it is, so every room stays put (a
    snapshot whose VMs are moved without this would grow the target's room by them)."""
    change: dict[str, dict[int, int]] = {}
    for vm, target in moves:
        need = need_of(vm)
        if need is None or target == vm.host:
            continue
        kib, pages = need
        for name, sign in ((vm.host, 1), (target, -1)):
            delta = change.setdefault(name, {})
            delta[kib] = delta.get(kib, 0) + sign * pages
    if not change:
        return list(hosts)
    out = []
    for h in hosts:
        shift = change.get(h.name)
        if not shift or h.hugepages_free is None:
            out.append(h)
            continue
        free = dict(h.hugepages_free)
        for kib, n in shift.items():
            if kib in free:
                free[kib] = max(0, free[kib] + n)
        out.append(h.model_copy(update={"hugepages_free": free}))
    return out


def started(snapshot: Snapshot, vm: VmState) -> Snapshot:
    """``snapshot`` with ``vm`` started on its host: the pages it takes there are no longer
    free (a start makes pages held, where a migration only moves them)."""
    need = need_of(vm)
    hosts = snapshot.hosts
    if need is not None:
        hosts = [
            h.model_copy(update={"hugepages_free": _taken(h.hugepages_free, *need)})
            if h.name == vm.host and h.hugepages_free is not None
            else h
            for h in hosts
        ]
    return snapshot.model_copy(update={"vms": [*snapshot.vms, vm], "hosts": hosts})


def _taken(free: Mapping[int, int], kib: int, pages: int) -> dict[int, int]:
    return {**free, kib: free.get(kib, 0) - pages}


def refusal_text(host: str, page_kib: int, room: int, planned: int) -> str:
    return (
        f"{host} has room for {room} hugepages of {page_kib} KiB, "
        f"the VMs planned there need {planned}"
    )


def used_after(used: Mapping[int, int], adds: Iterable[Need]) -> dict[int, int]:
    """``used`` (page size -> pages) with ``adds`` on top."""
    out = dict(used)
    for kib, n in adds:
        out[kib] = out.get(kib, 0) + n
    return out


def need_in_xml(xml: str) -> Need | None:
    """The pages a domain XML's guest takes when backed by huge pages, else None."""
    import xml.etree.ElementTree as ET  # only for domain XML: a plan on a snapshot needs none

    try:
        domain = ET.fromstring(xml)
    except ET.ParseError:
        return None
    backing = domain.find("memoryBacking/hugepages")
    if backing is None:
        return None
    page = backing.find("page")
    kib = kib_of(page.get("size"), page.get("unit")) if page is not None else None
    kib = kib or DEFAULT_PAGE_KIB
    memory = domain.find("memory")
    memory_kib = kib_of(memory.text, memory.get("unit")) if memory is not None else None
    return kib, pages_for((memory_kib or 0) * 1024, kib)


_UNITS: Final[dict[str, float]] = {
    **{"b": 1 / 1024, "bytes": 1 / 1024, "k": 1, "kib": 1, "kb": 1000 / 1024},
    **{"m": 1024, "mib": 1024, "mb": 1e6 / 1024, "g": 1024**2, "gib": 1024**2},
    **{"gb": 1e9 / 1024, "t": 1024**3, "tib": 1024**3},
}


def kib_of(value: str | None, unit: str | None) -> int | None:
    """KiB of a libvirt size (``value`` in ``unit``, KiB by default); None when unreadable."""
    number = None
    with contextlib.suppress(ValueError):
        number = int((value or "").strip())
    factor = _UNITS.get((unit or "KiB").lower())
    return int(number * factor) if number is not None and factor is not None else None
