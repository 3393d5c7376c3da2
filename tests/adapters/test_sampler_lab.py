"""run's sampler on the lab's real libvirt daemons and QEMU guests: one call per host gives the
CPU time of every running guest, which grows, under IDs libvirt gives each running domain."""

from __future__ import annotations

import time

import pytest

from reconciler.adapters.lab import Lab
from reconciler.adapters.libvirt.sampler import LibvirtSampler
from reconciler.core.load_samples import added, readings
from reconciler.core.load_window import spans_of_readings
from reconciler.model.cluster import Cluster
from reconciler.model.load import LoadSpec

pytestmark = pytest.mark.lab


def test_every_running_guest_is_read_with_one_call_per_host(lab: Lab, lab_cluster: Cluster) -> None:
    uris = {h.name: h.uri for h in lab_cluster.spec.hosts}
    sampler = LibvirtSampler(uris, connect_timeout=5, call_timeout=10)
    spec = LoadSpec.model_validate({"window": "10s", "sampleEvery": "1s"})
    try:
        store = None
        for _ in range(3):
            taken = sampler.sample()
            assert [s.host for s in taken] == sorted(uris)
            assert all(s.error is None for s in taken), taken
            store = added(store, lab_cluster.metadata.name, spec, taken, time.time())
            time.sleep(1)
    finally:
        sampler.close()
    assert store is not None
    seen = {vm for s in taken for vm, *_ in s.vms}
    assert len(seen) >= 6  # the lab's running guests
    for s in taken:
        for _name, _uuid, domain_id, cpu in s.vms:
            assert domain_id > 0
            assert cpu > 0
    for name, series in readings(store).items():
        spans = spans_of_readings(series, max_gap=60)  # a busy machine samples late
        assert len(spans) == 2, (name, series)
        assert all(0 <= span.rate < 4 for span in spans), (name, spans)
