"""What hosts and VMs go through between two rounds, integrated over time.

Per host, its demand (the VMs on it, in its compute units) is piecewise constant: it changes
at trace steps and when moves start and end. While a VM moves, its demand counts on its
source and a share of it (``on_target``, all of it by default) on its target, and it gets
only ``1 - loss`` of what it asks for: that loss is the performance degradation due to
migrations (PDM) of Beloglazov & Buyya. A host is *active* while a VM runs on it or arrives;
its *overload* is the time its demand reaches its capacity (SLATAH counts it over active
time); it draws the watts of its power curve at its utilisation while active, and (in the
realistic mode) its idle watts otherwise.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from reconciler.core.simulation.moves import Flight
from reconciler.core.simulation.power import watts

FULL = 1.0 - 1e-9
"""A host at this utilisation or more is at 100%: its VMs do not get what they ask for."""


@dataclass
class Meter:
    """Running totals of one simulated period (seconds, compute units x seconds, joules)."""

    on_target: float = 1.0
    """Share of a moving VM's demand counted on its target meanwhile."""
    loss: float = 0.1
    """Share of a moving VM's demand it does not get meanwhile."""
    idle_when_empty: bool = False
    """Realistic mode: an empty host draws its idle watts (it is on)."""
    limit: float = 1.0
    """hostLimit as a utilisation; time above it is counted per host."""
    active_seconds: float = 0.0
    powered_seconds: float = 0.0
    """Host-seconds powered: active ones, and in the realistic mode every host not asleep."""
    overloaded_seconds: float = 0.0
    over_limit_seconds: float = 0.0
    joules: float = 0.0
    requested: float = 0.0
    lost: float = 0.0
    per_host_active: list[float] = field(default_factory=list)

    def interval(
        self,
        t0: float,
        t1: float,
        demand: Sequence[float],
        host_of: Sequence[int],
        capacity: Sequence[float],
        curves: Sequence[Sequence[float]],
        flights: Sequence[tuple[Flight, int, int, int]],
        asleep: Collection[int] = (),
    ) -> None:
        """Account ``[t0, t1)``: ``demand[vm]`` constant over it, ``host_of`` where each VM
        runs at ``t0``, ``flights`` the moves overlapping it as (flight, vm, source, target),
        ``asleep`` the hosts powered off (they draw nothing)."""
        if t1 <= t0:
            return
        hosts = len(capacity)
        base = [0.0] * hosts
        count = [0] * hosts
        for vm, d in enumerate(demand):
            h = host_of[vm]
            base[h] += d
            count[h] += 1
        self.requested += sum(demand) * (t1 - t0)
        events: dict[int, list[tuple[float, float, int]]] = {}  # host -> (time, demand, VMs)
        for f, vm, src, dst in flights:
            s, e = max(t0, f.start), min(t1, f.end)
            if e <= s:
                continue  # ended before: host_of already says where it runs
            d = demand[vm]
            self.lost += self.loss * d * (e - s)
            events.setdefault(dst, []).append((s, self.on_target * d, 1))
            if f.aborted or f.end > t1:
                events[dst].append((e, -self.on_target * d, -1))
            else:  # it arrived: its demand leaves the source, all of it now on the target
                events[dst].append((e, (1 - self.on_target) * d, 0))
                events.setdefault(src, []).append((e, -d, -1))
        for h in range(hosts):
            if h in asleep:
                continue
            self._host(h, t0, t1, base[h], count[h], capacity[h], curves[h], events.get(h, []))

    def _host(
        self,
        h: int,
        t0: float,
        t1: float,
        demand: float,
        vms: int,
        capacity: float,
        curve: Sequence[float],
        events: list[tuple[float, float, int]],
    ) -> None:
        at = t0
        for when, change, arriving in [*sorted(events), (t1, 0.0, 0)]:
            if when > at:
                self._segment(h, when - at, demand, vms, capacity, curve)
                at = when
            demand += change
            vms += arriving

    def _segment(
        self,
        h: int,
        seconds: float,
        demand: float,
        vms: int,
        capacity: float,
        curve: Sequence[float],
    ) -> None:
        u = demand / capacity if capacity > 0 else 0.0
        if vms > 0 or self.idle_when_empty:
            self.powered_seconds += seconds
        if vms > 0:
            self.active_seconds += seconds
            while len(self.per_host_active) <= h:
                self.per_host_active.append(0.0)
            self.per_host_active[h] += seconds
            if u >= FULL:
                self.overloaded_seconds += seconds
            self.joules += watts(curve, u) * seconds
        elif self.idle_when_empty:
            self.joules += curve[0] * seconds
        if u > self.limit:
            self.over_limit_seconds += seconds

    @property
    def slatah(self) -> float:
        return self.overloaded_seconds / self.active_seconds if self.active_seconds else 0.0

    @property
    def pdm(self) -> float:
        return min(1.0, self.lost / self.requested) if self.requested else 0.0
