"""Reading many domain XMLs in one parse gives what reading each alone gives, for any text."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import libvirt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.adapters.lab import write_node_files
from reconciler.adapters.libvirt.domain_metadata import METADATA_NS
from reconciler.adapters.libvirt.domain_xml import _parse_together, read_domain, read_domains
from reconciler.adapters.libvirt.observe_host import capabilities_host

_ENTITIES = {"\n": "&#10;", "\t": "&#9;", "\r": "&#13;"}


def attr(value: str) -> str:
    return quoteattr(value, _ENTITIES)


values = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=0x17F) | st.sampled_from("<>&'\"\n\t"),
    max_size=10,
)
names = st.from_regex(r"[a-z][a-z0-9-]{0,6}", fullmatch=True)
gaps = st.sampled_from(["", " ", "\n  ", "\n    <!-- note -->\n  "])


@st.composite
def placement(draw: st.DrawFn) -> str:
    """The reconciler's element under any prefix (or none), declared on it or around it."""
    prefix = draw(st.sampled_from(["placement:", "p:", "rec:", ""]))
    declare = (
        f" xmlns:{prefix[:-1]}={attr(METADATA_NS)}" if prefix else f" xmlns={attr(METADATA_NS)}"
    )
    labels = "".join(
        f"<{prefix}label name={attr(k)} value={attr(v)}/>"
        for k, v in draw(st.lists(st.tuples(names, values), max_size=3))
    )
    parts = [f"<{prefix}labels>{labels}</{prefix}labels>"]
    if draw(st.booleans()):
        moves = draw(st.sampled_from(["0", "3", "-1", "x"]))
        seen = draw(st.sampled_from(["2024-04-02T08:00:00+00:00", "2024-04-02", "soon"]))
        parts.append(
            f"<{prefix}state firstSeen={attr(seen)} moves={attr(moves)}"
            f" lastMovedFrom={attr(draw(names))}/>"
        )
    if draw(st.booleans()):
        parts.append(
            f"<{prefix}failure at='2024-05-02T01:00:00+00:00' from='a' to={attr(draw(names))}"
            f" error={attr(draw(values))}/>"
        )
    parts = draw(st.permutations(parts))
    return f"<{prefix}vm{declare}>{draw(gaps)}{''.join(parts)}</{prefix}vm>"


decoys = st.sampled_from(
    [
        "<other:vm xmlns:other='urn:other'><other:labels/></other:vm>",
        "<vm xmlns='urn:other'><labels><label name='a' value='b'/></labels></vm>",
        "<x xmlns='urn:y'><memory>5</memory><devices><disk type='file'/></devices></x>",
        "<libosinfo:libosinfo xmlns:libosinfo='http://libosinfo.org/xmlns/libvirt/domain/1.0'>"
        "<libosinfo:os id='http://debian.org/debian/12'/></libosinfo:libosinfo>",
    ]
)
devices = st.sampled_from(
    [
        "<disk type='file' device='disk'><source file='/var/lib/a.qcow2'/>"
        "<target dev='vda'/></disk>",
        "<disk type='file' device='disk'><source file='/mnt/shared/b.img'/>"
        "<target dev='vdb'/></disk>",
        "<disk type='network' device='disk'><source protocol='rbd' name='p/v'/>"
        "<target dev='vdc'/></disk>",
        "<disk type='file' device='cdrom'><target dev='sda'/><readonly/></disk>",
        "<disk type='block'><source dev='/dev/sdb'/><shareable/><target dev='vdd'/></disk>",
        "<hostdev mode='subsystem' type='pci'><source><address bus='0x03' slot='0x00'/>"
        "</source></hostdev>",
        "<hostdev mode='subsystem' type='mdev'><source><address uuid='c2177883'/></source>"
        "</hostdev>",
        "<interface type='network'><source network='default'/></interface>",
        "<interface type='hostdev'><source><address bus='0x04'/></source></interface>",
        "<tpm model='tpm-crb'><backend type='emulator'/></tpm>",
        "<shmem name='ivshmem0'/>",
        "<filesystem><driver type='virtiofs'/><target dir='share'/></filesystem>",
        "<memory model='dimm'><target><size unit='KiB'>524288</size></target></memory>",
        "<memballoon model='virtio'/>",
    ]
)
sizes = st.tuples(
    st.sampled_from(["1024", " 2048 ", "0", "-5", "abc", ""]),
    st.sampled_from([None, "KiB", "MiB", "GiB", "b", "KB", "odd"]),
)


def sized(name: str, text: str, unit: str | None) -> str:
    unit_attr = "" if unit is None else f" unit={attr(unit)}"
    return f"<{name}{unit_attr}>{escape(text)}</{name}>" if text else f"<{name}{unit_attr}/>"


@st.composite
def domains(draw: st.DrawFn) -> str:
    """A domain XML: libvirt's elements and some it does not write, in any order."""
    children = [f"<name>{escape(draw(values))}</name>", "<uuid>8f2c4f0e</uuid>"]
    if draw(st.booleans()):
        meta = [*draw(st.lists(decoys, max_size=2)), draw(placement())]
        children.append(f"<metadata>{''.join(draw(st.permutations(meta)))}</metadata>")
    children.append(sized("memory", *draw(sizes)))
    if draw(st.booleans()):
        children.append(sized("currentMemory", *draw(sizes)))
    current = draw(st.sampled_from(["", " current='1'", " current=''", " current='x'"]))
    children.append(
        f"<vcpu placement='static'{current}>{draw(st.sampled_from(['2', '', 'x']))}</vcpu>"
    )
    if draw(st.booleans()):
        mode = draw(st.sampled_from(["host-passthrough", "maximum", "host-model", "custom"]))
        children.append(f"<cpu mode={attr(mode)}><model>EPYC</model></cpu>")
    children.append("<numatune><memory mode='strict' nodeset='0'/></numatune>")
    children.append("<vcpus><vcpu id='0' enabled='yes'/></vcpus>")
    if draw(st.booleans()):
        children.append("<description><![CDATA[<memory>1</memory>]]></description>")
    if draw(st.booleans()):
        inner = "".join(draw(st.lists(devices, max_size=5)))
        children.append(f"<devices>{inner}</devices>")
    root = draw(st.sampled_from(["<domain type='kvm'>", "<domain type='test' id='3'>"]))
    gap = draw(gaps)
    body = gap.join(draw(st.permutations(children)))
    return f"{root}{gap}{body}{gap}</domain>"


ODD = [
    "",
    "  ",
    "<domain/><domain/>",
    "text<domain/>",
    "<domain/>tail",
    "<?xml version='1.0'?>\n<domain><memory>1</memory></domain>",
    "<!-- before --><domain><memory>1</memory></domain>\n",
    "<domain>",
    "</domain>",
    "<domain><a></domain>",
    "<reconciler-document><memory>7</memory></reconciler-document>",
    "</reconciler-document><reconciler-document>",
    "<domain><memory>2</memory></domain></reconciler-document><reconciler-document><domain/>",
    "<domain xmlns='urn:x'><memory>5</memory></domain>",
    "<domain>&undefined;</domain>",
    "<!DOCTYPE domain><domain/>",
    "<domain><metadata><p:vm/></metadata></domain>",
]
documents = st.one_of(domains(), st.sampled_from(ODD), st.none())


@given(st.lists(documents, max_size=6))
def test_read_together_is_read_alone(xmls: list[str | None]) -> None:
    alone = [read_domain(xml, shared_paths=["/mnt/shared"]) for xml in xmls]
    assert read_domains(xmls, shared_paths=["/mnt/shared"]) == alone


@given(st.lists(domains(), min_size=2, max_size=5))
def test_well_formed_domains_are_parsed_together(xmls: list[str]) -> None:
    roots = _parse_together(xmls)
    assert roots is not None
    assert [ET.tostring(r) for r in roots] == [ET.tostring(ET.fromstring(x)) for x in xmls]


@pytest.mark.parametrize("odd", [x for x in ODD if x.strip()])
def test_a_text_that_is_not_one_document_is_parsed_alone(odd: str) -> None:
    good = "<domain><memory>1</memory></domain>"
    if _parse_together([good, odd]) is not None:
        # what parses together must be what parses alone, one root per text
        assert [ET.tostring(r) for r in _parse_together([good, odd]) or []] == [
            ET.tostring(ET.fromstring(good)),
            ET.tostring(ET.fromstring(odd)),
        ]


@pytest.mark.libvirt
def test_domains_as_libvirt_writes_them_are_parsed_together(tmp_path: Path) -> None:
    cluster = write_node_files(tmp_path, 1, 12)
    libvirt.registerErrorHandler(lambda *_: None, None)
    conn = libvirt.open(cluster.spec.hosts[0].uri)
    try:
        xmls = [dom.XMLDesc(0) for dom in conn.listAllDomains(0)]
    finally:
        conn.close()
    assert _parse_together(xmls) is not None
    readings = read_domains(xmls)
    assert readings == [read_domain(xml) for xml in xmls]
    assert sorted(r.metadata.labels["app"] for r in readings) == sorted(
        f"app-{j % 5}" for j in range(12)
    )


HOST = "<host><uuid>h-1</uuid><cpu><arch>x86_64</arch><model>EPYC</model></cpu></host>"
GUEST = "<guest><os_type>hvm</os_type><arch name='x86_64'/></guest>"


@pytest.mark.parametrize(
    "caps",
    [
        f"<capabilities>\n\n  {HOST}\n  {GUEST}\n</capabilities>",
        f"<capabilities>{GUEST}{HOST}</capabilities>",
        f"<?xml version='1.0'?><capabilities>{HOST}</capabilities>",
        f"<capabilities><!-- </host> -->{HOST}</capabilities>",
        "<capabilities><host><cpu><arch>a</arch><!-- </host> --></cpu></host></capabilities>",
        "<capabilities><host><x><![CDATA[</host>]]></x><uuid>u</uuid></host></capabilities>",
        "<capabilities><host><host/><uuid>u</uuid></host></capabilities>",
        "<capabilities><host id='1'><uuid>u</uuid></host><host><uuid>v</uuid></host>"
        "</capabilities>",
        f"<capabilities xmlns='urn:x'>{HOST}</capabilities>",
        f"<capabilities>{GUEST}</capabilities>",
        "<capabilities><host/></capabilities>",
    ],
)
def test_the_host_of_capabilities_is_the_first_host_element(caps: str) -> None:
    expected = ET.fromstring(caps).find("host")
    got = capabilities_host(caps)
    if expected is None:
        assert got is None
        return
    assert got is not None
    assert ET.tostring(got).strip() == ET.tostring(expected).strip()
