"""Series of rate points (Prometheus's answer) joined into one series per VM, and per host.

Pure: the labels and points of each series go in, each VM's points come out.

- A series names its VM by ``domain`` (the libvirt domain name) and, where it has one, by
  ``uuid``: a series of another UUID is another domain that had the name (a VM deleted and
  created again under it), and is not this VM's, as ``run``'s samples start anew on a new
  UUID. A series without ``uuid`` is the VM's by its name alone.
- Several series of one VM at the same instant (the same exporter scraped by several jobs,
  or under two addresses) are one VM seen more than once: its figure at that instant is the
  largest of them, never their sum. Where they overlap for at least half of the instants,
  the VM is named with the labels that tell its series apart. A VM that moved between hosts
  has a series on each, one after the other (with a tail of a minute or so where a rate
  still reads the old one): joined, not named.
- A host's pressure series (label ``host``) are joined the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from reconciler.model.snapshot import VmState

VM_LABEL = "domain"
UUID_LABEL = "uuid"
HOST_LABEL = "host"
SHOWN_VALUES = 4
"""Values of a telling label listed in the plan before "..."."""

Points = list[tuple[float, float]]


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a range query: its labels and its ``(time, value)`` points."""

    labels: Mapping[str, str]
    points: Sequence[tuple[float, float]]


@dataclass(frozen=True, slots=True)
class Joined:
    """Each VM's (or host's) points, and the VMs seen in several series at once."""

    points: dict[str, Points] = field(default_factory=dict)
    duplicates: dict[str, str] = field(default_factory=dict)
    """VM -> which series overlapped, counted once."""


def by_vm(series: Iterable[Series], vms: Sequence[VmState]) -> Joined:
    """The points of each of ``vms`` from ``series`` labelled ``domain`` (and ``uuid``)."""
    named: dict[str, list[Series]] = {}
    for s in series:
        name = s.labels.get(VM_LABEL)
        if name:
            named.setdefault(name, []).append(s)
    out = Joined()
    for vm in vms:
        found = named.get(vm.name)
        if not found:
            continue
        uuid = vm.uuid.lower()
        mine = [s for s in found if s.labels.get(UUID_LABEL, uuid).lower() == uuid]
        if not mine:
            continue  # only series of earlier domains of the name
        points, overlapping = _joined(mine)
        out.points[vm.name] = points
        if overlapping:
            out.duplicates[vm.name] = _told_apart(overlapping)
    return out


def by_host(series: Iterable[Series]) -> dict[str, Points]:
    """The points of each host from ``series`` labelled ``host`` (joined as a VM's are)."""
    named: dict[str, list[Series]] = {}
    for s in series:
        name = s.labels.get(HOST_LABEL)
        if name:
            named.setdefault(name, []).append(s)
    return {name: _joined(found)[0] for name, found in named.items()}


def _joined(series: Sequence[Series]) -> tuple[Points, list[Series]]:
    """The points of ``series`` as one (the largest value at each instant), and the series
    that overlapped (both above zero at an instant) for at least half of the instants."""
    if len(series) == 1:
        return sorted(series[0].points), []
    at: dict[float, list[tuple[float, int]]] = {}
    for i, s in enumerate(series):
        for t, v in s.points:
            at.setdefault(t, []).append((v, i))
    overlaps = 0
    seen: set[int] = set()
    for values in at.values():
        busy = [i for v, i in values if v > 0]
        if len(busy) > 1:
            overlaps += 1
            seen.update(busy)
    points = sorted((t, max(v for v, _ in values)) for t, values in at.items())
    if 2 * overlaps < len(at):
        return points, []
    return points, [series[i] for i in sorted(seen)]


def _told_apart(series: Sequence[Series]) -> str:
    """ "3 series (job: a, b, c)": how many, and the labels whose values differ."""
    keys = sorted({k for s in series for k in s.labels})
    telling = []
    for key in keys:
        values = sorted({s.labels.get(key, "") for s in series})
        if len(values) > 1:
            shown = ", ".join(v or "(none)" for v in values[:SHOWN_VALUES])
            more = ", ..." if len(values) > SHOWN_VALUES else ""
            telling.append(f"{key}: {shown}{more}")
    apart = f" ({'; '.join(telling)})" if telling else ""
    return f"{len(series)} series{apart}"
