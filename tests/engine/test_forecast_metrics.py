"""The forecast's own error as Prometheus scrapes it: per cluster (never per VM), the mean
absolute error of the forecast and of the window's mean, their ratio, and how many VMs the
forecast was used for; gone when the policy no longer forecasts."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import generate_latest

from reconciler.engine.metrics import Metrics
from reconciler.model.load import ForecastModel, ForecastView
from reconciler.model.plan import Plan, PlanLoad
from tests.fakes import T0


def forecast_lines(metrics: Metrics) -> list[str]:
    text = generate_latest(metrics.registry).decode()
    return [line for line in text.splitlines() if line.startswith("reconciler_forecast_")]


def test_the_forecast_error_is_a_gauge_per_cluster_and_gone_without_a_forecast() -> None:
    metrics = Metrics("lab")
    view = ForecastView(
        horizon=timedelta(minutes=30),
        weight=0.5,
        model=ForecastModel.SEASONAL,
        used=["a", "b"],
        no_history=["c"],
        ignored={"d": "its forecast erred by ..."},
        errors={"a": 0.1, "b": 0.3, "d": 0.9},
        error=0.2,
        window_error=0.4,
    )
    load = PlanLoad(
        source="samples", basis="window", window=600, statistic="forecast", forecast=view
    )
    metrics.record_plan(Plan(plan_id="p", cluster="lab", created_at=T0, load=load))
    assert forecast_lines(metrics) == [
        'reconciler_forecast_error_cores{cluster="lab",which="forecast"} 0.2',
        'reconciler_forecast_error_cores{cluster="lab",which="window"} 0.4',
        'reconciler_forecast_error_ratio{cluster="lab"} 0.5',
        'reconciler_forecast_vms{cluster="lab",use="used"} 2.0',
        'reconciler_forecast_vms{cluster="lab",use="no_history"} 1.0',
        'reconciler_forecast_vms{cluster="lab",use="ignored"} 1.0',
    ]
    assert not any("vm=" in line for line in forecast_lines(metrics))  # no series per VM
    plain = load.model_copy(update={"forecast": None, "statistic": "mean"})
    metrics.record_plan(Plan(plan_id="p", cluster="lab", created_at=T0, load=plain))
    assert forecast_lines(metrics) == []
