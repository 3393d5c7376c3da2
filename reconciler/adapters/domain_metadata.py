"""The reconciler's own record inside a libvirt domain: labels and move history.

It lives in the domain's ``<metadata>`` under one XML namespace, so other tools' metadata is
left alone and libvirt keeps it through live migration::

    <metadata>
      <placement:vm xmlns:placement="https://placement-reconciler.dev/xmlns/v1">
        <placement:labels>
          <placement:label name="app" value="web"/>
        </placement:labels>
        <placement:state lastMovedAt="2024-05-01T22:10:03+00:00" lastMovedFrom="kvm-02"
                         moves="3"/>
      </placement:vm>
    </metadata>

``render_metadata`` writes the ``<placement:vm>`` element (inline in a domain definition, or
for ``virDomainSetMetadata`` with ``METADATA_KEY`` and ``METADATA_NS``); ``parse_metadata``
reads it back from a whole domain XML, from that element, or from what
``virDomainGetMetadata`` returns. Pure functions, no libvirt.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from reconciler.model.snapshot import ReconcilerState

METADATA_NS: Final = "https://placement-reconciler.dev/xmlns/v1"
"""XML namespace URI of the reconciler's domain metadata."""
METADATA_KEY: Final = "placement"
"""Prefix (libvirt's metadata key) of that namespace."""

_ROOT = f"{{{METADATA_NS}}}vm"


@dataclass(frozen=True)
class DomainMetadata:
    """What the reconciler keeps on one domain."""

    labels: dict[str, str] = field(default_factory=dict)
    state: ReconcilerState = field(default_factory=ReconcilerState)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _find_root(element: ET.Element) -> ET.Element | None:
    """The ``<placement:vm>`` element: ``element`` itself, or below a domain's metadata."""
    if element.tag in (_ROOT, "vm"):  # "vm": as virDomainGetMetadata returns it
        return element
    metadata = element if _local(element.tag) == "metadata" else element.find("metadata")
    if metadata is None:
        return None
    return metadata.find(_ROOT)


def parse_metadata_element(element: ET.Element) -> DomainMetadata:
    """The metadata from a parsed ``<domain>``, ``<metadata>`` or ``<placement:vm>`` element.

    Missing parts give defaults; malformed values (a bad date, a negative count) are ignored
    rather than failing the whole observation.
    """
    root = _find_root(element)
    if root is None:
        return DomainMetadata()
    labels: dict[str, str] = {}
    state = ReconcilerState()
    for child in root:
        name = _local(child.tag)
        if name == "labels":
            for label in child:
                if _local(label.tag) != "label":
                    continue
                key = label.get("name")
                if key:
                    labels[key] = label.get("value", "")
        elif name == "state":
            state = _parse_state(child)
    return DomainMetadata(labels=labels, state=state)


def _parse_state(element: ET.Element) -> ReconcilerState:
    moved_at: datetime | None = None
    text = element.get("lastMovedAt")
    if text:
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            moved_at = parsed
    moves = 0
    try:
        moves = max(0, int(element.get("moves", "0")))
    except ValueError:
        moves = 0
    return ReconcilerState(
        last_moved_at=moved_at,
        last_moved_from=element.get("lastMovedFrom") or None,
        moves=moves,
    )


def parse_metadata(xml: str) -> DomainMetadata:
    """The metadata from a domain XML or from the ``<placement:vm>`` element alone.

    Text that is not XML gives empty metadata.
    """
    try:
        element = ET.fromstring(xml)
    except ET.ParseError:
        return DomainMetadata()
    return parse_metadata_element(element)


def render_metadata(
    labels: dict[str, str] | None = None,
    state: ReconcilerState | None = None,
    *,
    for_set_metadata: bool = False,
) -> str:
    """The ``<placement:vm>`` element for these labels and this state, as XML text.

    With ``for_set_metadata`` the element is written without a namespace, as
    ``virDomainSetMetadata(ELEMENT, xml, METADATA_KEY, METADATA_NS)`` wants it (libvirt puts
    it into the namespace itself and refuses an element that declares it already).
    """
    p = "" if for_set_metadata else f"{METADATA_KEY}:"
    declare = "" if for_set_metadata else f' xmlns:{METADATA_KEY}="{METADATA_NS}"'
    lines = [f"<{p}vm{declare}>"]
    if labels:
        lines.append(f"  <{p}labels>")
        for key, value in sorted(labels.items()):
            lines.append(f'    <{p}label name="{_attr(key)}" value="{_attr(value)}"/>')
        lines.append(f"  </{p}labels>")
    if state is not None and state != ReconcilerState():
        attrs = []
        if state.last_moved_at is not None:
            attrs.append(f'lastMovedAt="{state.last_moved_at.isoformat()}"')
        if state.last_moved_from is not None:
            attrs.append(f'lastMovedFrom="{_attr(state.last_moved_from)}"')
        attrs.append(f'moves="{state.moves}"')
        lines.append(f"  <{p}state {' '.join(attrs)}/>")
    lines.append(f"</{p}vm>")
    return "\n".join(lines)


def _attr(value: str) -> str:
    return (
        value.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("\n", "&#10;")
    )
