"""Migration classes of real domain XML: libvirt's own test inputs (tests/data/libvirt-domains)
and the classification rules on hand-written disks."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from reconciler.adapters.libvirt.domain_disks import (
    PoolInfo,
    PoolVolume,
    classify,
    disk_bytes,
    local_disk_blockers,
    needs_pools,
    resolve_disks,
)
from reconciler.adapters.libvirt.domain_xml import read_domain
from reconciler.model.snapshot import MigrationClass, UnmigratableReason, VmRunState

CORPUS = Path(__file__).parent.parent / "data" / "libvirt-domains"
RUNNING, SHUTOFF = VmRunState.RUNNING, VmRunState.SHUTOFF
EXPECTED = {
    "minimal.xml": MigrationClass.IMMOVABLE,  # a block device in no pool
    "disk-network-rbd.xml": MigrationClass.SHARED,
    "disk-network-iscsi.xml": MigrationClass.SHARED,
    "disk-nvme.xml": MigrationClass.IMMOVABLE,
    "hostdev-pci-address.xml": MigrationClass.IMMOVABLE,
    "hostdev-mdev-precreated.xml": MigrationClass.IMMOVABLE,
    "tpm-emulator.xml": MigrationClass.IMMOVABLE,
    "hugepages-default.xml": MigrationClass.SHARED,  # no disks: only memory moves
    "cpu-host-model-features.xml": MigrationClass.SHARED,
    "cpu-host-passthrough-features.xml": MigrationClass.IMMOVABLE,  # a block device in no pool
}
NEEDS = {  # name -> (CPU mode, CPU compared as written, hugepage KiB)
    "hugepages-default.xml": (None, False, 2048),
    "cpu-host-model-features.xml": ("host-model", False, None),  # no model named: the host's
    "cpu-host-passthrough-features.xml": ("host-passthrough", False, None),
    "minimal.xml": (None, False, None),
}


def _classify(
    xml: str, pools: dict[str, PoolInfo] | None, state: VmRunState = RUNNING
) -> tuple[MigrationClass, list[str], int]:
    reading = read_domain(xml)
    disks = resolve_disks(reading.disks, pools, ())
    blockers = [b for b in reading.blockers if b.code is not UnmigratableReason.LOCAL_DISK]
    klass, reasons = classify(state, [*blockers, *local_disk_blockers(disks)], disks)
    return klass, reasons, disk_bytes(disks)


def test_the_corpus_is_all_there() -> None:
    assert sorted(p.name for p in CORPUS.glob("*.xml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_corpus_domain_has_its_class_and_reasons(name: str) -> None:
    klass, reasons, _ = _classify((CORPUS / name).read_text(), {})
    assert klass is EXPECTED[name]
    assert reasons
    assert all(reasons)


def test_shut_off_corpus_domains_move_cold_unless_immovable() -> None:
    for name, expected in EXPECTED.items():
        klass, _, _ = _classify((CORPUS / name).read_text(), {}, SHUTOFF)
        assert klass is (MigrationClass.COLD if expected is MigrationClass.SHARED else expected)


def test_a_block_device_in_a_pool_is_copied_with_its_allocation() -> None:
    vol = PoolVolume("QEMUGuest1", "/dev/HostVG/QEMUGuest1", 10 << 30, 3 << 30)
    pools = {"HostVG": PoolInfo("HostVG", "logical", "/dev/HostVG", {vol.name: vol})}
    klass, reasons, copied = _classify((CORPUS / "minimal.xml").read_text(), pools)
    assert klass is MigrationClass.COPY
    assert copied == 3 << 30  # allocation, not capacity
    assert reasons == ["disk hda: /dev/HostVG/QEMUGuest1, 3072 MiB to copy"]


def _domain(disks: str, cpu: str = "") -> str:
    return f"<domain type='kvm'><name>v</name>{cpu}<devices>{disks}</devices></domain>"


VOLUME = (
    "<disk type='volume' device='disk'><source pool='{p}' volume='{v}'/><target dev='vda'/></disk>"
)
FILE = "<disk type='file' device='disk'><source file='{f}'/><target dev='vdb'/></disk>"
CDROM = "<disk type='file' device='cdrom'><target dev='hdc'/></disk>"


def _pools(kind: str = "dir", target: str = "/var/lib/libvirt/local") -> dict[str, PoolInfo]:
    vols = {
        "a.qcow2": PoolVolume("a.qcow2", f"{target}/a.qcow2", 8 << 30, 1 << 30),
        "b.img": PoolVolume("b.img", f"{target}/b.img", 64 << 20, 64 << 20),
    }
    return {"local": PoolInfo("local", kind, target, vols)}


def test_volume_and_file_disks_of_a_local_pool_are_copied() -> None:
    xml = _domain(
        VOLUME.format(p="local", v="a.qcow2")
        + FILE.format(f="/var/lib/libvirt/local/b.img")
        + CDROM
    )
    klass, reasons, copied = _classify(xml, _pools())
    assert klass is MigrationClass.COPY
    assert copied == (1 << 30) + (64 << 20)
    assert reasons == [
        "disk vda: local/a.qcow2, 1024 MiB to copy",
        "disk vdb: /var/lib/libvirt/local/b.img, 64 MiB to copy",
    ]
    klass, reasons, _ = _classify(xml, _pools(), SHUTOFF)
    assert klass is MigrationClass.COLD
    assert reasons[0] == "the VM is shut off"


def test_a_pool_of_a_network_type_or_under_shared_storage_is_shared() -> None:
    xml = _domain(VOLUME.format(p="local", v="a.qcow2"))
    assert _classify(xml, _pools("netfs"))[0] is MigrationClass.SHARED
    reading = read_domain(xml)
    disks = resolve_disks(reading.disks, _pools(target="/mnt/nfs/x"), ("/mnt/nfs",))
    assert [d.shared for d in disks] == [True]
    assert classify(RUNNING, [], disks)[0] is MigrationClass.SHARED


def test_a_file_outside_every_pool_or_an_unknown_volume_is_immovable() -> None:
    klass, reasons, _ = _classify(_domain(FILE.format(f="/srv/vm.img")), _pools())
    assert klass is MigrationClass.IMMOVABLE
    assert reasons == ["disk vdb (/srv/vm.img) is local and in no storage pool of this host"]
    klass, _, _ = _classify(_domain(VOLUME.format(p="local", v="gone.img")), _pools())
    assert klass is MigrationClass.IMMOVABLE


def test_pools_are_asked_only_when_a_disk_may_be_local() -> None:
    shared = read_domain(_domain(FILE.format(f="/mnt/nfs/vm.img") + CDROM)).disks
    assert not needs_pools(shared, ("/mnt/nfs",))
    assert needs_pools(shared, ())
    assert needs_pools(read_domain(_domain(VOLUME.format(p="x", v="y"))).disks, ("/mnt/nfs",))


def test_crashed_vm_is_immovable_and_vhost_user_too() -> None:
    assert _classify(_domain(""), {}, VmRunState.CRASHED)[0] is MigrationClass.IMMOVABLE
    vhost = (
        "<disk type='vhostuser' device='disk'><source type='unix' path='/s'/>"
        "<target dev='vda'/></disk>"
    )
    klass, reasons, _ = _classify(_domain(vhost), {})
    assert klass is MigrationClass.IMMOVABLE
    assert reasons == ["disk vda is a vhost-user disk"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_what_each_corpus_domain_asks_of_a_target(name: str) -> None:
    needs = read_domain((CORPUS / name).read_text()).needs
    assert needs is not None
    assert needs.arch in ("x86_64", "i686")
    assert needs.machine
    assert needs.memory > 0
    if name in NEEDS:
        mode, written, page = NEEDS[name]
        assert (needs.cpu_mode, needs.cpu_xml is not None, needs.hugepage_kib) == (
            mode,
            written,
            page,
        )


def test_every_corpus_file_parses_as_xml() -> None:
    for path in CORPUS.glob("*.xml"):
        assert ET.fromstring(path.read_text()).tag == "domain"
