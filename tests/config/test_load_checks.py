"""spec.load: each problem on its line, with how to fix it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.clusters import cluster_yaml, findings_text

HEAD = "apiVersion: placement/v1alpha1\nkind: BalancePolicy\nmetadata: {name: p}\nspec:\n"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def policy(tmp_path: Path, *lines: str) -> list[str]:
    text = HEAD + "".join(f"  {line}\n" for line in lines)
    return findings_text(tmp_path, {"cluster.yaml": cluster_yaml(), "policy.yaml": text})


def test_the_defaults_and_a_prometheus_source_are_valid(tmp_path: Path) -> None:
    assert policy(tmp_path, "load: {}") == []
    assert policy(tmp_path, "load: {source: prometheus, prometheus: {url: 'https://p:9090'}}") == []


def test_a_window_needs_two_samples(tmp_path: Path) -> None:
    assert policy(tmp_path, "load: {window: 30s, sampleEvery: 20s}") == [
        "lab/policy.yaml:5:18: error: spec.load.window: window 30s holds fewer than two samples "
        "taken every 20s: no load could ever be told over it (use a window of at least 40s, or "
        "a shorter sampleEvery)"
    ]


def test_a_window_holds_at_most_720_samples(tmp_path: Path) -> None:
    assert policy(tmp_path, "load: {window: 7d, sampleEvery: 30s}") == [
        "lab/policy.yaml:5:35: error: spec.load.sampleEvery: a 7d window sampled every 30s "
        "holds 20160 samples per VM; at most 720 (use sampleEvery: 14m or more, or a shorter "
        "window)"
    ]


def test_credentials_in_the_prometheus_url_are_refused(tmp_path: Path) -> None:
    found = policy(
        tmp_path, "load:", "  source: prometheus", "  prometheus: {url: 'http://u:pw@p:9090'}"
    )
    assert found == [
        "lab/policy.yaml:7:23: error: spec.load.prometheus.url: the Prometheus URL holds "
        "credentials, which would be kept in git (remove user:password@ from it; give a bearer "
        "token in RECONCILER_PROMETHEUS_TOKEN instead)"
    ]
    assert "pw" not in found[0].split("(")[0].replace("RECONCILER", "")


def test_settings_that_are_not_read_are_warned_about(tmp_path: Path) -> None:
    assert policy(tmp_path, "basis: allocated", "load: {prometheus: {timeout: 5s}}") == [
        "lab/policy.yaml:6:22: warning: spec.load.prometheus: prometheus is not read: the load "
        "comes from run's own samples (source: samples) (set source: prometheus to read it, or "
        "remove it)",
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("load: {statistic: median}", "the string 'median' is not allowed"),
        ("load: {window: 5s}", "window 5s is too short to tell steady load from a spike"),
        ("load: {sampleEvery: 2h}", "2h is too long (use at most 1h)"),
        ("load: {prometheus: {url: 'ftp://x'}}", "spec.load.prometheus.url"),
        ("load: {prometheus: {timeout: 0s}}", "timeout 0s would give up"),
        ("load: {prometheus: {vmCpu: ''}}", "spec.load.prometheus.vmCpu"),
        ("load: {source: graphite}", "spec.load.source"),
        ("load: {forecast: {horizon: 2d}}", "2d is too long (use at most 1d)"),
        ("load: {forecast: {horizon: 10s}}", "horizon 10s is shorter than the history's"),
        ("load: {forecast: {history: 60d}}", "history 60d is longer than a Prometheus"),
        ("load: {forecast: {history: 10m}}", "history 10m is too short to learn from"),
        ("load: {forecast: {weight: 1.5}}", "spec.load.forecast.weight"),
        ("load: {forecast: {model: arima}}", "spec.load.forecast.model"),
    ],
)
def test_bad_values(tmp_path: Path, line: str, message: str) -> None:
    found = policy(tmp_path, line)
    assert len(found) == 1, found
    assert ": error: " in found[0]
    assert message in found[0]


def test_a_forecast_from_prometheus_is_valid(tmp_path: Path) -> None:
    assert policy(tmp_path, "load: {source: prometheus, statistic: forecast}") == []
    assert (
        policy(
            tmp_path,
            "load:",
            "  source: prometheus",
            "  statistic: forecast",
            "  forecast: {horizon: 15m, history: 14d, weight: 0.3, model: seasonal}",
        )
        == []
    )


def test_a_seasonal_forecast_needs_two_days_of_history(tmp_path: Path) -> None:
    found = policy(
        tmp_path,
        "load:",
        "  source: prometheus",
        "  statistic: forecast",
        "  forecast: {history: 36h}",
    )
    assert found == [
        "lab/policy.yaml:8:25: error: spec.load.forecast.history: history 1d12h is shorter than "
        "the two days a seasonal forecast needs to see a day's cycle twice: no VM would ever be "
        "forecast (use history: 2d or more (7d by default), or model: trend)"
    ]
    trend = "  forecast: {history: 36h, model: trend}"
    assert policy(tmp_path, "load:", "  source: prometheus", "  statistic: forecast", trend) == []


def test_a_trend_needs_history_over_its_span(tmp_path: Path) -> None:
    found = policy(
        tmp_path,
        "load:",
        "  source: prometheus",
        "  statistic: forecast",
        "  forecast: {history: 1h, horizon: 1h, model: trend}",
    )
    assert len(found) == 1, found
    assert "history 1h is shorter than the 2h a trend is drawn through" in found[0]
    assert "use history: 2h or more" in found[0]


def test_forecast_settings_that_are_not_read_are_warned_about(tmp_path: Path) -> None:
    assert policy(tmp_path, "load: {forecast: {horizon: 1h}}") == [
        "lab/policy.yaml:5:20: warning: spec.load.forecast: forecast is not read: the load is "
        "the window's mean (set statistic: forecast to read it, or remove it)"
    ]
    # run's samples keep the history a forecast learns from: nothing to warn of
    assert policy(tmp_path, "load: {statistic: forecast}") == []
