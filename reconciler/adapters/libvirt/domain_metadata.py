"""The reconciler's own record inside a libvirt domain: labels and move history.

It lives in the domain's ``<metadata>`` under one XML namespace, so other tools' metadata is
left alone and libvirt keeps it through live migration::

    <metadata>
      <placement:vm xmlns:placement="https://placement-reconciler.dev/xmlns/v1">
        <placement:labels>
          <placement:label name="app" value="web"/>
        </placement:labels>
        <placement:state firstSeen="2024-04-02T08:00:00+00:00" moves="3"
                         lastMovedAt="2024-05-01T22:10:03+00:00" lastMovedFrom="kvm-02"
                         lastMovedTo="kvm-01" lastPlan="sha256:..." lastReason="Balance"
                         backoff="1" unrecorded="true"/>
        <placement:failure at="2024-05-02T01:00:00+00:00" from="kvm-01" to="kvm-03"
                           plan="sha256:..." error="target host unreachable"/>
        <placement:intent startedAt="2024-05-03T02:00:00+00:00" from="kvm-01" to="kvm-02"
                          plan="sha256:..." reason="Balance"/>
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

from reconciler.model.snapshot import FailedMove, MoveIntent, ReconcilerState

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


_NO_STATE = ReconcilerState()
"""Shared by every VM without a state (frozen): one model less per VM, pickled once."""


def no_metadata() -> DomainMetadata:
    """What a domain without the reconciler's metadata has: no labels, no history."""
    return DomainMetadata(state=_NO_STATE)


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
        return no_metadata()
    labels: dict[str, str] = {}
    state = _NO_STATE
    failure: FailedMove | None = None
    intent: MoveIntent | None = None
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
        elif name == "failure":
            failure = _parse_failure(child)
        elif name == "intent":
            intent = _parse_intent(child)
    if failure is not None or intent is not None:
        state = state.model_copy(update={"last_failure": failure, "intent": intent})
    return DomainMetadata(labels=labels, state=state)


def _time(element: ET.Element, attribute: str) -> datetime | None:
    text = element.get(attribute)
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _count(element: ET.Element, attribute: str, high: int) -> int:
    """A count from 0 to ``high``; 0 when absent or malformed."""
    try:
        value = int(element.get(attribute, "0"))
    except ValueError:
        return 0
    return value if 0 <= value <= high else 0


def _parse_state(element: ET.Element) -> ReconcilerState:
    moves = _count(element, "moves", 2**62)
    return ReconcilerState(
        first_seen=_time(element, "firstSeen"),
        last_moved_at=_time(element, "lastMovedAt"),
        last_moved_from=element.get("lastMovedFrom") or None,
        last_moved_to=element.get("lastMovedTo") or None,
        last_plan_id=element.get("lastPlan") or None,
        last_moved_by=element.get("lastMovedBy") or None,
        moves=moves,
        last_reason=element.get("lastReason") or None,
        backoff=_count(element, "backoff", 64),
        unrecorded=element.get("unrecorded") == "true",
    )


def _parse_failure(element: ET.Element) -> FailedMove | None:
    at = _time(element, "at")
    source, target = element.get("from"), element.get("to")
    if at is None or not source or not target:
        return None
    return FailedMove(
        at=at,
        source=source,
        target=target,
        plan_id=element.get("plan") or None,
        error=element.get("error", ""),
    )


def _parse_intent(element: ET.Element) -> MoveIntent | None:
    at = _time(element, "startedAt")
    source, target = element.get("from"), element.get("to")
    if at is None or not source or not target:
        return None
    return MoveIntent(
        started_at=at,
        source=source,
        target=target,
        plan_id=element.get("plan") or None,
        reason=element.get("reason") or None,
        actor=element.get("actor") or None,
    )


def parse_metadata(xml: str) -> DomainMetadata:
    """The metadata from a domain XML or from the ``<placement:vm>`` element alone.

    Text that is not XML gives empty metadata.
    """
    try:
        element = ET.fromstring(xml)
    except ET.ParseError:
        return no_metadata()
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
    bare = {"last_failure": None, "intent": None}
    if state is not None and state.model_copy(update=bare) != ReconcilerState():
        attrs = []
        if state.first_seen is not None:
            attrs.append(f'firstSeen="{state.first_seen.isoformat()}"')
        attrs.append(f'moves="{state.moves}"')
        if state.last_moved_at is not None:
            attrs.append(f'lastMovedAt="{state.last_moved_at.isoformat()}"')
        optional: tuple[tuple[str, str | None], ...] = (
            ("lastMovedFrom", state.last_moved_from),
            ("lastMovedTo", state.last_moved_to),
            ("lastPlan", state.last_plan_id),
            ("lastReason", state.last_reason),
            ("lastMovedBy", state.last_moved_by),
        )
        for attribute, text in optional:
            if text is not None:
                attrs.append(f'{attribute}="{_attr(text)}"')
        if state.backoff:
            attrs.append(f'backoff="{state.backoff}"')
        if state.unrecorded:
            attrs.append('unrecorded="true"')
        lines.append(f"  <{p}state {' '.join(attrs)}/>")
    if state is not None and state.last_failure is not None:
        f = state.last_failure
        attrs = [
            f'at="{f.at.isoformat()}"',
            f'from="{_attr(f.source)}"',
            f'to="{_attr(f.target)}"',
        ]
        if f.plan_id is not None:
            attrs.append(f'plan="{_attr(f.plan_id)}"')
        attrs.append(f'error="{_attr(f.error)}"')
        lines.append(f"  <{p}failure {' '.join(attrs)}/>")
    if state is not None and state.intent is not None:
        i = state.intent
        attrs = [
            f'startedAt="{i.started_at.isoformat()}"',
            f'from="{_attr(i.source)}"',
            f'to="{_attr(i.target)}"',
        ]
        if i.plan_id is not None:
            attrs.append(f'plan="{_attr(i.plan_id)}"')
        if i.reason is not None:
            attrs.append(f'reason="{_attr(i.reason)}"')
        if i.actor is not None:
            attrs.append(f'actor="{_attr(i.actor)}"')
        lines.append(f"  <{p}intent {' '.join(attrs)}/>")
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
