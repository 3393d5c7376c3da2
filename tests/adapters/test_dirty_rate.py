"""Dirty rates as the observer reads them: libvirt's fields, and which calculations it starts.

The lab (``test_busy_guests_lab.py``) shows the rate of a guest that really writes; libvirt's
test driver has no calculation (``observe`` there shows none)."""

from __future__ import annotations

from typing import Any

import libvirt
import pytest

from reconciler.adapters.libvirt import dirty_rate
from reconciler.adapters.libvirt.observe_host import Probe, ProbeSettings
from reconciler.adapters.libvirt.observer import observe_cluster
from reconciler.errors import HostTimeout
from tests.adapters.test_migrator_watch import error

MIB = 1 << 20
RUNNING = libvirt.VIR_DOMAIN_RUNNING


@pytest.mark.parametrize(
    ("stats", "rate"),
    [
        ({"dirtyrate.calc_status": 2, "dirtyrate.megabytes_per_second": 12}, 12 * MIB),
        ({"dirtyrate.calc_status": 2, "dirtyrate.megabytes_per_second": 0}, 0),
        ({"dirtyrate.calc_status": 1, "dirtyrate.megabytes_per_second": 12}, None),
        ({"dirtyrate.calc_status": 0}, None),
        ({"dirtyrate.calc_status": 2}, None),
        ({"dirtyrate.calc_status": 2, "dirtyrate.megabytes_per_second": -1}, None),
        ({}, None),
    ],
)
def test_only_a_finished_calculation_is_a_rate(stats: dict[str, Any], rate: int | None) -> None:
    assert dirty_rate.reading(stats) == rate


class Dom:
    def __init__(self, name: str, fail: libvirt.libvirtError | None = None) -> None:
        self.name, self.fail = name, fail
        self.started: list[tuple[int, int]] = []

    def startDirtyRateCalc(self, seconds: int, flags: int) -> int:  # noqa: N802
        self.started.append((seconds, flags))
        if self.fail is not None:
            raise self.fail
        return 0


def probe() -> Probe:
    return Probe("kvm-01", "qemu:///x", ProbeSettings(5.0, 5.0, 0.5, ()))


def test_a_calculation_starts_for_each_running_vm_not_measuring_already() -> None:
    running, measuring, off = Dom("a"), Dom("b"), Dom("c")
    gone = Dom("d", error(libvirt.VIR_ERR_NO_DOMAIN, "no domain"))
    records = [
        (running, {"state.state": RUNNING, "dirtyrate.calc_status": 2}),
        (measuring, {"state.state": RUNNING, "dirtyrate.calc_status": 1}),
        (off, {"state.state": libvirt.VIR_DOMAIN_SHUTOFF}),
        (gone, {"state.state": RUNNING}),
    ]
    p = probe()
    assert dirty_rate.start(p, records)
    assert running.started == [(dirty_rate.PERIOD, 0)]
    assert measuring.started == off.started == []
    assert gone.started, "tried, and passed"
    assert p.calls == 2


def test_a_driver_without_the_calculation_is_asked_once() -> None:
    unsupported = error(libvirt.VIR_ERR_NO_SUPPORT, "not supported")
    first, second = Dom("a", unsupported), Dom("b", unsupported)
    records = [(first, {"state.state": RUNNING}), (second, {"state.state": RUNNING})]
    assert not dirty_rate.start(probe(), records)
    assert second.started == []


def test_a_host_that_times_out_is_not_hidden() -> None:
    class Slow(Dom):
        def startDirtyRateCalc(self, seconds: int, flags: int) -> int:  # noqa: N802
            raise error(libvirt.VIR_ERR_OPERATION_TIMEOUT, "timed out")

    with pytest.raises(HostTimeout, match="timed out"):
        dirty_rate.start(probe(), [(Slow("a"), {"state.state": RUNNING})])


def test_the_test_driver_has_no_rate_and_the_observation_does_not_wait_for_one() -> None:
    from reconciler.model.base import API_VERSION
    from reconciler.model.cluster import Cluster, ClusterMetadata, ClusterSpec
    from tests.core.builders import host

    one = host("kvm-01").model_copy(update={"uri": "test:///default"})
    cluster = Cluster(
        api_version=API_VERSION,
        kind="Cluster",
        metadata=ClusterMetadata(name="t"),
        spec=ClusterSpec(hosts=[one]),
    )
    snap = observe_cluster(cluster, sample_interval=0.5)
    assert snap.vms
    assert all(vm.dirty_rate is None for vm in snap.vms)
