"""Domain definitions fit for git: the secrets a libvirt domain XML may carry, removed.

What the reconciler keeps of a VM to restart it elsewhere is its inactive domain XML. In the
state directory it is kept whole (readable by the reconciler's user only); what goes to the
state repository is :func:`redacted_definition` of it, which removes:

- ``passwd`` attributes (VNC and SPICE console passwords, on ``<graphics>`` or anywhere);
- ``<auth>`` (the user and secret reference of iSCSI, RBD and other network disks);
- ``<secret>`` (disk encryption and any other secret reference, with its usage);
- ``<cookies>`` (HTTP(S) disk cookies) and ``<launchSecurity>`` (SEV session data);
- ``<qemu:commandline>`` (arbitrary QEMU arguments, which may spell out a secret);
- the user info of URLs in attributes (``https://user:pw@...``).

A comment at the top names what was removed. A definition that is not well-formed XML is not
recorded at all (None): what it holds cannot be checked.
"""

from __future__ import annotations

import contextlib
import io
import re
import xml.etree.ElementTree as ET
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
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s]*@")  # to the last @


def redacted_definition(xml: str) -> str | None:
    """``xml`` with every secret it may carry removed; None when it is not well-formed."""
    try:
        namespaces = [ns for _, ns in ET.iterparse(io.StringIO(xml), events=("start-ns",))]
        root = ET.fromstring(xml)
    except ET.ParseError:
        return None
    removed: set[str] = set()
    for parent in root.iter():
        for child in list(parent):
            what = _DROPPED_ELEMENTS.get(str(child.tag))
            if what is not None:
                parent.remove(child)
                removed.add(what)
    for element in root.iter():
        for name in list(element.attrib):
            what = _SECRET_ATTRIBUTES.get(name)
            if what is not None:
                del element.attrib[name]
                removed.add(what)
                continue
            value = element.attrib[name]
            cleaned = _URL_USERINFO.sub(r"\g<scheme>", value)
            if cleaned != value:
                element.attrib[name] = cleaned
                removed.add("credentials in URLs")
    for prefix, uri in namespaces:  # keep the document's prefixes (the registry is global,
        with contextlib.suppress(ValueError):  # but a prefix only ever maps to its own URI)
            ET.register_namespace(prefix, uri)
    text = ET.tostring(root, encoding="unicode")
    note = ", ".join(sorted(removed)) if removed else "none found"
    return f"<!-- secrets removed before recording: {note} -->\n{text}\n"
