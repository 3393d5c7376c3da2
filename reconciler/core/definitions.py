"""Domain definitions fit for git: the secrets a libvirt domain XML may carry, removed.

What the reconciler keeps of a VM to restart it elsewhere is its inactive domain XML. In the
state directory it is kept whole (readable by the reconciler's user only); what goes to the
state repository is :func:`redacted_definition` of it, which removes:

- ``passwd`` attributes (VNC and SPICE console passwords, on ``<graphics>`` or anywhere);
- ``<auth>`` (the user and secret reference of iSCSI, RBD and other network disks);
- ``<secret>`` (disk encryption and any other secret reference, with its usage);
- ``<cookies>`` (HTTP(S) disk cookies) and ``<launchSecurity>`` (SEV session data);
- ``<qemu:commandline>`` (arbitrary QEMU arguments, which may spell out a secret);
- the user info of URLs in attributes and text (``https://user:pw@...``), and a leading
  ``user:password@`` in any attribute;
- the user info of a network disk's ``<host name='user:pw@server'>`` (QEMU builds the URL of
  an HTTP(S) or FTP disk from it, so it works, and is a credential);
- the ``query`` of a ``<source>`` (an HTTP(S) disk's query string: signed URLs and tokens);
- systemd credentials passed to the guest (SMBIOS OEM strings ``io.systemd.credential:...``
  and fw_cfg entries ``opt/io.systemd.credentials/...``).

A comment at the top names what was removed. A definition that is not well-formed XML is not
recorded at all (None): what it holds cannot be checked.

Read back (:func:`recorded_definition`, to restart a VM this instance never saw), a recorded
definition is used only when nothing was removed from it and redacting it again removes
nothing: whoever can push to the branch cannot slip in what recording would strip.
"""

from __future__ import annotations

import contextlib
import io
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Final

_QEMU_NS: Final = "http://libvirt.org/schemas/domain/qemu/1.0"
_DROPPED_ELEMENTS: Final = {
    "auth": "disk authentication",
    "secret": "secret references",
    "cookies": "disk cookies",
    "launchSecurity": "launch security data",
    f"{{{_QEMU_NS}}}commandline": "QEMU command line passthrough",
}
_SECRET_ATTRIBUTES: Final = {"passwd": "console passwords"}
_ELEMENT_ATTRIBUTES: Final = {("source", "query"): "URL query strings"}
"""Attributes secret on one element only: (element, attribute) -> what they are."""
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s]*@")  # to the last @
_BARE_USERINFO = re.compile(r"^[^/@\s:]+:[^/\s]*@")
"""``user:password@`` at the start of a value, without a scheme (to the last @)."""
_SYSTEMD_CREDENTIAL = re.compile(
    r"^\s*(io\.systemd\.credential(\.binary)?:|opt/io\.systemd\.credentials/)"
)


HEADER: Final = "<!-- secrets removed before recording: {note} -->\n"
_HEADER = re.compile(r"<!-- secrets removed before recording: (?P<note>[^>]*) -->\n")
_NOTHING: Final = "none found"


def redacted_definition(xml: str) -> str | None:
    """``xml`` with every secret it may carry removed; None when it is not well-formed."""
    done = _redacted(xml)
    if done is None:
        return None
    text, removed = done
    return HEADER.format(note=", ".join(removed) if removed else _NOTHING) + text


def _redacted(xml: str) -> tuple[str, list[str]] | None:
    """The redacted text (no header) and what was removed, sorted; None: not well-formed."""
    try:
        namespaces = [ns for _, ns in ET.iterparse(io.StringIO(xml), events=("start-ns",))]
        root = ET.fromstring(xml)
    except ET.ParseError:
        return None
    removed: set[str] = set()
    for parent in root.iter():
        for child in list(parent):
            what = _DROPPED_ELEMENTS.get(str(child.tag))
            if what is None and _is_systemd_credential(parent, child):
                what = "systemd credentials"
            if what is not None:
                parent.remove(child)
                removed.add(what)
    for element in root.iter():
        _redact_attributes(element, removed)
        for part in ("text", "tail"):
            value = getattr(element, part)
            if value and (cleaned := _URL_USERINFO.sub(r"\g<scheme>", value)) != value:
                setattr(element, part, cleaned)
                removed.add("credentials in URLs")
    for prefix, uri in namespaces:  # keep the document's prefixes (the registry is global,
        with contextlib.suppress(ValueError):  # but a prefix only ever maps to its own URI)
            ET.register_namespace(prefix, uri)
    return ET.tostring(root, encoding="unicode") + "\n", sorted(removed)


def _is_systemd_credential(parent: ET.Element, child: ET.Element) -> bool:
    """An SMBIOS OEM string or fw_cfg entry that hands the guest a systemd credential."""
    if child.tag != "entry" or parent.tag not in ("oemStrings", "sysinfo"):
        return False
    return any(
        _SYSTEMD_CREDENTIAL.match(value) for value in (child.text or "", child.get("name", ""))
    )


def _redact_attributes(element: ET.Element, removed: set[str]) -> None:
    for name in list(element.attrib):
        what = _SECRET_ATTRIBUTES.get(name) or _ELEMENT_ATTRIBUTES.get((str(element.tag), name))
        if what is not None:
            del element.attrib[name]
            removed.add(what)
            continue
        value = element.attrib[name]
        if element.tag == "host" and name == "name" and "@" in value:
            element.attrib[name] = value.rpartition("@")[2]
            removed.add("credentials in host names")
            continue
        cleaned = _BARE_USERINFO.sub("", _URL_USERINFO.sub(r"\g<scheme>", value))
        if cleaned != value:
            element.attrib[name] = cleaned
            removed.add("credentials in URLs")


@dataclass(frozen=True)
class Recorded:
    """A definition read back from git: the XML to define, or why it may not be used."""

    xml: str | None
    why: str = ""


def recorded_definition(text: str, *, name: str, uuid: str) -> Recorded:
    """The definition of VM ``name`` (``uuid``) in ``text``, as recorded in git, fit to start;
    or why not. Fit means: its header says nothing was removed, redacting it again would
    remove nothing (a construct recording strips, pushed by hand, is refused), and it is the
    domain of that name and UUID. What is returned is the re-redacted text: exactly what was
    checked (entities expanded, comments dropped)."""
    header = _HEADER.match(text)
    if header is None:
        return Recorded(
            None,
            "its definition in git has no recording header (not written by "
            "the reconciler); start it by hand",
        )
    note = header["note"]
    if note != _NOTHING:
        return Recorded(None, f"its definition in git lacks {note}; start it by hand")
    done = _redacted(text[header.end() :])
    if done is None:
        return Recorded(None, "its definition in git is not well-formed XML; start it by hand")
    xml, removed = done
    if removed:
        return Recorded(
            None,
            f"its definition in git holds {', '.join(removed)}, which recording never keeps "
            "(edited by hand?); start it by hand",
        )
    root = ET.fromstring(xml)
    got_name = (root.findtext("name") or "").strip()
    got_uuid = (root.findtext("uuid") or "").strip()
    if root.tag != "domain" or got_name != name or got_uuid.lower() != uuid.lower():
        return Recorded(
            None,
            f"its definition in git is of {got_name or '?'} ({got_uuid or 'no UUID'}), not of "
            f"{name} ({uuid}); start it by hand",
        )
    return Recorded(xml)
