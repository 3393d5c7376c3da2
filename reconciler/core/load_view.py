"""A snapshot whose CPU figures are the load over the window, for the planner.

The load source (``run``'s samples, or Prometheus) gives each VM's figure over the window;
:func:`windowed` puts it into the snapshot as the VM's ``cpu_used`` and attaches a
:class:`LoadView` saying what the figures were made of: the short sample beside it, the share
of the window covered, the VMs and hosts whose load is unknown. A VM whose window is unknown
keeps its short sample (mandatory moves may read it: they never wait for load) and is named,
so balance does not decide on it (:func:`unknown`).

:func:`short_sample` marks a snapshot whose figures are the observation's own short sample
(no window at hand); with ``hold`` set, the planner makes no balance move on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from reconciler.core.capacity import INACTIVE_STATES
from reconciler.core.load_window import Figure, Reading, figure, spans_of_points
from reconciler.core.load_window import spans_of_readings as _spans_of_readings
from reconciler.model.load import LoadBasis, LoadSource, LoadSpec, LoadView, VmLoad
from reconciler.model.quantity import format_duration
from reconciler.model.snapshot import Snapshot, VmState

MAX_GAP_SAMPLES = 3
"""No rate is taken across more than this many sample intervals without a reading."""


def max_gap(spec: LoadSpec) -> float:
    """The longest time between two readings that still gives a rate, seconds."""
    return MAX_GAP_SAMPLES * spec.sample_every.total_seconds()


def _active(vm: VmState) -> bool:
    return vm.state not in INACTIVE_STATES


def windowed(
    snapshot: Snapshot,
    spec: LoadSpec,
    figures: Mapping[str, Figure],
    until: datetime,
    *,
    pressure: Mapping[str, Figure] | None = None,
    problem: str | None = None,
) -> Snapshot:
    """``snapshot`` with every VM's ``cpu_used`` its load over the window where known.

    ``figures``: VM name -> its figure (a VM without one is unknown); ``pressure``: host ->
    its pressure figure as a share of time (only when the policy reads pressure; a host
    without a known one is unknown); ``problem``: why the window could not be read at all.
    """
    vms: list[VmState] = []
    loads: dict[str, VmLoad] = {}
    for seen in snapshot.vms:
        f = figures.get(seen.name, Figure(None, 0.0))
        loads[seen.name] = VmLoad(now=seen.cpu_used, window=f.value, covered=round(f.covered, 4))
        if f.value is not None and _active(seen):
            seen = seen.model_copy(update={"cpu_used": round(f.value, 4)})  # noqa: PLW2901
        vms.append(seen)
    points: dict[str, float] = {}
    unknown_hosts: dict[str, str] = {}
    if pressure is not None:
        for host in snapshot.hosts:
            if not host.reachable:
                continue
            p = pressure.get(host.name)
            if p is None or p.value is None:
                covered = 0.0 if p is None else p.covered
                unknown_hosts[host.name] = (
                    f"its CPU pressure covers {covered:.0%} of the window"
                    if covered
                    else "no CPU pressure series for it"
                )
            else:
                points[host.name] = round(100.0 * min(1.0, p.value), 3)
    view = LoadView(
        source=spec.source,
        basis=LoadBasis.WINDOW,
        window=spec.window,
        statistic=spec.statistic,
        until=until,
        vms=loads,
        pressure=points,
        unknown_hosts=unknown_hosts,
        problem=problem,
    )
    return snapshot.model_copy(update={"vms": vms, "load": view})


def short_sample(
    snapshot: Snapshot, spec: LoadSpec, note: str, *, hold: str | None = None
) -> Snapshot:
    """``snapshot`` as observed, marked as read on its own short sample, not the window."""
    view = LoadView(
        source=spec.source,
        basis=LoadBasis.SAMPLE,
        window=spec.window,
        statistic=spec.statistic,
        until=snapshot.taken_at,
        vms={vm.name: VmLoad(now=vm.cpu_used) for vm in snapshot.vms},
        note=note,
        hold=hold,
    )
    return snapshot.model_copy(update={"load": view})


@dataclass(frozen=True, slots=True)
class Unknown:
    """What balance may not decide on: VMs and hosts whose load over the window is unknown."""

    vms: frozenset[str]
    hosts: Mapping[str, str]
    """Host -> why its load is unknown."""
    hold: str | None
    """Why no balance move is made at all (a short sample that may not be acted on)."""


NOTHING_UNKNOWN = Unknown(frozenset(), {}, None)


def unknown(snapshot: Snapshot) -> Unknown:
    """The running VMs whose window is unknown, the hosts that carry one (or whose own
    pressure is unknown), and whether balance is held; nothing without a window."""
    view = snapshot.load
    if view is None:
        return NOTHING_UNKNOWN
    if view.basis is LoadBasis.SAMPLE:
        return Unknown(frozenset(), {}, view.hold)
    vms: set[str] = set()
    hosts: dict[str, str] = dict(view.unknown_hosts)
    for vm in snapshot.vms:
        load = view.vms.get(vm.name)
        if _active(vm) and (load is None or load.window is None):
            vms.add(vm.name)
            if vm.host not in hosts:
                covered = 0.0 if load is None else load.covered
                hosts[vm.host] = (
                    f"the load of {vm.name} over the {format_duration(view.window)} window is "
                    f"unknown (samples cover {covered:.0%} of it)"
                )
    return Unknown(frozenset(vms), hosts, view.hold)


def from_readings(
    snapshot: Snapshot,
    spec: LoadSpec,
    series: Mapping[str, Sequence[Reading]],
    now: datetime,
) -> Snapshot:
    """``snapshot`` with each VM's load over the window ending ``now`` from ``series`` (VM
    name -> its cumulative CPU readings, as ``run`` keeps them)."""
    end = now.timestamp()
    start = end - spec.window.total_seconds()
    gap = max_gap(spec)
    figures: dict[str, Figure] = {}
    for vm in snapshot.vms:
        readings = series.get(vm.name)
        if readings:
            figures[vm.name] = figure(_spans_of_readings(readings, gap), start, end, spec.statistic)
    return windowed(snapshot, spec, figures, now)


def from_points(
    snapshot: Snapshot,
    spec: LoadSpec,
    vm_points: Mapping[str, Sequence[tuple[float, float]]],
    now: datetime,
    *,
    host_points: Mapping[str, Sequence[tuple[float, float]]] | None = None,
) -> Snapshot:
    """``snapshot`` with each VM's load over the window ending ``now`` from rate points
    (Prometheus: name -> ``(time, cores)`` every ``sampleEvery``); ``host_points``: host ->
    ``(time, share of time under pressure)``, when the policy reads pressure."""
    end = now.timestamp()
    start = end - spec.window.total_seconds()
    step = spec.sample_every.total_seconds()
    figures = {
        name: figure(spans_of_points(points, step), start, end, spec.statistic)
        for name, points in vm_points.items()
    }
    pressure = None
    if host_points is not None:
        pressure = {
            host: figure(spans_of_points(points, step), start, end, spec.statistic)
            for host, points in host_points.items()
        }
    return windowed(snapshot, spec, figures, now, pressure=pressure)


def failed(snapshot: Snapshot, spec: LoadSpec, problem: str, now: datetime) -> Snapshot:
    """``snapshot`` with every VM's load over the window unknown, because of ``problem``."""
    pressure: dict[str, Figure] | None = (
        {} if spec.source is LoadSource.PROMETHEUS and spec.prometheus.host_pressure else None
    )
    return windowed(snapshot, spec, {}, now, pressure=pressure, problem=problem)


def reapplied(snapshot: Snapshot, view: LoadView | None) -> Snapshot:
    """A fresh look at some hosts (admission's) read on the window of the round's ``view``:
    each VM's figure over the window where known, its new short sample beside it."""
    if view is None:
        return snapshot
    if view.basis is LoadBasis.SAMPLE:
        return snapshot.model_copy(update={"load": view})
    figures = {
        name: Figure(load.window, load.covered)
        for name, load in view.vms.items()
        if load.window is not None
    }
    pressure = None
    if view.pressure or view.unknown_hosts:
        pressure = {h: Figure(p / 100.0, 1.0) for h, p in view.pressure.items()}
    spec = LoadSpec(source=view.source, window=view.window, statistic=view.statistic)
    return windowed(snapshot, spec, figures, view.until, pressure=pressure, problem=view.problem)
