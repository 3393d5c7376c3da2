"""A seasonal forecast of another cycle than a day (``forecast.period``): a day compressed into
10 minutes, as the lab's ``lab load --schedule`` plays it, is learnt after two periods at the
period's own step (a 48th of it); a constant trace forecasts the constant, the same history
gives the same figure, and the daily period (the default) keeps reading days and weeks."""

from __future__ import annotations

import math
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.forecast import (
    DAY,
    HISTORY_STEP,
    NO_FORECAST,
    forecast,
    history_step,
    phase_step,
)
from reconciler.model.load import ForecastModel, ForecastSpec, LoadSpec

PERIOD = 600.0
STEP = PERIOD / 48  # 12.5 s: what history_step gives a 10m period sampled every 5s
WINDOW = 60.0
NOW = 1_800_000_000.0  # on the 12.5 s grid


def spec(minutes: float = 3, history: float = 3600, **more: object) -> ForecastSpec:
    return ForecastSpec(
        period=timedelta(seconds=PERIOD),
        horizon=timedelta(minutes=minutes),
        history=timedelta(seconds=history),
        **more,  # type: ignore[arg-type]
    )


def cyclic(shape: list[float], t: float) -> float:
    """``shape``: cores at evenly spaced points over the period, linear between them; a point
    stands for the step before it."""
    phase = ((t - STEP) % PERIOD) / PERIOD * len(shape)
    i = int(phase) % len(shape)
    frac = phase - int(phase)
    return shape[i] * (1 - frac) + shape[(i + 1) % len(shape)] * frac


def trace(shape: list[float], now: float, periods: float) -> list[tuple[float, float]]:
    return [(now - k * STEP, cyclic(shape, now - k * STEP)) for k in range(round(periods * 48))]


def coming(shape: list[float], now: float, horizon: float) -> float:
    n = round(horizon / STEP)
    return sum(cyclic(shape, now + k * STEP) for k in range(1, n + 1)) / n


shapes = st.lists(st.floats(0.05, 8.0), min_size=4, max_size=12)
minutes = st.sampled_from([1, 2, 3, 5])


@settings(max_examples=40, deadline=None)
@given(shapes, minutes, st.integers(0, 47), st.floats(2.0, 4.5))
def test_a_10_minute_cycle_is_forecast_within_5_percent_after_two_periods(
    shape: list[float], horizon: int, offset: int, periods: float
) -> None:
    now = NOW + offset * STEP
    got = forecast(trace(shape, now, periods), now, spec(horizon), window=WINDOW, step=STEP)
    want = coming(shape, now, horizon * 60.0)
    assert got.value is not None
    assert abs(got.value - want) <= 0.05 * want + 1e-9
    assert got.usable


@settings(max_examples=30, deadline=None)
@given(st.floats(0.0, 64.0), minutes, st.floats(2.0, 4.5))
def test_a_constant_trace_forecasts_the_constant_over_a_short_period(
    value: float, horizon: int, periods: float
) -> None:
    got = forecast(trace([value], NOW, periods), NOW, spec(horizon), window=WINDOW, step=STEP)
    assert got.value is not None
    assert math.isclose(got.value, value, rel_tol=1e-6, abs_tol=1e-6)
    assert got.error == 0.0 == got.window_error


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.floats(0.0, 16.0), min_size=1, max_size=60),
    st.integers(100, 288),
    st.randoms(use_true_random=False),
)
def test_the_same_short_history_gives_the_same_forecast(
    cycle: list[float], length: int, rng: object
) -> None:
    values = [cycle[k % len(cycle)] * (1 + (k * 31) % 7 / 10) for k in range(length)]
    points = [(NOW - k * STEP, v) for k, v in enumerate(values) if (k * 13) % 11]
    first = forecast(points, NOW, spec(), window=WINDOW, step=STEP)
    shuffled = list(points)
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    assert forecast(shuffled, NOW, spec(), window=WINDOW, step=STEP) == first
    if first.value is not None:
        assert first.value >= 0


def test_less_than_two_short_periods_gives_no_forecast_and_a_day_is_not_learnt_from_them() -> None:
    shape = [0.1, 0.1, 0.1, 0.1, 0.9, 0.9, 0.9, 0.1, 0.1, 0.1]
    assert forecast(trace(shape, NOW, 1.9), NOW, spec(), window=WINDOW, step=STEP) == NO_FORECAST
    # three 10-minute cycles read with the daily period: far from two days, none
    daily = ForecastSpec(horizon=timedelta(minutes=3), history=timedelta(hours=1))
    assert forecast(trace(shape, NOW, 3), NOW, daily, window=WINDOW, step=STEP) == NO_FORECAST


def test_a_peak_ahead_is_forecast_before_it_comes_and_beats_the_window() -> None:
    """The lab's schedule: 10% of a core, 95% from the 4th to the 7th minute of each 10.
    A minute and a half before the peak, the next 3 minutes are nearly half peak: the forecast
    says so, the window (10%) does not, and over the last period the forecast erred less."""

    def load(t: float) -> float:
        return 0.95 if 240 <= (t - STEP) % PERIOD < 420 else 0.1

    now = NOW - NOW % PERIOD + 150  # 90 s before the peak
    points = [(now - k * STEP, load(now - k * STEP)) for k in range(round(2.5 * 48))]
    got = forecast(points, now, spec(), window=WINDOW, step=STEP)
    assert got.value is not None
    ahead = [load(now + k * STEP) for k in range(1, 15)]  # 3m: 14 steps of 12.5 s
    assert 0.4 < sum(ahead) / len(ahead) < 0.5  # six of them at the peak
    assert math.isclose(got.value, sum(ahead) / len(ahead), rel_tol=0.05)
    assert got.error is not None
    assert got.window_error is not None
    assert got.error < got.window_error
    assert got.usable


def test_the_history_step_follows_a_short_period_and_not_the_daily_one() -> None:
    def load(**forecast: object) -> LoadSpec:
        return LoadSpec.model_validate(
            {"statistic": "forecast", "sampleEvery": "5s", "forecast": forecast}
        )

    assert history_step(load()) == HISTORY_STEP == phase_step(load())  # the default: 5m
    assert history_step(load(period="1d", history="28d")) == 300.0
    assert history_step(load(period="10m", history="1h")) == 12.5
    assert history_step(load(period="2h", history="1d")) == 150.0
    assert history_step(load(period="6h")) == 300.0
    # never finer than sampleEvery, nor than MAX_POINTS over the history
    slow = LoadSpec.model_validate(
        {
            "statistic": "forecast",
            "sampleEvery": "1m",
            "forecast": {"period": "10m", "history": "1h"},
        }
    )
    assert history_step(slow) == 60.0
    assert history_step(load(period="10m", history="28d")) == 300.0
    # a trend follows no cycle: the daily step, whatever the period
    assert history_step(load(model="trend", period="10m")) == 300.0
    assert ForecastSpec().period == timedelta(days=1)
    assert spec().model is ForecastModel.SEASONAL
    assert DAY == 86400.0
