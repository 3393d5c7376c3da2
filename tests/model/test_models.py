from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from reconciler.model.base import fields_of
from reconciler.model.cluster import Cluster, effective_migration_limits, effective_reserve
from reconciler.model.desired import DesiredState
from reconciler.model.policy import BalancePolicy, cron_problem, timezone_problem
from reconciler.model.rules import PinRule, PlacementRules
from tests.core.builders import vm

HEAD = {"apiVersion": "placement/v1alpha1", "metadata": {"name": "lab"}}


def _cluster(**host: object) -> Cluster:
    return Cluster.model_validate(
        {
            **HEAD,
            "kind": "Cluster",
            "spec": {
                "defaults": {"reserve": {"memory": "1GiB"}, "migration": {"maxOutbound": 3}},
                "hosts": [{"name": "kvm-01", "uri": "test:///default", **host}],
            },
        }
    )


def test_policy_defaults_are_documented_values() -> None:
    spec = BalancePolicy.model_validate({**HEAD, "kind": "BalancePolicy"}).spec
    assert (spec.threshold, spec.margin, spec.hold_rounds, spec.batch) == (20, 2, 2, 4)
    assert spec.cooldown == timedelta(hours=6)
    assert spec.min_uptime == timedelta(minutes=5)
    assert spec.parallel.cluster == 4


def test_models_are_frozen() -> None:
    cluster = _cluster()
    with pytest.raises(ValidationError, match="frozen"):
        cluster.spec.hosts[0].name = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ({"threshold": 120}, "threshold"),
        ({"batch": 0}, "batch"),
        ({"score": {"cpu": 0, "memory": 0}}, "score"),
        ({"cooldown": "soon"}, "cooldown"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_policy_rejects_bad_values(spec: dict[str, object], where: str) -> None:
    with pytest.raises(ValidationError) as info:
        BalancePolicy.model_validate({**HEAD, "kind": "BalancePolicy", "spec": spec})
    assert where in str(info.value)


def test_rule_fields_belong_to_their_type() -> None:
    rule = {"name": "p", "type": "pin", "vms": {"names": ["erp"]}, "hosts": {"names": ["h"]}}
    ok = PlacementRules.model_validate(
        {**HEAD, "kind": "PlacementRules", "spec": {"rules": [rule]}}
    )
    assert isinstance(ok.spec.rules[0], PinRule)
    with pytest.raises(ValidationError, match="maxSkew"):
        PlacementRules.model_validate(
            {**HEAD, "kind": "PlacementRules", "spec": {"rules": [{**rule, "maxSkew": 1}]}}
        )


def test_selector_needs_names_or_labels() -> None:
    rule = {"name": "x", "type": "exclude", "vms": {}}
    with pytest.raises(ValidationError, match="names and/or labels"):
        PlacementRules.model_validate({**HEAD, "kind": "PlacementRules", "spec": {"rules": [rule]}})


def test_host_settings_override_defaults() -> None:
    cluster = _cluster(reserve={"cpus": 2})
    host = cluster.spec.hosts[0]
    assert effective_reserve(cluster, host) == (1024**3, 2.0)
    assert effective_migration_limits(cluster, host) == (3, 2)


def test_desired_state_defaults_the_optional_documents() -> None:
    desired = DesiredState(cluster=_cluster())
    assert desired.policy.spec.mode == "propose"
    assert desired.rules.spec.rules == []
    assert desired.placement.spec.vms == {}


@pytest.mark.parametrize(
    ("schedule", "problem"),
    [
        ("99 99 99 99 99", "the minute field '99' is out of range (minutes are 0-59)"),
        ("0 25 * * 1-5", "the hour field '25' is out of range (hours are 0-23)"),
        ("0 0 30 2 *", "the day-of-month field '30' is out of range"),
        ("0 22 * 13 *", "the month field '13' is out of range (months are 1-12 or jan-dec)"),
        ("0 22 * * fri-sun-x", "the day-of-week field 'fri-sun-x' is out of range"),
        ("0 22 * * 1-5", None),
        ("*/30 1-3 * jan-mar sat,sun", None),
    ],
)
def test_cron_schedules_are_read_by_cronsim(schedule: str, problem: str | None) -> None:
    found = cron_problem(schedule)
    assert found == problem if problem is None else (found or "").startswith(problem)


@pytest.mark.parametrize(
    ("zone", "problem"),
    [
        ("Europe/Berlin", None),
        ("UTC", None),
        ("Europe/Berln", "unknown time zone 'Europe/Berln'; did you mean 'Europe/Berlin'?"),
        ("../etc/passwd", "unknown time zone '../etc/passwd'; use an IANA name"),
    ],
)
def test_time_zones_are_iana_names(zone: str, problem: str | None) -> None:
    found = timezone_problem(zone)
    assert found == problem if problem is None else (found or "").startswith(problem)


def test_fields_of_is_every_field_by_its_python_name() -> None:
    """The planner's passes over every sighting read fields from ``fields_of``: it must hold
    each field's value under its snake_case name, as attribute access gives it, including the
    defaults a document left out and the values of nested models."""
    sighting = vm("web-1", "kvm-01", cpu_used=1.5, last_moved_at=None)
    fields = fields_of(sighting)
    assert set(fields) == set(type(sighting).model_fields)
    for name in type(sighting).model_fields:
        assert fields[name] is getattr(sighting, name), name
    record = fields_of(fields["reconciler"])
    assert set(record) == set(type(sighting.reconciler).model_fields)
    assert record["last_moved_at"] is None
    assert fields["cpu_used"] == 1.5
