"""Each VM's forecast from its history: a periodic trace is forecast after two periods, a
constant one is the constant, the same history gives the same figure, too little history
gives none, and the forecast's error over the last day decides whether it is used."""

from __future__ import annotations

import math
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.forecast import DAY, NO_FORECAST, Forecast, blend, forecast
from reconciler.model.load import ForecastModel, ForecastSpec

STEP = 300.0
WINDOW = 600.0
NOW = 1_800_000_000.0  # on the 5m grid


def history(shape: list[float], now: float, days: float) -> list[tuple[float, float]]:
    """Points every 5m over ``days`` before ``now`` following an hourly daily ``shape``
    (hour of day -> cores, linear between hours)."""
    out = []
    for k in range(round(days * DAY / STEP)):
        t = now - k * STEP
        out.append((t, daily(shape, t)))
    return out


def daily(shape: list[float], t: float) -> float:
    hour = ((t - STEP) % DAY) / 3600.0  # a point stands for the step before it
    i = int(hour) % 24
    frac = hour - int(hour)
    return shape[i] * (1 - frac) + shape[(i + 1) % 24] * frac


def coming(shape: list[float], now: float, horizon: float) -> float:
    n = round(horizon / STEP)
    return sum(daily(shape, now + k * STEP) for k in range(1, n + 1)) / n


shapes = st.lists(st.floats(0.05, 8.0), min_size=24, max_size=24)
horizons = st.sampled_from([5, 15, 30, 60, 240])
offsets = st.integers(0, 287)


@settings(max_examples=40, deadline=None)
@given(shapes, horizons, offsets, st.floats(2.0, 4.0))
def test_a_periodic_trace_is_forecast_within_5_percent_after_two_periods(
    shape: list[float], minutes: int, offset: int, days: float
) -> None:
    now = NOW + offset * STEP
    spec = ForecastSpec(horizon=timedelta(minutes=minutes))
    got = forecast(history(shape, now, days), now, spec, window=WINDOW, step=STEP)
    want = coming(shape, now, minutes * 60.0)
    assert got.value is not None
    assert abs(got.value - want) <= 0.05 * want + 1e-9
    assert got.usable


@settings(max_examples=30, deadline=None)
@given(
    st.floats(0.0, 64.0),
    st.sampled_from(list(ForecastModel)),
    horizons,
    st.floats(2.0, 4.0),
)
def test_a_constant_trace_forecasts_the_constant(
    value: float, model: ForecastModel, minutes: int, days: float
) -> None:
    spec = ForecastSpec(horizon=timedelta(minutes=minutes), model=model)
    points = history([value] * 24, NOW, days)
    got = forecast(points, NOW, spec, window=WINDOW, step=STEP)
    assert got.value is not None
    assert math.isclose(got.value, value, rel_tol=1e-6, abs_tol=1e-6)
    assert got.error == 0.0 == got.window_error


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.floats(0.0, 16.0), min_size=1, max_size=60),
    st.integers(500, 900),
    st.sampled_from(list(ForecastModel)),
    st.randoms(use_true_random=False),
)
def test_the_same_history_gives_the_same_forecast(
    cycle: list[float], length: int, model: ForecastModel, rng: object
) -> None:
    spec = ForecastSpec(model=model, history=timedelta(days=3))
    values = [cycle[k % len(cycle)] * (1 + (k * 31) % 7 / 10) for k in range(length)]
    points = [(NOW - k * STEP, v) for k, v in enumerate(values) if (k * 13) % 11]
    first = forecast(points, NOW, spec, window=WINDOW, step=STEP)
    shuffled = list(points)
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    assert forecast(shuffled, NOW, spec, window=WINDOW, step=STEP) == first
    if first.value is not None:
        assert first.value >= 0


def test_too_little_history_gives_no_forecast() -> None:
    spec = ForecastSpec()
    shape = [1.0 + h / 10 for h in range(24)]
    assert forecast(history(shape, NOW, 1.9), NOW, spec, window=WINDOW, step=STEP) == NO_FORECAST
    assert forecast([], NOW, spec, window=WINDOW, step=STEP) == NO_FORECAST
    # two days, but mostly missing: unknown slots are not zero, and not enough
    sparse = history(shape, NOW, 2.0)[::3]
    assert forecast(sparse, NOW, spec, window=WINDOW, step=STEP) == NO_FORECAST
    trend = ForecastSpec(model=ForecastModel.TREND)
    assert forecast([(NOW, 1.0)], NOW, trend, window=WINDOW, step=STEP) == NO_FORECAST


def test_a_weekly_cycle_is_learnt_with_two_weeks_of_history() -> None:
    # busy on weekdays, idle at the weekend: a daily profile misses it, a weekly one does not
    def cores(t: float) -> float:
        return 0.1 if int(((t - STEP) % (7 * DAY)) // DAY) in (5, 6) else 4.0

    now = NOW + 5 * DAY - (NOW % (7 * DAY))  # the start of a weekend
    points = [(now - k * STEP, cores(now - k * STEP)) for k in range(round(14 * DAY / STEP))]
    spec = ForecastSpec(history=timedelta(days=14), horizon=timedelta(hours=2))
    got = forecast(points, now, spec, window=WINDOW, step=STEP)
    assert got.value is not None
    assert got.value < 0.5


def test_a_trend_follows_a_ramp() -> None:
    spec = ForecastSpec(model=ForecastModel.TREND, horizon=timedelta(minutes=30))
    points = [(NOW - k * STEP, 5.0 - k * 0.01) for k in range(300)]
    got = forecast(points, NOW, spec, window=WINDOW, step=STEP)
    assert got.value is not None
    assert math.isclose(got.value, 5.0 + 0.035, rel_tol=1e-9)  # the mean of the next 6 points
    # falling to nothing: the line goes below zero, the forecast does not
    falling = [(NOW - k * STEP, 0.1 * k) for k in range(12)]
    assert forecast(falling, NOW, spec, window=WINDOW, step=STEP).value == 0.0
    # fewer points than half of the hour it is drawn through: none
    assert forecast(falling[:5], NOW, spec, window=WINDOW, step=STEP) == NO_FORECAST


def test_a_forecast_worse_than_the_window_is_not_used() -> None:
    # noise with no daily cycle: the profile of yesterday says nothing of today
    values = [((k * 7919) % 97) / 10.0 for k in range(3 * 288)]
    points = [(NOW - k * STEP, v) for k, v in enumerate(values)]
    got = forecast(points, NOW, ForecastSpec(), window=3600.0, step=STEP)
    assert got.value is not None
    assert got.error is not None
    assert got.window_error is not None
    assert got.error > got.window_error
    assert not got.usable
    assert Forecast(1.0, 0.2, 0.1).usable is False
    assert Forecast(1.0, 0.1, 0.2).usable is True
    assert Forecast(1.0).usable is True
    assert blend(4.0, 2.0, 0.25) == 2.5
