"""Migratability verdicts read from real domain XML, each accepted by libvirt's test driver."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator

import libvirt
import pytest

from reconciler.adapters.libvirt.domain_xml import (
    domain_facts,
    migration_blockers,
    migration_blockers_from_xml,
)
from reconciler.model.snapshot import UnmigratableReason

pytestmark = pytest.mark.libvirt


def domain(devices: str, *, extra: str = "", name: str = "vm") -> str:
    return f"""<domain type='test'>
  <name>{name}</name>
  <memory unit='MiB'>256</memory>
  <currentMemory unit='MiB'>128</currentMemory>
  <vcpu current='1'>2</vcpu>
  <os><type arch='x86_64'>hvm</type></os>
  {extra}
  <devices>
    {devices}
    <memballoon model='virtio'/>
  </devices>
</domain>"""


LOCAL_FILE = """<disk type='file' device='disk'>
  <driver name='qemu' type='qcow2'/>
  <source file='/var/lib/libvirt/images/vm.qcow2'/>
  <target dev='vda' bus='virtio'/>
</disk>"""
LOCAL_BLOCK = """<disk type='block' device='disk'>
  <source dev='/dev/vg0/vm'/>
  <target dev='vdb' bus='virtio'/>
</disk>"""
SHARED_NFS = """<disk type='file' device='disk'>
  <source file='/mnt/shared/vm.qcow2'/>
  <target dev='vda' bus='virtio'/>
</disk>"""
SHAREABLE = """<disk type='block' device='disk'>
  <source dev='/dev/mapper/mpatha'/>
  <target dev='vdc' bus='virtio'/>
  <shareable/>
</disk>"""
RBD = """<disk type='network' device='disk'>
  <source protocol='rbd' name='pool/vm'>
    <host name='10.0.0.1' port='6789'/>
  </source>
  <target dev='vda' bus='virtio'/>
</disk>"""
ISCSI = """<disk type='network' device='disk'>
  <source protocol='iscsi' name='iqn.2024-01.example:storage/1'>
    <host name='10.0.0.2' port='3260'/>
  </source>
  <target dev='vdb' bus='virtio'/>
</disk>"""
EMPTY_CDROM = """<disk type='file' device='cdrom'>
  <target dev='sda' bus='sata'/>
  <readonly/>
</disk>"""
PCI_HOSTDEV = """<hostdev mode='subsystem' type='pci' managed='yes'>
  <source><address domain='0x0000' bus='0x03' slot='0x00' function='0x0'/></source>
</hostdev>"""
USB_HOSTDEV = """<hostdev mode='subsystem' type='usb'>
  <source><vendor id='0x1234'/><product id='0xbeef'/></source>
</hostdev>"""
SCSI_HOSTDEV = """<hostdev mode='subsystem' type='scsi'>
  <source>
    <adapter name='scsi_host0'/>
    <address bus='0' target='0' unit='0'/>
  </source>
</hostdev>"""
MDEV = """<hostdev mode='subsystem' type='mdev' model='vfio-pci'>
  <source><address uuid='c2177883-f1bb-47f0-914d-32a22e3a8804'/></source>
</hostdev>"""
SRIOV = """<interface type='hostdev' managed='yes'>
  <source><address type='pci' domain='0x0000' bus='0x04' slot='0x10' function='0x1'/></source>
</interface>"""
TPM = """<tpm model='tpm-crb'><backend type='emulator' version='2.0'/></tpm>"""
SHMEM = """<shmem name='ivshmem0'><model type='ivshmem-plain'/><size unit='M'>4</size></shmem>"""
PASSTHROUGH = "<cpu mode='host-passthrough'/>"


@pytest.fixture(scope="module")
def test_conn() -> Iterator[libvirt.virConnect]:
    libvirt.registerErrorHandler(lambda *_: None, None)
    conn = libvirt.open("test:///default")
    yield conn
    conn.close()


def codes(xml: str, **kwargs: object) -> list[UnmigratableReason]:
    return [b.code for b in migration_blockers_from_xml(xml, **kwargs)]  # type: ignore[arg-type]


CASES = [
    ("local file disk", domain(LOCAL_FILE), [UnmigratableReason.LOCAL_DISK]),
    ("local block disk", domain(LOCAL_BLOCK), [UnmigratableReason.LOCAL_DISK]),
    ("rbd disk", domain(RBD), []),
    ("iscsi disk", domain(ISCSI), []),
    ("empty cdrom", domain(EMPTY_CDROM), []),
    ("shareable disk", domain(SHAREABLE), []),
    ("pci hostdev", domain(PCI_HOSTDEV), [UnmigratableReason.HOST_DEVICE]),
    ("usb hostdev", domain(USB_HOSTDEV), [UnmigratableReason.HOST_DEVICE]),
    ("scsi hostdev", domain(SCSI_HOSTDEV), [UnmigratableReason.HOST_DEVICE]),
    ("mdev", domain(MDEV), [UnmigratableReason.MEDIATED_DEVICE]),
    ("sr-iov interface", domain(SRIOV), [UnmigratableReason.HOST_DEVICE]),
    ("vtpm", domain(TPM), [UnmigratableReason.VTPM]),
    ("ivshmem", domain(SHMEM), [UnmigratableReason.SHARED_MEMORY]),
    (
        "everything",
        domain(LOCAL_FILE + PCI_HOSTDEV + TPM),
        [UnmigratableReason.LOCAL_DISK, UnmigratableReason.HOST_DEVICE, UnmigratableReason.VTPM],
    ),
    ("nothing", domain(""), []),
]


@pytest.mark.parametrize(("xml", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_blockers(xml: str, expected: list[UnmigratableReason]) -> None:
    assert codes(xml) == expected


@pytest.mark.parametrize("xml", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_case_is_a_domain_libvirt_accepts(test_conn: libvirt.virConnect, xml: str) -> None:
    dom = test_conn.defineXML(xml)
    try:
        again = dom.XMLDesc(0)
        # what libvirt gives back yields the same verdict as what was written
        assert codes(again) == codes(xml)
    finally:
        dom.undefine()


def test_shared_path_prefix_makes_a_file_disk_fine() -> None:
    xml = domain(SHARED_NFS + LOCAL_FILE)
    assert codes(xml) == [UnmigratableReason.LOCAL_DISK, UnmigratableReason.LOCAL_DISK]
    assert codes(xml, shared_paths=["/mnt/shared"]) == [UnmigratableReason.LOCAL_DISK]
    assert codes(xml, shared_paths=["/mnt/shared/", "/var/lib/libvirt/images"]) == []
    # a prefix is a folder, not a string prefix
    assert codes(domain(SHARED_NFS), shared_paths=["/mnt/share"]) == [UnmigratableReason.LOCAL_DISK]


def test_blocker_details_name_the_cause() -> None:
    blockers = migration_blockers_from_xml(domain(LOCAL_FILE + PCI_HOSTDEV + MDEV))
    details = " | ".join(b.detail for b in blockers)
    assert "/var/lib/libvirt/images/vm.qcow2" in details
    assert "bus=0x03" in details
    assert "c2177883-f1bb-47f0-914d-32a22e3a8804" in details


def test_host_passthrough_only_blocks_on_mixed_cpu_models() -> None:
    xml = domain("", extra=PASSTHROUGH)
    assert codes(xml) == []
    assert codes(xml, cpu_models_differ=True) == [UnmigratableReason.HOST_PASSTHROUGH_CPU]
    assert codes(domain("", extra="<cpu mode='host-model'/>"), cpu_models_differ=True) == []


def test_host_passthrough_domain_is_accepted(test_conn: libvirt.virConnect) -> None:
    dom = test_conn.defineXML(domain("", extra=PASSTHROUGH, name="pt"))
    try:
        assert codes(dom.XMLDesc(0), cpu_models_differ=True) == [
            UnmigratableReason.HOST_PASSTHROUGH_CPU
        ]
    finally:
        dom.undefine()


def test_unreadable_xml_is_other() -> None:
    assert codes("<domain><devices>") == [UnmigratableReason.OTHER]


def test_domain_facts() -> None:
    facts = domain_facts(ET.fromstring(domain("")))
    assert (facts.vcpus, facts.memory_max, facts.memory_current) == (1, 256 << 20, 128 << 20)
    bare = domain_facts(ET.fromstring("<domain><memory>1024</memory></domain>"))
    assert (bare.vcpus, bare.memory_max, bare.memory_current) == (0, 1 << 20, 1 << 20)


def test_blockers_of_a_parsed_element() -> None:
    assert [b.code for b in migration_blockers(ET.fromstring(domain(TPM)))] == [
        UnmigratableReason.VTPM
    ]
