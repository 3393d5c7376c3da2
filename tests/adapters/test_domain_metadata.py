"""The reconciler's domain metadata: render, parse, and what libvirt keeps of it."""

from __future__ import annotations

from datetime import UTC, datetime

import libvirt
import pytest

from reconciler.adapters.libvirt.domain_metadata import (
    METADATA_KEY,
    METADATA_NS,
    DomainMetadata,
    parse_metadata,
    render_metadata,
)
from reconciler.model.snapshot import MoveIntent, ReconcilerState

STATE = ReconcilerState(
    last_moved_at=datetime(2024, 5, 1, 22, 10, 3, tzinfo=UTC),
    last_moved_from="kvm-02",
    last_moved_by="apply@ops-laptop",
    moves=3,
    last_reason="Balance",
    backoff=2,
    intent=MoveIntent(
        source="kvm-01",
        target="kvm-02",
        started_at=datetime(2024, 5, 3, 2, tzinfo=UTC),
        reason="Balance",
        actor="run@kvm-admin-1",
    ),
)
LABELS = {"app": "web", "tier": 'front & "edge" <1>'}


def test_round_trip() -> None:
    xml = render_metadata(LABELS, STATE)
    assert parse_metadata(xml) == DomainMetadata(labels=LABELS, state=STATE)


def test_round_trip_of_nothing() -> None:
    assert parse_metadata(render_metadata()) == DomainMetadata()


def test_render_uses_the_project_namespace() -> None:
    xml = render_metadata({"app": "web"})
    assert xml.startswith(f'<{METADATA_KEY}:vm xmlns:{METADATA_KEY}="{METADATA_NS}">')
    assert METADATA_NS == "https://placement-reconciler.dev/xmlns/v1"


def test_parse_from_a_whole_domain_ignores_other_namespaces() -> None:
    xml = f"""<domain type='kvm'><name>a</name><metadata>
      <other:vm xmlns:other="https://example.org/other"><labels><label name="x" value="y"/>
      </labels></other:vm>
      {render_metadata({"app": "db"}, STATE)}
    </metadata></domain>"""
    assert parse_metadata(xml) == DomainMetadata(labels={"app": "db"}, state=STATE)


@pytest.mark.parametrize(
    "xml",
    [
        "not xml",
        "<domain><name>a</name></domain>",
        f'<p:vm xmlns:p="{METADATA_NS}"><p:state lastMovedAt="yesterday" moves="-2"/></p:vm>',
        f'<p:vm xmlns:p="{METADATA_NS}"><p:state lastMovedAt="2024-01-01T00:00:00" '
        'moves="many"/></p:vm>',
    ],
)
def test_bad_or_missing_metadata_gives_defaults(xml: str) -> None:
    assert parse_metadata(xml) == DomainMetadata()


@pytest.mark.libvirt
def test_libvirt_keeps_it_through_set_metadata() -> None:
    libvirt.registerErrorHandler(lambda *_: None, None)
    conn = libvirt.open("test:///default")
    try:
        dom = conn.lookupByName("test")
        dom.setMetadata(
            libvirt.VIR_DOMAIN_METADATA_ELEMENT,
            render_metadata(LABELS, STATE, for_set_metadata=True),
            METADATA_KEY,
            METADATA_NS,
            libvirt.VIR_DOMAIN_AFFECT_CURRENT,
        )
        assert parse_metadata(dom.XMLDesc(0)) == DomainMetadata(labels=LABELS, state=STATE)
        element = dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, METADATA_NS, 0)
        assert parse_metadata(element) == DomainMetadata(labels=LABELS, state=STATE)
    finally:
        conn.close()


def test_a_malformed_backoff_reads_as_none() -> None:
    for bad in ("-1", "65", "two"):
        xml = render_metadata({}, STATE).replace('backoff="2"', f'backoff="{bad}"')
        assert parse_metadata(xml).state.backoff == 0


def test_a_move_not_yet_recorded_keeps_its_mark_through_the_domain_xml() -> None:
    from datetime import UTC, datetime

    from reconciler.adapters.libvirt.domain_metadata import parse_metadata, render_metadata
    from reconciler.model.snapshot import ReconcilerState

    state = ReconcilerState(
        last_moved_at=datetime(2026, 1, 1, tzinfo=UTC),
        last_moved_from="kvm-01",
        last_moved_to="kvm-02",
        moves=1,
        unrecorded=True,
    )
    xml = render_metadata({}, state)
    assert 'unrecorded="true"' in xml
    assert parse_metadata(xml).state == state
    cleared = state.model_copy(update={"unrecorded": False})
    assert "unrecorded" not in render_metadata({}, cleared)
    assert parse_metadata(render_metadata({}, cleared)).state == cleared
