"""``spec.sharedStorage`` and ``spec.observe`` of the Cluster: defaults, forms, refusals."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from reconciler.model.cluster import Cluster


def _cluster(**spec: Any) -> Cluster:
    return Cluster.model_validate(
        {
            "apiVersion": "placement/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "c"},
            "spec": {"hosts": [{"name": "kvm-01", "uri": "test:///default"}], **spec},
        }
    )


def test_defaults_are_the_command_line_defaults() -> None:
    spec = _cluster().spec
    assert spec.shared_storage == []
    assert spec.observe.connect_timeout == timedelta(seconds=5)
    assert spec.observe.call_timeout == timedelta(seconds=10)
    assert spec.observe.sample_interval == timedelta(milliseconds=500)
    assert spec.observe.concurrency is None


def test_camel_case_keys_durations_and_seconds() -> None:
    spec = _cluster(
        sharedStorage=["/mnt/nfs", "/var/lib/ceph"],
        observe={"connectTimeout": "2s", "callTimeout": 3, "sampleInterval": "250ms"},
    ).spec
    assert spec.shared_storage == ["/mnt/nfs", "/var/lib/ceph"]
    assert spec.observe.connect_timeout == timedelta(seconds=2)
    assert spec.observe.call_timeout == timedelta(seconds=3)
    assert spec.observe.sample_interval == timedelta(milliseconds=250)
    dumped = _cluster(observe={"callTimeout": 3}).model_dump(mode="json", by_alias=True)
    assert dumped["spec"]["observe"]["callTimeout"] == "3s"
    assert dumped["spec"]["sharedStorage"] == []


@pytest.mark.parametrize(
    ("observe", "where"),
    [
        ({"callTimeout": "0s"}, "callTimeout"),
        ({"connectTimeout": 0}, "connectTimeout"),
        ({"callTimeout": -1}, "callTimeout"),
        ({"callTimeout": "soon"}, "callTimeout"),
        ({"sampleInterval": "-1s"}, "sampleInterval"),
        ({"concurrency": 0}, "concurrency"),
        ({"call_timeouts": "3s"}, "call_timeouts"),
    ],
)
def test_bad_observe_settings_are_refused_where_they_are(
    observe: dict[str, Any], where: str
) -> None:
    with pytest.raises(ValidationError) as info:
        _cluster(observe=observe)
    locs = [".".join(str(p) for p in e["loc"]) for e in info.value.errors()]
    assert any(loc.endswith(f"observe.{where}") for loc in locs), locs


@pytest.mark.parametrize("path", ["mnt/nfs", "", "relative"])
def test_shared_storage_needs_absolute_paths(path: str) -> None:
    with pytest.raises(ValidationError, match="sharedStorage"):
        _cluster(sharedStorage=[path])
