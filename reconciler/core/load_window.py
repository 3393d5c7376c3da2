"""A VM's CPU over a window, from cumulative ``cpu.time`` readings or from rate points.

Pure arithmetic; time is seconds since the epoch, passed in.

- **Readings** (``run``'s own samples): each is a VM's cumulative CPU time at an instant. Two
  readings in a row give the rate between them, in cores. No rate is taken across a counter
  that went back (the VM restarted), across a move to another host or a new domain of the same
  name (both start their counter anew), or across a gap longer than ``max_gap`` (sampling
  stopped: nothing is known of what happened in between). The series follows the VM by name,
  so its window goes on across a live migration.
- **Points** (Prometheus): each is a rate at an instant, standing for the ``step`` before it.

Spans are clipped to the window; the share of the window they cover decides whether the
window is known (``MIN_COVERED``). An unknown window is ``None``, never zero.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from reconciler.model.load import MIN_COVERED, Statistic

P95 = 0.95


@dataclass(frozen=True, slots=True)
class Reading:
    """A VM's cumulative CPU time at one instant, where it ran."""

    at: float
    """Seconds since the epoch."""
    cpu_ns: int
    """Cumulative CPU time of the domain, nanoseconds (libvirt's ``cpu.time``)."""
    host: str
    uuid: str
    domain_id: int = -1
    """libvirt's ID of the running domain: a new one at every start and on every host it
    moves to, so a restart is seen even when the new counter has passed the old one."""


@dataclass(frozen=True, slots=True)
class Span:
    """A constant rate over ``[start, end]``."""

    start: float
    end: float
    rate: float
    """Cores (CPU seconds per second)."""


@dataclass(frozen=True, slots=True)
class Figure:
    """One VM's load over a window: the statistic, or None, and the share covered."""

    value: float | None
    covered: float


def spans_of_readings(readings: Sequence[Reading], max_gap: float) -> list[Span]:
    """The rates between consecutive readings (in time order), where a rate can be told."""
    ordered = sorted(readings, key=lambda r: r.at)
    out: list[Span] = []
    for a, b in itertools.pairwise(ordered):
        elapsed = b.at - a.at
        if not 0 < elapsed <= max_gap:
            continue
        if (
            b.host != a.host
            or b.uuid != a.uuid
            or b.domain_id != a.domain_id
            or b.cpu_ns < a.cpu_ns
        ):
            continue  # moved, replaced or restarted: the counter started anew
        out.append(Span(a.at, b.at, (b.cpu_ns - a.cpu_ns) / 1e9 / elapsed))
    return out


def spans_of_points(points: Iterable[tuple[float, float]], step: float) -> list[Span]:
    """Rate points, each standing for the ``step`` before it; values that are not finite
    numbers of zero or more (NaN, a negative rate) are left out."""
    return [
        Span(t - step, t, v)
        for t, v in sorted(points)
        if math.isfinite(v) and v >= 0 and math.isfinite(t)
    ]


def figure(spans: Iterable[Span], start: float, end: float, statistic: Statistic) -> Figure:
    """The ``statistic`` of the rates over ``[start, end]``, each weighted by how long it held
    inside it (their mean with ``forecast``: the forecast is blended in later); None when the
    spans cover less than ``MIN_COVERED`` of the window."""
    length = end - start
    if length <= 0:
        return Figure(None, 0.0)
    clipped: list[tuple[float, float]] = []  # (rate, seconds inside the window)
    for s in spans:
        inside = min(s.end, end) - max(s.start, start)
        if inside > 0:
            clipped.append((s.rate, inside))
    return _of_clipped(clipped, length, statistic)


def figure_of_points(
    points: Sequence[tuple[float, float]],
    step: float,
    start: float,
    end: float,
    statistic: Statistic,
) -> Figure:
    """``figure(spans_of_points(points, step), start, end, statistic)``, to the bit, without
    making a span per point: a round reads the window of every VM (15,000 at 1,000 hosts).
    Points already in order (the usual case) are not sorted again: ``sorted`` would find them
    one run and leave them as they are."""
    length = end - start
    if length <= 0:
        return Figure(None, 0.0)
    ordered: Sequence[tuple[float, float]] = points
    for i in range(1, len(points)):
        if points[i] < points[i - 1]:  # the comparison sorted() makes to find a run
            ordered = sorted(points)
            break
    clipped: list[tuple[float, float]] = []  # (rate, seconds inside the window)
    for t, v in ordered:
        if not (math.isfinite(v) and v >= 0 and math.isfinite(t)):
            continue
        inside = min(t, end) - max(t - step, start)
        if inside > 0:
            clipped.append((v, inside))
    return _of_clipped(clipped, length, statistic)


def figures_of_points(
    series: Mapping[str, Sequence[tuple[float, float]]],
    step: float,
    start: float,
    end: float,
    statistic: Statistic,
) -> dict[str, Figure]:
    """:func:`figure_of_points` of each series, by name, to the bit: a series of one point
    (every VM's, in ``simulate`` at steps as long as the window) is done inline, with the
    operations :func:`_of_clipped` makes on its one span in the same order (a sum starts at
    0, the mean is ``rate * seconds / seconds``; the max, and the quantile of one value, is
    the value)."""
    length = end - start
    if length <= 0:
        return {name: Figure(None, 0.0) for name in series}
    isfinite = math.isfinite
    mean = statistic is Statistic.MEAN or statistic is Statistic.FORECAST
    out: dict[str, Figure] = {}
    for name, points in series.items():
        if len(points) != 1:
            out[name] = figure_of_points(points, step, start, end, statistic)
            continue
        t, v = points[0]
        if not (isfinite(v) and v >= 0 and isfinite(t)):
            out[name] = Figure(None, 0.0)
            continue
        inside = min(t, end) - max(t - step, start)
        if not inside > 0:
            out[name] = Figure(None, 0.0)
            continue
        covered = 0 + inside
        share = min(1.0, covered / length)
        if share < MIN_COVERED:
            out[name] = Figure(None, share)
        elif mean:
            out[name] = Figure((0 + v * inside) / covered, share)
        else:
            out[name] = Figure(v, share)
    return out


def _of_clipped(clipped: list[tuple[float, float]], length: float, statistic: Statistic) -> Figure:
    covered = sum(d for _, d in clipped)
    share = min(1.0, covered / length)
    if share < MIN_COVERED or not clipped:
        return Figure(None, share)
    if statistic is Statistic.MEAN or statistic is Statistic.FORECAST:
        value = sum(r * d for r, d in clipped) / covered
    elif statistic is Statistic.MAX:
        value = max(r for r, _ in clipped)
    else:
        value = weighted_quantile(clipped, P95)
    return Figure(value, share)


def weighted_quantile(values: Sequence[tuple[float, float]], q: float) -> float:
    """The smallest value at or below which at least ``q`` of the total weight lies
    (``values`` are ``(value, weight)`` with weights above 0, not empty)."""
    ordered = sorted(values)
    total = sum(w for _, w in ordered)
    needed = q * total
    seen = 0.0
    for value, weight in ordered:
        seen += weight
        if seen >= needed - 1e-12 * total:
            return value
    return ordered[-1][0]
