"""The gauges a round's plan sets: spread against the policy's threshold and patience."""

from __future__ import annotations

from datetime import UTC, datetime

from reconciler.engine.metrics import Metrics
from reconciler.model.plan import ArchSpread, HostLoad, Plan


def _plan(*spreads: ArchSpread) -> Plan:
    return Plan(
        plan_id="sha256:0",
        cluster="lab",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        spreads=list(spreads),
        hosts=[HostLoad(host="kvm-01", arch="x86_64", known=True, score_before=40.0)],
    )


def test_a_plan_sets_spread_threshold_rounds_over_and_hold_rounds_per_arch() -> None:
    metrics = Metrics("lab")
    metrics.record_plan(
        _plan(
            ArchSpread(
                arch="x86_64",
                before=31.0,
                after=12.0,
                threshold=20.0,
                rounds_over=3,
                hold_rounds=2,
                balancing=True,
            ),
            ArchSpread(
                arch="aarch64",
                before=5.0,
                after=5.0,
                threshold=20.0,
                rounds_over=0,
                hold_rounds=2,
                balancing=False,
            ),
        )
    )

    def value(name: str, arch: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"cluster": "lab", "arch": arch})

    assert value("reconciler_spread", "x86_64") == 31.0
    assert value("reconciler_spread_threshold", "x86_64") == 20.0
    assert value("reconciler_spread_rounds_over", "x86_64") == 3
    assert value("reconciler_spread_hold_rounds", "x86_64") == 2
    assert value("reconciler_spread_rounds_over", "aarch64") == 0
    assert value("reconciler_spread", "aarch64") == 5.0
    host = {"cluster": "lab", "host": "kvm-01"}
    assert metrics.registry.get_sample_value("reconciler_host_score", host) == 40.0


def test_hosts_in_standby_are_counted_from_the_rounds_status() -> None:
    from reconciler.model.status import ReconcileStatus

    metrics = Metrics("lab")
    asleep = ReconcileStatus(cluster="lab", standby={"kvm-02": "idle", "kvm-03": "idle"})
    metrics.record_round(asleep, 0.1)
    value = metrics.registry.get_sample_value("reconciler_hosts_standby", {"cluster": "lab"})
    assert value == 2
    metrics.record_round(ReconcileStatus(cluster="lab"), 0.1)
    assert metrics.registry.get_sample_value("reconciler_hosts_standby", {"cluster": "lab"}) == 0
