"""A snapshot whose CPU figures are the load over the window, for the planner.

The load source (``run``'s samples, or Prometheus) gives each VM's figure over the window;
:func:`windowed` puts it into the snapshot as the VM's ``cpu_used`` and attaches a
:class:`LoadView` saying what the figures were made of: the short sample beside it, the share
of the window covered, the VMs and hosts whose load is unknown. A VM whose window is unknown
keeps its short sample (mandatory moves may read it: they never wait for load) and is named,
so balance does not decide on it (:func:`unknown`). A figure out of range (not a number, below
zero, above what the VM's vCPUs can use: :mod:`reconciler.core.load_range`) is not used: the
window is then unknown, a short sample absent (the planner reads a VM without one as its fair
share), and the VM is named in ``LoadView.out_of_range``.

:func:`short_sample` marks a snapshot whose figures are the observation's own short sample
(no window at hand); with ``hold`` set, the planner makes no balance move on it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from reconciler.core import load_range, load_series
from reconciler.core.capacity import INACTIVE_STATES
from reconciler.core.forecast import Forecast, blend, forecast
from reconciler.core.load_series import Series
from reconciler.core.load_window import Figure, Reading, figure, figures_of_points
from reconciler.core.load_window import spans_of_readings as _spans_of_readings
from reconciler.model.base import fields_of
from reconciler.model.load import (
    ForecastView,
    LoadBasis,
    LoadSource,
    LoadSpec,
    LoadView,
    Statistic,
    VmLoad,
)
from reconciler.model.quantity import format_duration
from reconciler.model.snapshot import Snapshot, VmState

MAX_GAP_SAMPLES = 3
"""No rate is taken across more than this many sample intervals without a reading."""


def max_gap(spec: LoadSpec) -> float:
    """The longest time between two readings that still gives a rate, seconds."""
    return MAX_GAP_SAMPLES * spec.sample_every.total_seconds()


def _active(vm: VmState) -> bool:
    return vm.state not in INACTIVE_STATES


_NO_FIGURE = Figure(None, 0.0)
_VM_LOAD_FIELDS = frozenset(VmLoad.model_fields)


def with_cpu(vm: VmState, cpu_used: float | None) -> VmState:
    """``vm.model_copy(update={"cpu_used": cpu_used})``, the same model to the bit (its values,
    their order, the fields set), without pydantic's generic copying: a round makes one per VM
    (15,000 at 1,000 hosts). ``model_copy`` validates nothing either."""
    if vm.__pydantic_extra__ is not None or vm.__pydantic_private__ is not None:
        return vm.model_copy(update={"cpu_used": cpu_used})
    values = vm.__dict__.copy()
    values["cpu_used"] = cpu_used
    fields_set = set(vm.__pydantic_fields_set__)
    fields_set.add("cpu_used")
    out = VmState.__new__(type(vm))
    object.__setattr__(out, "__dict__", values)
    object.__setattr__(out, "__pydantic_fields_set__", fields_set)
    object.__setattr__(out, "__pydantic_extra__", None)
    object.__setattr__(out, "__pydantic_private__", None)
    return out


def vm_load(
    now: float | None,
    window: float | None,
    covered: float,
    forecast: float | None,
    forecast_error: float | None,
    mean: float | None,
) -> VmLoad:
    """``VmLoad(now=now, window=window, ...)``, every field given, the same model to the bit:
    when each value is a float its field accepts as it is (or None where allowed), it is
    built without running the validator (a round makes one per VM); any other value goes
    through validation (which converts an int, or refuses a value out of range)."""
    if (
        type(covered) is float
        and 0.0 <= covered <= 1.0
        and (now is None or (type(now) is float and now >= 0.0))
        and (window is None or (type(window) is float and window >= 0.0))
        and (forecast is None or (type(forecast) is float and forecast >= 0.0))
        and (forecast_error is None or (type(forecast_error) is float and forecast_error >= 0.0))
        and (mean is None or (type(mean) is float and mean >= 0.0))
    ):
        out = VmLoad.__new__(VmLoad)
        values = {
            "now": now,
            "window": window,
            "covered": covered,
            "forecast": forecast,
            "forecast_error": forecast_error,
            "mean": mean,
        }
        object.__setattr__(out, "__dict__", values)
        object.__setattr__(out, "__pydantic_fields_set__", set(_VM_LOAD_FIELDS))
        object.__setattr__(out, "__pydantic_extra__", None)
        object.__setattr__(out, "__pydantic_private__", None)
        return out
    return VmLoad(
        now=now,
        window=window,
        covered=covered,
        forecast=forecast,
        forecast_error=forecast_error,
        mean=mean,
    )


def windowed(
    snapshot: Snapshot,
    spec: LoadSpec,
    figures: Mapping[str, Figure],
    until: datetime,
    *,
    pressure: Mapping[str, Figure] | None = None,
    problem: str | None = None,
    out_of_range: Mapping[str, str] | None = None,
    duplicates: Mapping[str, str] | None = None,
    forecasts: Mapping[str, Forecast] | None = None,
) -> Snapshot:
    """``snapshot`` with every VM's ``cpu_used`` its load over the window where known.

    ``figures``: VM name -> its figure (a VM without one is unknown); ``pressure``: host ->
    its pressure figure as a share of time (only when the policy reads pressure; a host
    without a known one is unknown); ``problem``: why the window could not be read at all;
    ``out_of_range``: what an earlier look said was out of range (kept for the VMs seen);
    ``duplicates``: VM -> the series it was seen in at once, counted once; ``forecasts``
    (``statistic: forecast``): VM -> its forecast, blended into a known window where usable
    (a VM without one keeps its window's mean, and an unknown window stays unknown).
    """
    vms: list[VmState] = []
    loads: dict[str, VmLoad] = {}
    named: dict[str, str] = {}
    ahead = _Ahead(spec) if forecasts is not None else None
    per_vcpu, over = load_range.PER_VCPU, load_range.OVER_CORES
    for seen in snapshot.vms:
        fields = fields_of(seen)
        name, vcpus = fields["name"], fields["vcpus"]
        active = fields["state"] not in INACTIVE_STATES
        f = figures.get(name, _NO_FIGURE)
        window, now = f.value, fields["cpu_used"]
        fc = None
        mean = None
        if forecasts is not None and ahead is not None:
            fc = forecasts.get(name)
            if window is not None and active:
                mean, window = window, ahead.figure(name, window, fc)
        bad: list[str] = []
        if window is not None and not 0.0 <= window <= vcpus * per_vcpu + over:
            bad.append(load_range.why(window, vcpus, "over the window"))
            window = None
        if now is not None and not 0.0 <= now <= vcpus * per_vcpu + over:
            bad.append(load_range.why(now, vcpus, "in the short sample"))
            now = None
            seen = with_cpu(seen, None)  # noqa: PLW2901
        if bad and active:
            named[name] = "; ".join(bad)
        elif out_of_range and name in out_of_range:
            named[name] = out_of_range[name]
        loads[name] = vm_load(
            now,
            window,
            round(f.covered, 4),
            None if fc is None else fc.value,
            None if fc is None else fc.error,
            None if mean is None or mean == window else round(mean, 6),
        )
        if window is not None and active:
            figure = round(window, 4)
            # already what ``with_cpu`` makes, to the bit (the same float, sign of zero
            # included, set explicitly): a window of one sample ends where the short sample
            # is (``simulate``'s steps); tested inline, once per VM of every round
            if not (
                now == figure
                and type(now) is float
                and (figure != 0.0 or math.copysign(1.0, now) == math.copysign(1.0, figure))
                and "cpu_used" in seen.__pydantic_fields_set__
            ):
                seen = with_cpu(seen, figure)  # noqa: PLW2901
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
        out_of_range=named,
        duplicates={n: duplicates[n] for n in loads if n in duplicates} if duplicates else {},
        forecast=None if ahead is None else ahead.view(),
    )
    return snapshot.model_copy(update={"vms": vms, "load": view})


class _Ahead:
    """Which VMs a forecast was blended into, and why not into the others."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec.forecast
        self.used: list[str] = []
        self.no_history: list[str] = []
        self.ignored: dict[str, str] = {}
        self.errors: dict[str, tuple[float, float]] = {}

    def figure(self, name: str, window: float, fc: Forecast | None) -> float:
        """The VM's figure: its window's mean, blended with its forecast where usable."""
        if fc is None or fc.value is None:
            self.no_history.append(name)
            return window
        if fc.error is not None and fc.window_error is not None:
            self.errors[name] = (fc.error, fc.window_error)
        if not fc.usable:
            self.ignored[name] = (
                f"its forecast erred by {fc.error or 0.0:.3g} cores on average over the last "
                f"day, the window's mean by {fc.window_error or 0.0:.3g}"
            )
            return window
        self.used.append(name)
        return blend(fc.value, window, self.spec.weight)

    def view(self) -> ForecastView:
        return ForecastView(
            horizon=self.spec.horizon,
            weight=self.spec.weight,
            model=self.spec.model,
            used=sorted(self.used),
            no_history=sorted(self.no_history),
            ignored=dict(sorted(self.ignored.items())),
            errors={name: e for name, (e, _) in sorted(self.errors.items())},
            error=self._mean(0),
            window_error=self._mean(1),
        )

    def _mean(self, which: int) -> float | None:
        if not self.errors:
            return None
        return round(sum(e[which] for e in self.errors.values()) / len(self.errors), 6)


def forecasts(
    snapshot: Snapshot,
    spec: LoadSpec,
    history: Mapping[str, Sequence[tuple[float, float]]],
    now: datetime,
    step: float,
) -> dict[str, Forecast]:
    """Each running VM's forecast (``statistic: forecast``) from ``history``: VM name -> its
    rate points ``(time, cores)`` over ``forecast.history`` before ``now``, every ``step``
    seconds (a VM without points has none)."""
    end = now.timestamp()
    window = spec.window.total_seconds()
    return {
        vm.name: forecast(history.get(vm.name, ()), end, spec.forecast, window=window, step=step)
        for vm in snapshot.vms
        if _active(vm)
    }


def short_sample(
    snapshot: Snapshot, spec: LoadSpec, note: str, *, hold: str | None = None
) -> Snapshot:
    """``snapshot`` as observed, marked as read on its own short sample, not the window; a
    sample out of range is left out and named."""
    vms: list[VmState] = []
    named: dict[str, str] = {}
    for vm in snapshot.vms:
        now = vm.cpu_used
        if now is not None and not load_range.in_range(now, vm.vcpus):
            if _active(vm):
                named[vm.name] = load_range.why(now, vm.vcpus, "in the short sample")
            vm = vm.model_copy(update={"cpu_used": None})  # noqa: PLW2901
        vms.append(vm)
    view = LoadView(
        source=spec.source,
        basis=LoadBasis.SAMPLE,
        window=spec.window,
        statistic=spec.statistic,
        until=snapshot.taken_at,
        vms={vm.name: VmLoad(now=vm.cpu_used) for vm in vms},
        out_of_range=named,
        note=note,
        hold=hold,
    )
    update: dict[str, object] = {"load": view}
    if named or any(v is not w for v, w in zip(vms, snapshot.vms, strict=True)):
        update["vms"] = vms
    return snapshot.model_copy(update=update)


@dataclass(frozen=True, slots=True)
class Unknown:
    """What balance may not decide on: VMs and hosts whose load over the window is unknown."""

    vms: frozenset[str]
    hosts: Mapping[str, str]
    """Host -> why its load is unknown."""
    hold: str | None
    """Why no balance move is made at all (a short sample that may not be acted on)."""
    out_of_range: Mapping[str, str] = field(default_factory=dict)
    """VM -> its CPU figures out of range, not used."""


NOTHING_UNKNOWN = Unknown(frozenset(), {}, None)


def unknown(snapshot: Snapshot, flagged: Sequence[VmState] | None = None) -> Unknown:
    """The running VMs whose load is unknown (their window, or a figure out of range), the
    hosts that carry one (or whose own pressure is unknown or out of range), and whether
    balance is held.

    Figures are checked here again, whatever made the snapshot: one read from a file may
    carry what no load source would have let through. Without a view of the load (a
    snapshot saved without it), only its own figures out of range are unknown. ``flagged``:
    the running VMs whose own figure is out of range, where the caller found them already
    (the planner's model, :func:`reconciler.core.state.vm_infos`); else they are looked for."""
    view = snapshot.load
    if view is not None and view.basis is LoadBasis.WINDOW:
        return _unknown_window(snapshot, view)
    named = dict(view.out_of_range) if view is not None else {}
    bad = [vm for vm in snapshot.vms if vm.name in named] if named else []
    for vm in _out_of_range(snapshot.vms) if flagged is None else flagged:
        if vm.name not in named:
            named[vm.name] = load_range.why(vm.cpu_used or 0.0, vm.vcpus, "as observed")
            bad.append(vm)
    hosts: dict[str, str] = dict(view.unknown_hosts) if view is not None else {}
    vms: set[str] = set()
    for vm in bad:
        if _active(vm):
            vms.add(vm.name)
            hosts.setdefault(vm.host, f"the load of {vm.name} is out of range: {named[vm.name]}")
    if view is None:
        return Unknown(frozenset(vms), hosts, None, named) if named else NOTHING_UNKNOWN
    return Unknown(frozenset(vms), hosts, view.hold, named)


def _out_of_range(vms: Sequence[VmState]) -> list[VmState]:
    """The running VMs whose own ``cpu_used`` is out of range (one pass, fields read as
    :func:`fields_of` reads them: this runs on every VM of every plan)."""
    per_vcpu, over = load_range.PER_VCPU, load_range.OVER_CORES
    found = []
    for vm in vms:
        f = fields_of(vm)
        used = f["cpu_used"]
        if (
            used is not None
            and not 0.0 <= used <= f["vcpus"] * per_vcpu + over
            and f["state"] not in INACTIVE_STATES
        ):
            found.append(vm)
    return found


def _unknown_window(snapshot: Snapshot, view: LoadView) -> Unknown:
    window = view.window
    vms: set[str] = set()
    hosts: dict[str, str] = dict(view.unknown_hosts)
    for host, points in view.pressure.items():
        if not load_range.pressure_in_range(points):
            hosts[host] = f"its CPU pressure, {points:.4g} points, is out of range"
    named: dict[str, str] = dict(view.out_of_range)
    loads = view.vms
    per_vcpu, over = load_range.PER_VCPU, load_range.OVER_CORES
    for vm in snapshot.vms:
        f = fields_of(vm)
        if f["state"] in INACTIVE_STATES:
            continue
        name, used, vcpus = f["name"], f["cpu_used"], f["vcpus"]
        load = loads.get(name)
        figure = None if load is None else load.window
        bad = None
        if used is not None and not 0.0 <= used <= vcpus * per_vcpu + over:
            bad = load_range.why(used, vcpus, "as observed")
        elif figure is not None and not 0.0 <= figure <= vcpus * per_vcpu + over:
            bad = load_range.why(figure, vcpus, "over the window")
        elif figure is not None:
            continue  # a window in range: known
        if bad is not None:
            named.setdefault(name, bad)
        vms.add(name)
        host = f["host"]
        if host not in hosts:
            if bad is None and load is not None and name in named:
                bad = named[name]  # its window was out of range when read
            if bad is not None:
                hosts[host] = f"the load of {name} is out of range: {bad}"
            else:
                covered = 0.0 if load is None else load.covered
                hosts[host] = (
                    f"the load of {name} over the {format_duration(window)} window is "
                    f"unknown (samples cover {covered:.0%} of it)"
                )
    return Unknown(frozenset(vms), hosts, view.hold, named)


def from_readings(
    snapshot: Snapshot,
    spec: LoadSpec,
    series: Mapping[str, Sequence[Reading]],
    now: datetime,
    *,
    history: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    history_step: float = 300.0,
) -> Snapshot:
    """``snapshot`` with each VM's load over the window ending ``now`` from ``series`` (VM
    name -> its cumulative CPU readings, as ``run`` keeps them); ``history`` (``statistic:
    forecast``): VM name -> its points over ``forecast.history`` every ``history_step``
    seconds (the buckets ``run`` keeps, ``reconciler.core.load_history``)."""
    end = now.timestamp()
    start = end - spec.window.total_seconds()
    gap = max_gap(spec)
    figures: dict[str, Figure] = {}
    for vm in snapshot.vms:
        readings = series.get(vm.name)
        if readings:
            figures[vm.name] = figure(_spans_of_readings(readings, gap), start, end, spec.statistic)
    ahead = None
    if spec.statistic is Statistic.FORECAST:
        ahead = forecasts(snapshot, spec, history or {}, now, history_step)
    return windowed(snapshot, spec, figures, now, forecasts=ahead)


def from_points(
    snapshot: Snapshot,
    spec: LoadSpec,
    vm_points: Mapping[str, Sequence[tuple[float, float]]],
    now: datetime,
    *,
    host_points: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    duplicates: Mapping[str, str] | None = None,
    history: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    history_step: float = 0.0,
) -> Snapshot:
    """``snapshot`` with each VM's load over the window ending ``now`` from rate points
    (Prometheus: name -> ``(time, cores)`` every ``sampleEvery``); ``host_points``: host ->
    ``(time, share of time under pressure)``, when the policy reads pressure; ``duplicates``:
    VM -> the series it was seen in at once; ``history`` (``statistic: forecast``): VM name ->
    its points over ``forecast.history``, every ``history_step`` seconds."""
    end = now.timestamp()
    start = end - spec.window.total_seconds()
    step = spec.sample_every.total_seconds()
    statistic = spec.statistic
    figures = figures_of_points(vm_points, step, start, end, statistic)
    pressure = None
    if host_points is not None:
        pressure = figures_of_points(host_points, step, start, end, statistic)
    ahead = None
    if spec.statistic is Statistic.FORECAST:
        every = history_step if history_step > 0 else step
        ahead = forecasts(snapshot, spec, history or {}, now, every)
    return windowed(
        snapshot, spec, figures, now, pressure=pressure, duplicates=duplicates, forecasts=ahead
    )


def from_series(
    snapshot: Snapshot,
    spec: LoadSpec,
    vm_series: Iterable[Series],
    now: datetime,
    *,
    host_series: Iterable[Series] | None = None,
    history_series: Iterable[Series] | None = None,
    history_step: float = 0.0,
) -> Snapshot:
    """``snapshot`` with each VM's load over the window ending ``now`` from the series of a
    range query (Prometheus), each VM's joined by its name and UUID
    (:mod:`reconciler.core.load_series`); ``host_series``: the hosts' pressure, when read;
    ``history_series`` (``statistic: forecast``): the VMs over ``forecast.history``, every
    ``history_step`` seconds."""
    joined = load_series.by_vm(vm_series, snapshot.vms)
    hosts = load_series.by_host(host_series) if host_series is not None else None
    history = None
    if history_series is not None:
        history = load_series.by_vm(history_series, snapshot.vms).points
    return from_points(
        snapshot,
        spec,
        joined.points,
        now,
        host_points=hosts,
        duplicates=joined.duplicates,
        history=history,
        history_step=history_step,
    )


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
    again = windowed(
        snapshot,
        spec,
        figures,
        view.until,
        pressure=pressure,
        problem=view.problem,
        out_of_range=view.out_of_range,
        duplicates=view.duplicates,
    )
    if view.forecast is None or again.load is None:
        return again
    # the figures are already blended: keep what the forecast made of them
    loads = {
        name: load.model_copy(
            update={
                "forecast": old.forecast,
                "forecast_error": old.forecast_error,
                "mean": old.mean,
            }
        )
        if (old := view.vms.get(name)) is not None
        else load
        for name, load in again.load.vms.items()
    }
    return again.model_copy(
        update={"load": again.load.model_copy(update={"forecast": view.forecast, "vms": loads})}
    )
