"""Recorded observations: which snapshots are worth keeping, and for how long.

``run`` keeps a compact snapshot per round, but only when the cluster changed beyond noise,
so a week of a quiet cluster is a handful of files and a busy one at most one per round.

*Noise* is what the planner would not act on: a snapshot differs from the last one kept when

- a host appears, disappears, or becomes reachable or unreachable, or changes its capacity
  (CPUs, memory, free huge pages), architecture or URI;
- a VM appears, disappears, runs on another host, changes state, size (vCPUs, memory, huge
  pages), labels, migratability or the reconciler's record on it (a move, a failure, an intent);
- or a VM's load moved by more than ``NOISE_POINTS`` percentage points of its host's
  capacity: CPU in use over the host's CPUs, memory in use over the host's memory.

Loads that drift by less than that, the observer's own timings and call counts, and the time
the snapshot was taken are noise. Pure functions: the clock is a parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from reconciler.model.snapshot import HostState, Snapshot, VmState

NOISE_POINTS = 2.0
"""Percentage points of a host's capacity a VM's CPU or memory use may drift unrecorded."""
KEEP_COUNT = 2000
"""Recorded snapshots kept at most (the newest)."""
KEEP_AGE = timedelta(days=8)
"""Recorded snapshots older than this are removed (a week's backtest and a day of margin)."""


def compact(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` without what only describes the observation itself (timings, call counts):
    written with defaults left out, it is what a recorded file holds."""
    hosts = [
        h.model_copy(update={"libvirt_calls": 0, "observe_seconds": 0.0}) for h in snapshot.hosts
    ]
    return snapshot.model_copy(update={"hosts": hosts})


def _host_key(h: HostState) -> tuple[object, ...]:
    pages = None if h.hugepages_free is None else tuple(sorted(h.hugepages_free.items()))
    return (h.reachable, h.uri, h.arch, h.cpus, h.memory_total, pages)


def _vm_key(v: VmState) -> tuple[object, ...]:
    return (
        v.host,
        v.state,
        v.vcpus,
        v.memory_max,
        v.hugepage_kib,
        v.hugepages,
        v.memory_current if v.memory_used is None else None,
        tuple(sorted(v.labels.items())),
        v.migratable,
        tuple((u.code, u.detail) for u in v.unmigratable),
        v.reconciler,
    )


def _points(old: float | None, new: float | None, capacity: float | None) -> float:
    """How far a load moved, in percentage points of ``capacity``; a load that became known
    or unknown counts as a change."""
    if old is None or new is None:
        return 0.0 if old is None and new is None else float("inf")
    if not capacity:
        return 0.0 if old == new else float("inf")
    return abs(new - old) * 100.0 / capacity


def change(old: Snapshot | None, new: Snapshot) -> str | None:
    """Why ``new`` differs from ``old`` beyond noise (one short phrase), or None."""
    if old is None:
        return "first observation"
    if old.cluster != new.cluster:
        return f"cluster {old.cluster} -> {new.cluster}"
    hosts_old = {h.name: h for h in old.hosts}
    hosts_new = {h.name: h for h in new.hosts}
    if hosts_old.keys() != hosts_new.keys():
        return "hosts added or removed"
    for name, h in hosts_new.items():
        if _host_key(h) != _host_key(hosts_old[name]):
            return f"host {name} changed"
    vms_old = {(v.name, v.host): v for v in old.vms}
    vms_new = {(v.name, v.host): v for v in new.vms}
    if vms_old.keys() != vms_new.keys():
        return "VMs added, removed or moved"
    for key, v in vms_new.items():
        before = vms_old[key]
        if _vm_key(v) != _vm_key(before):
            return f"VM {v.name} changed"
        host = hosts_new[v.host]
        cpu = _points(before.cpu_used, v.cpu_used, host.cpus)
        mem = _points(before.memory_used, v.memory_used, host.memory_total)
        if max(cpu, mem) > NOISE_POINTS:
            return f"VM {v.name} load changed"
    return None


def expired(
    taken: Sequence[datetime], now: datetime, *, keep: int = KEEP_COUNT, age: timedelta = KEEP_AGE
) -> list[datetime]:
    """Which of the recorded times ``taken`` to remove: beyond the newest ``keep``, or older
    than ``age`` at ``now``; the newest one is always kept."""
    ordered = sorted(taken, reverse=True)
    return [t for i, t in enumerate(ordered) if i > 0 and (i >= keep or now - t > age)]
