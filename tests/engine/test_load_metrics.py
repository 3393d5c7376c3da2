"""reconciler_load_unknown: the VMs and hosts whose load over the window the last plan did not
know, as Prometheus scrapes them; reconciler_host_cpu_percent: each host's CPU over the window
beside its short sample."""

from __future__ import annotations

from prometheus_client import generate_latest

from reconciler.engine.metrics import Metrics
from reconciler.model.plan import HostLoad, Plan, PlanLoad
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


def host_cpu(metrics: Metrics) -> dict[tuple[str, str], float]:
    out = {}
    for name in ("a", "b", "c"):
        for over in ("window", "sample"):
            value = metrics.registry.get_sample_value(
                "reconciler_host_cpu_percent", {"cluster": "lab", "host": name, "over": over}
            )
            if value is not None:
                out[(name, over)] = value
    return out


def test_host_cpu_over_the_window_beside_the_sample_and_never_a_stale_or_unknown_window() -> None:
    metrics = Metrics("lab")
    hosts = [
        HostLoad(host="a", arch="x86_64", known=True, cpu_before=60.0, cpu_now=95.0),
        HostLoad(
            host="b", arch="x86_64", known=True, cpu_before=5.0, cpu_now=0.0, load_known=False
        ),
        HostLoad(host="c", arch="x86_64", known=False),
    ]
    window = PlanLoad(source="samples", basis="window", window=600, statistic="mean")
    metrics.record_plan(Plan(plan_id="p", cluster="lab", created_at=T0, load=window, hosts=hosts))
    # b's window is unknown: no window figure for it, only its sample; c was not observed
    assert host_cpu(metrics) == {("a", "window"): 60.0, ("a", "sample"): 95.0, ("b", "sample"): 0.0}
    # a plan read on the short sample alone: that is the sample, and the window figures go
    sample = window.model_copy(update={"basis": "sample"})
    hosts = [h.model_copy(update={"cpu_now": None, "known": True}) for h in hosts]
    metrics.record_plan(Plan(plan_id="p", cluster="lab", created_at=T0, load=sample, hosts=hosts))
    assert host_cpu(metrics) == {("a", "sample"): 60.0, ("b", "sample"): 5.0, ("c", "sample"): 0.0}
    # basis allocated: no CPU use is read, none is shown
    metrics.record_plan(Plan(plan_id="p", cluster="lab", created_at=T0, hosts=hosts))
    assert host_cpu(metrics) == {}
