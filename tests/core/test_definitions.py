"""Domain definitions made fit for git: every secret libvirt XML may carry is removed, the rest
of the definition (and its metadata namespaces) is kept, and XML that cannot be read is not
recorded at all."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from hypothesis import given
from hypothesis import strategies as st

from reconciler.core.definitions import redacted_definition
from tests.engine.test_recovery_audit import SECRETS, secret_xml

META = """<domain type='kvm'><name>web-1</name>
  <metadata><r:reconciler xmlns:r='https://example.org/reconciler'><r:label key='app'>web</r:label>
  </r:reconciler></metadata>
  <devices><graphics type='vnc' autoport='yes'/></devices></domain>"""


def test_every_kind_of_secret_is_removed_and_named() -> None:
    text = redacted_definition(secret_xml("db", "1234"))
    assert text is not None
    assert [s for s in SECRETS if s in text] == []
    first = text.splitlines()[0]
    for what in ("console passwords", "disk authentication", "secret references", "disk cookies"):
        assert what in first
    assert "QEMU command line passthrough" in first
    assert "credentials in URLs" in first
    root = ET.fromstring(text.split("\n", 1)[1])
    assert root.findtext("name") == "db"
    assert root.find("devices/interface") is not None
    shared = root.find("devices/filesystem/source")
    assert shared is not None
    assert shared.get("dir") == "https://files.example/share"


def test_a_definition_without_secrets_keeps_its_content_and_prefixes() -> None:
    text = redacted_definition(META)
    assert text is not None
    assert text.startswith("<!-- secrets removed before recording: none found -->")
    assert "r:label" in text
    assert 'xmlns:r="https://example.org/reconciler"' in text
    assert 'autoport="yes"' in text


@given(st.text(max_size=40))
def test_text_that_is_not_a_definition_is_never_recorded(junk: str) -> None:
    text = redacted_definition("<domain><name>" + junk.replace("<", "").replace("&", ""))
    assert text is None


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1))
def test_a_password_of_any_text_never_survives(password: str) -> None:
    quoted = password.replace("&", "&amp;").replace("'", "&apos;").replace("<", "&lt;")
    graphics = f"<graphics type='vnc' passwd='{quoted}'/>"
    xml = f"<domain><name>x</name><devices>{graphics}</devices></domain>"
    text = redacted_definition(xml)
    assert text is not None
    root = ET.fromstring(text.split("\n", 1)[1])
    assert all("passwd" not in e.attrib for e in root.iter())
