"""The domain recorder on the real lab: the state round-trips, labels and other metadata stay."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import libvirt
import pytest

from reconciler.adapters import lab as libvirt_lab
from reconciler.adapters.lab import Lab, LabVm
from reconciler.adapters.libvirt.connection import ConnectionSettings
from reconciler.adapters.libvirt.domain_metadata import METADATA_KEY, METADATA_NS, parse_metadata
from reconciler.adapters.libvirt.recorder import LibvirtRecorder
from reconciler.config import load_desired
from reconciler.errors import ConfigError, HostTimeout, HostUnreachable, TerminalError
from reconciler.model.snapshot import FailedMove, ReconcilerState

pytestmark = pytest.mark.lab

LABELS = {"app": "rec", "owner": "a&b <ops>"}
OTHER_NS = "https://example.org/other"
AT = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def conn_of(lab: Lab, host: str) -> Any:
    return libvirt.open(next(h.uri for h in lab.hosts if h.name == host))


@pytest.fixture
def vm(lab: Lab) -> Iterator[LabVm]:
    """A VM of this test on kvm-03, with labels and another tool's metadata."""
    made = LabVm("rec-1", "kvm-03", 64, 1, dict(LABELS))
    conn = conn_of(lab, "kvm-03")
    try:
        dom = conn.defineXML(libvirt_lab.domain_xml(made, lab.virt_type))
        dom.setMetadata(
            libvirt.VIR_DOMAIN_METADATA_ELEMENT,
            "<keep>me</keep>",
            "other",
            OTHER_NS,
            libvirt.VIR_DOMAIN_AFFECT_CONFIG,
        )
        dom.create()
        yield made
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            dom = conn.lookupByName(made.name)
            with contextlib.suppress(libvirt.libvirtError):
                dom.destroy()
            dom.undefine()
        conn.close()


def definitions(lab: Lab, name: str) -> list[str]:
    conn = conn_of(lab, "kvm-03")
    try:
        dom = conn.lookupByName(name)
        return [dom.XMLDesc(0), dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)]
    finally:
        conn.close()


def test_state_round_trips_on_live_and_persistent_definitions_keeping_labels(
    lab: Lab, vm: LabVm
) -> None:
    recorder = LibvirtRecorder(load_desired(lab.cluster_dir).cluster)
    moved = ReconcilerState(
        first_seen=AT,
        last_moved_at=AT,
        last_moved_from="kvm-01",
        last_moved_to="kvm-03",
        last_plan_id="sha256:abc",
        moves=2,
    )
    recorder.record("kvm-03", vm.name, moved)
    for xml in definitions(lab, vm.name):
        kept = parse_metadata(xml)
        assert kept.labels == LABELS
        assert kept.state == moved
        assert f'<other:keep xmlns:other="{OTHER_NS}">me</other:keep>' in xml

    failed = moved.model_copy(
        update={
            "last_failure": FailedMove(
                at=AT, source="kvm-03", target="kvm-02", plan_id="p", error='refused "x" <y>'
            )
        }
    )
    recorder.record("kvm-03", vm.name, failed)
    for xml in definitions(lab, vm.name):
        assert parse_metadata(xml).state == failed
        assert parse_metadata(xml).labels == LABELS


def test_an_inactive_domain_is_recorded_in_its_definition(lab: Lab, vm: LabVm) -> None:
    conn = conn_of(lab, "kvm-03")
    try:
        conn.lookupByName(vm.name).destroy()
    finally:
        conn.close()
    state = ReconcilerState(first_seen=AT)
    LibvirtRecorder(load_desired(lab.cluster_dir).cluster).record("kvm-03", vm.name, state)
    kept = parse_metadata(definitions(lab, vm.name)[1])
    assert kept.state == state
    assert kept.labels == LABELS


def test_a_domain_without_the_element_gets_one(lab: Lab, vm: LabVm) -> None:
    conn = conn_of(lab, "kvm-03")
    try:
        dom = conn.lookupByName(vm.name)
        for scope in (libvirt.VIR_DOMAIN_AFFECT_LIVE, libvirt.VIR_DOMAIN_AFFECT_CONFIG):
            dom.setMetadata(
                libvirt.VIR_DOMAIN_METADATA_ELEMENT, None, METADATA_KEY, METADATA_NS, scope
            )
    finally:
        conn.close()
    state = ReconcilerState(moves=1, last_moved_to="kvm-03")
    LibvirtRecorder(load_desired(lab.cluster_dir).cluster).record("kvm-03", vm.name, state)
    for xml in definitions(lab, vm.name):
        assert parse_metadata(xml).state == state
        assert parse_metadata(xml).labels == {}


def test_errors_are_the_projects_own(lab: Lab) -> None:
    cluster = load_desired(lab.cluster_dir).cluster
    recorder = LibvirtRecorder(cluster)
    with pytest.raises(TerminalError, match="not there"):
        recorder.record("kvm-03", "no-such-vm", ReconcilerState())
    with pytest.raises(ConfigError, match="kvm-99 is not in cluster"):
        recorder.record("kvm-99", "web-1", ReconcilerState())
    broken = cluster.model_copy(
        update={
            "spec": cluster.spec.model_copy(
                update={
                    "hosts": [
                        h.model_copy(update={"uri": "qemu+unix:///system?socket=/nonexistent"})
                        for h in cluster.spec.hosts
                    ]
                }
            )
        }
    )
    fast = ConnectionSettings(connect_timeout=3.0)
    with pytest.raises((HostUnreachable, HostTimeout), match="cannot connect"):
        LibvirtRecorder(broken, connection=fast).record("kvm-01", "web-1", ReconcilerState())
