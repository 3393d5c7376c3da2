"""reconciler_load_unknown: the VMs and hosts whose load over the window the last plan did not
know, as Prometheus scrapes them."""

from __future__ import annotations

from prometheus_client import generate_latest

from reconciler.engine.metrics import Metrics
from reconciler.model.plan import Plan, PlanLoad
from tests.fakes import T0


def scraped(metrics: Metrics) -> list[str]:
    text = generate_latest(metrics.registry).decode()
    return [line for line in text.splitlines() if line.startswith("reconciler_load_unknown{")]


def test_the_unknown_vms_and_hosts_are_counted_and_cleared() -> None:
    metrics = Metrics("lab")
    load = PlanLoad(
        source="prometheus",
        basis="window",
        window=600,
        statistic="mean",
        problem=None,
        unknown_vms=["x", "y", "z"],
        unknown_hosts=["a"],
    )
    metrics.record_plan(Plan(plan_id="p", cluster="lab", created_at=T0, load=load))
    assert scraped(metrics) == [
        'reconciler_load_unknown{cluster="lab",kind="vm"} 3.0',
        'reconciler_load_unknown{cluster="lab",kind="host"} 1.0',
    ]
    metrics.record_plan(Plan(plan_id="p", cluster="lab", created_at=T0))  # basis allocated
    assert scraped(metrics) == [
        'reconciler_load_unknown{cluster="lab",kind="vm"} 0.0',
        'reconciler_load_unknown{cluster="lab",kind="host"} 0.0',
    ]
