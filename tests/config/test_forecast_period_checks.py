"""spec.load.forecast.period: a cycle its sampling can hold and its history sees twice, each
problem on its line with how to fix it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.test_load_checks import policy

LAB = ("load:", "  source: prometheus", "  statistic: forecast", "  sampleEvery: 5s")


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_a_day_compressed_into_10_minutes_is_valid(tmp_path: Path) -> None:
    forecast = "  forecast: {period: 10m, history: 1h, horizon: 3m, weight: 1}"
    assert policy(tmp_path, *LAB, forecast) == []
    # the default period, given: as before
    assert policy(tmp_path, *LAB, "  forecast: {period: 1d, history: 7d}") == []


def test_a_period_needs_two_samples(tmp_path: Path) -> None:
    found = policy(tmp_path, *LAB, "  forecast: {period: 8s, history: 1h, horizon: 1m}")
    assert found == [
        "lab/policy.yaml:9:24: error: spec.load.forecast.period: period 8s holds fewer than two "
        "samples taken every 5s: no cycle could be told (use a period of at least 10s, or a "
        "shorter sampleEvery)"
    ]


def test_a_period_is_seen_twice_in_the_history(tmp_path: Path) -> None:
    found = policy(tmp_path, *LAB, "  forecast: {period: 40m, history: 1h}")
    assert found == [
        "lab/policy.yaml:9:24: error: spec.load.forecast.period: period 40m is longer than half "
        "the history 1h: a seasonal forecast needs to see its cycle twice, no VM would ever be "
        "forecast (use history: 1h20m or more, or a period of at most 30m)"
    ]
    # the default period, given or not, keeps the message of the two days it needs
    given = policy(tmp_path, *LAB, "  forecast: {period: 1d, history: 36h}")
    assert len(given) == 1, given
    assert "period 1d is longer than half the history 1d12h" in given[0]


def test_a_short_period_over_a_long_history_is_too_many_points(tmp_path: Path) -> None:
    found = policy(tmp_path, *LAB, "  forecast: {period: 10m, history: 7d}")
    assert found == [
        "lab/policy.yaml:9:38: error: spec.load.forecast.history: history 7d read every "
        "12s500ms (a 48th of the 10m period, or sampleEvery) holds 48384 points per VM; at "
        "most 8064 (use history: 1d4h or less, or a longer period)"
    ]


def test_a_period_out_of_its_own_bounds_says_the_bound(tmp_path: Path) -> None:
    (short,) = policy(tmp_path, "load: {forecast: {period: 1s}}")
    assert "period 1s is too short to hold a cycle (use at least two sampleEvery" in short
    (long,) = policy(tmp_path, "load: {forecast: {period: 15d}}")
    assert "period 15d is longer than half the longest history (28d)" in long


def test_a_period_a_trend_does_not_read_is_warned_about(tmp_path: Path) -> None:
    found = policy(tmp_path, *LAB, "  forecast: {period: 10m, history: 1h, model: trend}")
    assert found == [
        "lab/policy.yaml:9:24: warning: spec.load.forecast.period: period is not read: a trend "
        "follows no cycle (model: trend) (set model: seasonal to read it, or remove it)"
    ]
