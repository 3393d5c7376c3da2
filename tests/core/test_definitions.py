"""Domain definitions made fit for git: every secret libvirt XML may carry is removed, the rest
of the definition (and its metadata namespaces) is kept, and XML that cannot be read is not
recorded at all."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from hypothesis import given
from hypothesis import strategies as st

from reconciler.core.definitions import recorded_definition, redacted_definition
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


CONSTRUCTS = {
    "console passwords": "<devices><graphics type='spice' passwd='p'/></devices>",
    "disk authentication": "<devices><disk type='network'><source protocol='iscsi' name='t/1'>"
    "<auth username='u'/></source></disk></devices>",
    "secret references": "<devices><disk type='volume'><encryption format='luks'>"
    "<secret type='passphrase' uuid='0f'/></encryption></disk></devices>",
    "disk cookies": "<devices><disk type='network'><source protocol='https' name='/i'>"
    "<cookies><cookie name='c'>v</cookie></cookies></source></disk></devices>",
    "launch security data": "<launchSecurity type='sev'><policy>0x0033</policy></launchSecurity>",
    "QEMU command line passthrough": "<qemu:commandline xmlns:qemu="
    "'http://libvirt.org/schemas/domain/qemu/1.0'><qemu:arg value='-S'/></qemu:commandline>",
    "credentials in URLs": "<devices><filesystem><source dir='https://u:p@h/s'/></filesystem>"
    "</devices>",
    "credentials in host names": "<devices><disk type='network'><source protocol='https' "
    "name='/i'><host name='u:p@mirror'/></source></disk></devices>",
    "URL query strings": "<devices><disk type='network'><source protocol='https' name='/i' "
    "query='sig=abc'><host name='mirror'/></source></disk></devices>",
    "systemd credentials": "<sysinfo type='smbios'><oemStrings>"
    "<entry>io.systemd.credential:pw=x</entry></oemStrings></sysinfo>",
}
HEADER = "<!-- secrets removed before recording: none found -->\n"


def _domain(parts: list[str]) -> str:
    return f"<domain type='kvm'><name>vm</name><uuid>U-1</uuid>{''.join(parts)}</domain>"


@given(st.lists(st.sampled_from(sorted(CONSTRUCTS)), unique=True))
def test_a_recorded_definition_is_fit_to_start_exactly_when_nothing_was_removed(
    kinds: list[str],
) -> None:
    recorded = redacted_definition(_domain([CONSTRUCTS[k] for k in kinds]))
    assert recorded is not None
    back = recorded_definition(recorded, name="vm", uuid="u-1")
    if kinds:
        assert back.xml is None
        assert back.why.startswith("its definition in git lacks ")
        assert all(k in back.why for k in kinds)
    else:
        assert back.xml is not None
        assert redacted_definition(back.xml) == HEADER + back.xml  # nothing left to remove


@given(st.lists(st.sampled_from(sorted(CONSTRUCTS)), min_size=1, unique=True))
def test_a_stripped_construct_pushed_under_a_clean_header_is_refused(kinds: list[str]) -> None:
    back = recorded_definition(
        HEADER + _domain([CONSTRUCTS[k] for k in kinds]), name="vm", uuid="U-1"
    )
    assert back.xml is None
    assert all(k in back.why for k in kinds)
    assert "recording never keeps" in back.why


@given(
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1),
    st.sampled_from(["mirror.example", "10.0.0.7", "[fd00::7]"]),
)
def test_a_password_in_a_disks_host_name_never_survives(password: str, server: str) -> None:
    quoted = password.replace("&", "&amp;").replace("'", "&apos;").replace("<", "&lt;")
    xml = (
        "<domain><name>x</name><devices><disk type='network'>"
        f"<source protocol='https' name='/i.iso'><host name='admin:{quoted}@{server}'/>"
        "</source></disk></devices></domain>"
    )
    text = redacted_definition(xml)
    assert text is not None
    assert "credentials in host names" in text.splitlines()[0]
    host = ET.fromstring(text.split("\n", 1)[1]).find("devices/disk/source/host")
    assert host is not None
    assert host.get("name") == server


def test_what_is_started_is_what_was_checked() -> None:
    """An internal entity cannot hide a construct from the check: the XML returned is the
    parsed, re-serialized tree (entities expanded), not the pushed text."""
    text = HEADER + (
        "<!DOCTYPE domain [<!ENTITY e 'x'>]>"
        "<domain type='kvm'><name>vm</name><uuid>U-1</uuid><description>&e;</description>"
        "<!-- a comment --></domain>"
    )
    back = recorded_definition(text, name="vm", uuid="U-1")
    assert back.xml is not None
    assert "ENTITY" not in back.xml
    assert "<description>x</description>" in back.xml
    assert "comment" not in back.xml
