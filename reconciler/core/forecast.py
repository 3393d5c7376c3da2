"""Each VM's expected demand over the next ``horizon``, from its history, and the forecast's
own error (``statistic: forecast``).

Pure arithmetic, deterministic: the same points give the same figures, whatever their order.
Points are ``(time, cores)`` rate points, each standing for the ``step`` before it (as a
Prometheus range query gives them), time in seconds since the epoch. They are laid on a grid
of ``step`` ending at ``now``; a slot without a point is unknown, never zero.

- **seasonal**: the profile of a period (``forecast.period``, a day by default; with the
  default, a week when the history spans two weeks) is the mean of each phase (time of day, of
  the week) over the periods seen. The forecast is the profile's mean over the phases of the
  next ``horizon``, moved by how far the last hour (a twelfth of a shorter period) stood above
  or below the profile at its phases (the recent level). A VM whose history spans less than
  two periods has none.
- **trend**: a least-squares line through the last ``max(window, 2 x horizon)``, read at the
  middle of the next ``horizon``. A VM with fewer than two points there, or points covering
  less than half of it, has none.

A forecast is never below zero. Its error: over the last period (a day by default), a
forecast made every ``horizon`` from what was known then (the seasonal profile of the periods
before that one) is set
against the mean that came over its horizon; the mean absolute difference, in cores. The same
is measured of the window's mean held over the horizon (what the plan reads without a
forecast). :attr:`Forecast.usable`: the forecast is used only where its error is not above the
window's (or no error could be measured yet).

Pure Python rather than numpy or statsmodels' Holt-Winters: a forecast is a few thousand
additions per VM, with no fitting, no iteration that may not converge, no
dependency of tens of MB, and the same figures on every machine: about 2 ms of CPU per VM with
a week of history at 5m, 2 s a round for 1,000 VMs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from reconciler.model.load import MIN_COVERED, ForecastModel, ForecastSpec, LoadSpec

DAY = 86400.0
WEEK = 7 * DAY
LEVEL_SPAN = 3600.0
"""The recent level of a seasonal forecast is read over the last hour (a twelfth of a period
shorter than 12h)."""
ERROR_SPAN = DAY
"""The forecast's error is measured over the last day (the last period, when shorter)."""
HISTORY_STEP = 300.0
"""The history's step with a daily period: 5m, 2,016 points per VM a week."""
PHASES = 48
"""A shorter period is read at a step of a 48th of it (15s for 12m): fine enough for its shape."""
MAX_POINTS = 8064
"""Points per VM a history may hold: 28 days at 5m, within Prometheus's 11,000 a series."""


def phase_step(load: LoadSpec) -> float:
    """The step the forecast's history is wanted at, seconds: 5m, or a 48th of a seasonal
    period shorter than 4h."""
    spec = load.forecast
    if spec.model is ForecastModel.SEASONAL:
        return min(HISTORY_STEP, spec.period.total_seconds() / PHASES)
    return HISTORY_STEP


def history_step(load: LoadSpec) -> float:
    """The step of the history read from Prometheus, seconds: :func:`phase_step`, at least
    ``sampleEvery``, and coarse enough that ``history`` holds at most ``MAX_POINTS`` (which
    ``validate`` sees to)."""
    return max(
        load.sample_every.total_seconds(),
        phase_step(load),
        load.forecast.history.total_seconds() / MAX_POINTS,
    )


@dataclass(frozen=True, slots=True)
class Forecast:
    """One VM's forecast and its error over the last day, cores."""

    value: float | None
    """The expected mean demand over the next horizon; None: too little history."""
    error: float | None = None
    """The forecast's mean absolute error over the last day; None: not measured."""
    window_error: float | None = None
    """The window's mean, held over the horizon, measured the same way."""

    @property
    def usable(self) -> bool:
        """Whether the plan may use it: known, and not worse than the window's mean."""
        if self.value is None:
            return False
        if self.error is None or self.window_error is None:
            return True
        return self.error <= self.window_error


NO_FORECAST = Forecast(None)


def blend(forecast: float, window: float, weight: float) -> float:
    """``weight`` of the forecast and the rest of the window's figure."""
    return weight * forecast + (1.0 - weight) * window


class _Grid:
    """Values on slots of ``step`` seconds; slot ``n - 1`` is the point at ``now``."""

    def __init__(
        self, points: Iterable[tuple[float, float]], now: float, span: float, step: float
    ) -> None:
        self.step = step
        self.n = max(1, round(span / step))
        self.now = now
        n = self.n
        vals: list[float | None] = [None] * n
        isfinite = math.isfinite
        last = n - 1 - now / step
        for t, v in points:
            # two points in one slot: the larger, whatever their order
            if v >= 0 and isfinite(v) and isfinite(t):
                i = round(t / step + last)
                if 0 <= i < n:
                    old = vals[i]
                    if old is None or v > old:
                        vals[i] = v
        self.vals = vals
        self.first = next((i for i, v in enumerate(vals) if v is not None), None)

    def slots(self, seconds: float) -> int:
        return max(1, round(seconds / self.step))

    def mean(self, lo: int, hi: int, need: float = 0.0) -> float | None:
        """The mean of the known values of slots ``lo`` to ``hi - 1``; None when fewer than
        ``need`` of them (a share) are known."""
        lo = max(0, lo)
        hi = min(self.n, hi)
        known = [v for v in self.vals[lo:hi] if v is not None]
        if not known or len(known) < need * (hi - lo):
            return None
        return sum(known) / len(known)


def forecast(
    points: Iterable[tuple[float, float]],
    now: float,
    spec: ForecastSpec,
    *,
    window: float,
    step: float,
) -> Forecast:
    """The forecast of one VM over the next ``spec.horizon`` from its ``points`` of the last
    ``spec.history`` before ``now`` (every ``step`` seconds); ``window``: the policy's window,
    seconds (the trend's span, and the figure the error is compared with)."""
    grid = _Grid(points, now, spec.history.total_seconds(), step)
    if grid.first is None:
        return NO_FORECAST
    horizon = spec.horizon.total_seconds()
    if spec.model is ForecastModel.TREND:
        return _trend(grid, horizon, window)
    return _seasonal(grid, horizon, window, spec.period.total_seconds())


def _errors(
    grid: _Grid,
    predict: Callable[[int], float | None],
    horizon: int,
    window: int,
    span: float = ERROR_SPAN,
) -> tuple[float | None, float | None]:
    """The mean absolute error of ``predict`` and of the window's mean held, over forecasts
    made every ``horizon`` slots through the last ``span`` seconds."""
    n = grid.n
    origin = n - 1 - grid.slots(span)
    errs: list[float] = []
    held: list[float] = []
    while origin + horizon <= n - 1:
        if origin >= 0:
            came = grid.mean(origin + 1, origin + 1 + horizon, MIN_COVERED)
            was = grid.mean(origin + 1 - window, origin + 1)
            guess = predict(origin) if came is not None and was is not None else None
            if guess is not None and came is not None and was is not None:
                errs.append(abs(guess - came))
                held.append(abs(was - came))
        origin += horizon
    if not errs:
        return None, None
    return round(sum(errs) / len(errs), 6), round(sum(held) / len(held), 6)


class _Seasonal:
    """The profile of slots before ``until``, moved by the recent level."""

    def __init__(
        self,
        grid: _Grid,
        period: int,
        horizon: int,
        sums: list[float],
        counts: list[int],
        level: float = LEVEL_SPAN,
    ) -> None:
        self.grid = grid
        self.period = period
        self.horizon = horizon
        self.level = grid.slots(level)
        self.profile: list[float | None] = [
            s / c if c else None for s, c in zip(sums, counts, strict=True)
        ]

    def __call__(self, origin: int) -> float | None:
        profile, period = self.profile, self.period
        ahead = [profile[(origin + k) % period] for k in range(1, self.horizon + 1)]
        known = [p for p in ahead if p is not None]
        if not known:
            return None
        shifts: list[float] = []
        for i in range(max(0, origin + 1 - self.level), origin + 1):
            v, p = self.grid.vals[i], profile[i % period]
            if v is not None and p is not None:
                shifts.append(v - p)
        if not shifts:
            return None
        return max(0.0, sum(known) / len(known) + sum(shifts) / len(shifts))


def _add(grid: _Grid, period: int, lo: int, hi: int, sums: list[float], counts: list[int]) -> None:
    """Add the known values of slots ``lo`` to ``hi - 1`` to their phases' sums."""
    vals = grid.vals
    for i in range(max(0, lo), hi):
        v = vals[i]
        if v is not None:
            sums[i % period] += v
            counts[i % period] += 1


class _Trend:
    def __init__(self, grid: _Grid, span: int, horizon: int) -> None:
        self.grid = grid
        self.span = span
        self.horizon = horizon

    def __call__(self, origin: int) -> float | None:
        xs: list[float] = []
        ys: list[float] = []
        for i in range(max(0, origin + 1 - self.span), origin + 1):
            v = self.grid.vals[i]
            if v is not None:
                xs.append(float(i))
                ys.append(v)
        if len(xs) < 2 or len(xs) < MIN_COVERED * self.span:
            return None
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
        middle = origin + (self.horizon + 1) / 2
        return max(0.0, my + slope * (middle - mx))


def _seasonal(grid: _Grid, horizon: float, window: float, cycle: float = DAY) -> Forecast:
    assert grid.first is not None
    seen = grid.n - grid.first  # slots from the first known one to now
    base = grid.slots(cycle)
    period = base
    if cycle == DAY and seen >= 2 * grid.slots(WEEK):
        period = grid.slots(WEEK)  # the weekly profile: only with the daily period
    if seen < 2 * period:
        return NO_FORECAST
    known = sum(1 for v in grid.vals[grid.first :] if v is not None)
    if known < MIN_COVERED * seen:
        return NO_FORECAST
    h = grid.slots(horizon)
    span = min(ERROR_SPAN, cycle)  # the last day, or the last (shorter) period
    level = min(LEVEL_SPAN, cycle / 12)
    # the profile of the periods before the last (to measure the error on it), then of them all
    until = grid.n - grid.slots(span)
    sums, counts = [0.0] * period, [0] * period
    _add(grid, period, grid.first, until, sums, counts)
    trained = _Seasonal(grid, period, h, sums, counts, level)
    _add(grid, period, until, grid.n, sums, counts)
    value = _Seasonal(grid, period, h, sums, counts, level)(grid.n - 1)
    if value is None:
        return NO_FORECAST
    error, held = _errors(grid, trained, h, grid.slots(window), span)
    return Forecast(round(value, 6), error, held)


def _trend(grid: _Grid, horizon: float, window: float) -> Forecast:
    h = grid.slots(horizon)
    predict = _Trend(grid, grid.slots(max(window, 2 * horizon)), h)
    value = predict(grid.n - 1)
    if value is None:
        return NO_FORECAST
    error, held = _errors(grid, predict, h, grid.slots(window))
    return Forecast(round(value, 6), error, held)
