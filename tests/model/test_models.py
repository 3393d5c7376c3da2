from __future__ import annotations

import re
from datetime import timedelta

import pytest
from pydantic import ValidationError

from reconciler.model.cluster import Cluster, effective_migration_limits, effective_reserve
from reconciler.model.desired import DesiredState
from reconciler.model.policy import BalancePolicy
from reconciler.model.rules import PinRule, PlacementRules

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
    ("window", "problem"),
    [
        ({"schedule": "99 99 99 99 99", "duration": "1h"}, "the minute field '99' is out of range"),
        ({"schedule": "0 25 * * 1-5", "duration": "1h"}, "the hour field '25' is out of range"),
        ({"schedule": "0 0 30 2 *", "duration": "1h"}, "the day-of-month field '30'"),
        ({"schedule": "0 22 * 13 *", "duration": "1h"}, "the month field '13'"),
        ({"schedule": "0 22 * * fri-sun-x", "duration": "1h"}, "day-of-week"),
        ({"schedule": "0 22 * * 1-5", "duration": "0s"}, "a window of 0s never opens"),
        ({"schedule": "0 22 * * 1-5", "duration": 0}, "a window of 0s never opens"),
        (
            {"schedule": "0 22 * * 1-5", "duration": "2h", "timezone": "Europe/Berln"},
            "unknown time zone 'Europe/Berln'; did you mean 'Europe/Berlin'?",
        ),
        ({"schedule": "0 22 * * 1-5", "duration": "2h", "timezone": "../etc/x"}, "unknown time"),
    ],
)
def test_windows_are_checked_for_real(window: dict[str, object], problem: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(problem)):
        BalancePolicy.model_validate(
            {**HEAD, "kind": "BalancePolicy", "spec": {"windows": [window]}}
        )


def test_window_time_zone_defaults_to_utc_and_accepts_iana_names() -> None:
    windows = [
        {"schedule": "0 22 * * 1-5", "duration": "2h"},
        {"schedule": "*/30 1-3 * jan-mar sat,sun", "duration": "30m", "timezone": "Europe/Berlin"},
    ]
    spec = BalancePolicy.model_validate(
        {**HEAD, "kind": "BalancePolicy", "spec": {"windows": windows}}
    ).spec
    assert spec.windows is not None
    assert [w.timezone for w in spec.windows] == ["UTC", "Europe/Berlin"]
    assert spec.windows[1].duration == timedelta(minutes=30)
