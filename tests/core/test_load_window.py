"""A VM's CPU over a window: rates from cumulative readings, statistics, unknown windows.

Properties over generated VMs whose true CPU use is known second by second: readings taken with
gaps, counter resets (restarts) and moves to other hosts inside the window give the true mean
over the covered time, never a negative or inflated rate, and an unknown figure (never zero)
when the window is mostly missing.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.load_window import (
    Reading,
    Span,
    figure,
    spans_of_points,
    spans_of_readings,
    weighted_quantile,
)
from reconciler.model.load import MIN_COVERED, Statistic

NS = 1_000_000_000


def readings_of(rates: list[float], every: float = 10.0, host: str = "a") -> list[Reading]:
    """Readings every ``every`` s of a VM using ``rates[i]`` cores in interval i."""
    out = [Reading(0.0, 0, host, "u")]
    total = 0
    for i, r in enumerate(rates):
        total += round(r * every * NS)
        out.append(Reading((i + 1) * every, total, host, "u"))
    return out


def test_mean_of_steady_use_is_that_use() -> None:
    spans = spans_of_readings(readings_of([0.8] * 6), max_gap=30)
    f = figure(spans, 0, 60, Statistic.MEAN)
    assert f.value == pytest.approx(0.8)
    assert f.covered == pytest.approx(1.0)


def test_a_spike_weighs_what_it_lasts_in_the_mean_and_all_of_it_in_the_max() -> None:
    # 5 s at 1 core in a minute sampled every 5 s: mean 1/12, p95 0 or 1, max 1
    rates = [1.0] + [0.0] * 11
    spans = spans_of_readings(readings_of(rates, every=5), max_gap=15)
    assert figure(spans, 0, 60, Statistic.MEAN).value == pytest.approx(1 / 12)
    assert figure(spans, 0, 60, Statistic.MAX).value == pytest.approx(1.0)
    assert figure(spans, 0, 60, Statistic.P95).value == pytest.approx(1.0)
    steady = spans_of_readings(readings_of([0.8] * 12, every=5), max_gap=15)
    assert figure(steady, 0, 60, Statistic.P95).value == pytest.approx(0.8)


def test_p95_leaves_out_the_top_five_percent_of_the_time() -> None:
    rates = [1.0] + [0.2] * 39  # the spike is 2.5% of the window
    spans = spans_of_readings(readings_of(rates, every=5), max_gap=15)
    assert figure(spans, 0, 200, Statistic.P95).value == pytest.approx(0.2)


def test_no_rate_across_a_counter_reset_a_move_or_a_long_gap() -> None:
    r = [
        Reading(0, 10 * NS, "a", "u"),
        Reading(10, 15 * NS, "a", "u"),  # 0.5 cores
        Reading(20, 1 * NS, "a", "u"),  # restarted: counter went back
        Reading(30, 3 * NS, "a", "u"),  # 0.2 cores
        Reading(35, 4 * NS, "a", "u", 7),  # restarted again: a new domain ID, counter higher
        Reading(40, 1 * NS, "b", "u"),  # moved to b: a new process, a new counter
        Reading(50, 9 * NS, "b", "u"),  # 0.8 cores
        Reading(200, 20 * NS, "b", "u"),  # after a gap of 150 s
        Reading(210, 21 * NS, "b", "x"),  # another domain of the same name
    ]
    spans = spans_of_readings(r, max_gap=30)
    assert [(s.start, s.end, round(s.rate, 6)) for s in spans] == [
        (0, 10, 0.5),
        (20, 30, 0.2),
        (40, 50, 0.8),
    ]


def test_a_window_mostly_missing_is_unknown_not_zero() -> None:
    spans = [Span(0, 20, 0.0)]  # 20 s of 60 known, idle
    f = figure(spans, 0, 60, Statistic.MEAN)
    assert f.value is None
    assert f.covered == pytest.approx(1 / 3)
    half = figure([Span(0, 30, 0.0)], 0, 60, Statistic.MEAN)
    assert half.value == 0.0  # covered enough: a real zero


def test_spans_are_clipped_to_the_window() -> None:
    spans = [Span(-30, 30, 1.0), Span(30, 60, 0.0)]
    f = figure(spans, 0, 60, Statistic.MEAN)
    assert f.value == pytest.approx(0.5)
    assert f.covered == pytest.approx(1.0)


def test_points_stand_for_the_step_before_them_and_bad_values_are_left_out() -> None:
    spans = spans_of_points([(30, 0.5), (60, math.nan), (90, -1.0), (120, 0.25)], step=30)
    assert [(s.start, s.end, s.rate) for s in spans] == [(0, 30, 0.5), (90, 120, 0.25)]


def test_weighted_quantile() -> None:
    assert weighted_quantile([(1.0, 1), (2.0, 1), (3.0, 98)], 0.95) == 3.0
    assert weighted_quantile([(1.0, 96), (3.0, 4)], 0.95) == 1.0
    assert weighted_quantile([(5.0, 1)], 0.95) == 5.0


# --- properties -------------------------------------------------------------------------

interval = st.tuples(
    st.floats(min_value=0, max_value=8, allow_nan=False),  # true cores in this interval
    st.sampled_from(["read", "read", "read", "missed", "restart", "move"]),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(interval, min_size=1, max_size=40),
    st.sampled_from(list(Statistic)),
    st.floats(min_value=1, max_value=60),
)
def test_windows_with_gaps_resets_and_moves(
    plan: list[tuple[float, str]], statistic: Statistic, every: float
) -> None:
    """Whatever happens in the window, a known figure lies within the true rates of the
    intervals that were read whole, equals their time-weighted mean for ``mean``, and a window
    covered less than half is unknown."""
    readings = [Reading(0.0, 5 * NS, "h0", "u", 1)]
    cpu, host, t, domain_id = 5 * NS, 0, 0.0, 1
    read_rates: list[tuple[float, float]] = []  # (rate, seconds) of intervals read whole
    previous_read = True
    for rate, event in plan:
        t += every
        if event == "restart":  # counter starts anew mid-interval, the domain gets a new ID
            cpu = round(rate * every * NS / 2)
            domain_id += 1
        elif event == "move":
            host += 1
            cpu = round(rate * every * NS / 2)
        else:
            cpu += round(rate * every * NS)
        if event == "missed":
            previous_read = False
            continue
        if event == "read" and previous_read:
            read_rates.append((rate, every))
        readings.append(Reading(t, cpu, f"h{host}", "u", domain_id))
        previous_read = True
    spans = spans_of_readings(readings, max_gap=1.5 * every)  # no rate across a missed one
    f = figure(spans, 0, t, statistic)
    covered = sum(s for _, s in read_rates)
    assert f.covered == pytest.approx(covered / t)
    if covered / t < MIN_COVERED - 1e-9:
        assert f.value is None
        return
    if f.value is None:  # exactly at the limit, by rounding
        assert covered / t == pytest.approx(MIN_COVERED)
        return
    low = min(r for r, _ in read_rates)
    high = max(r for r, _ in read_rates)
    tolerance = 1e-6 + 1 / every / NS * 2
    assert low - tolerance <= f.value <= high + tolerance
    if statistic is Statistic.MEAN:
        mean = sum(r * s for r, s in read_rates) / covered
        assert f.value == pytest.approx(mean, abs=tolerance)
    if statistic is Statistic.MAX:
        assert f.value == pytest.approx(high, abs=tolerance)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 100), st.floats(0.01, 50), st.floats(0, 16)),
        max_size=20,
    ),
    st.floats(0, 100),
    st.floats(1, 200),
)
def test_unknown_is_never_read_as_zero(
    raw: list[tuple[float, float, float]], start: float, length: float
) -> None:
    """A figure is None exactly when less than half of the window is covered; a known one is
    never below the smallest rate covering the window, so an idle-looking zero only comes
    from samples that say zero."""
    spans = [Span(a, a + d, r) for a, d, r in raw]
    for statistic in Statistic:
        f = figure(spans, start, start + length, statistic)
        inside = [s for s in spans if min(s.end, start + length) > max(s.start, start)]
        if f.value is None:
            assert f.covered < MIN_COVERED or not inside
            continue
        assert f.covered >= MIN_COVERED
        assert min(s.rate for s in inside) - 1e-9 <= f.value <= max(s.rate for s in inside) + 1e-9
        if f.value == 0:
            assert min(s.rate for s in inside) == 0
