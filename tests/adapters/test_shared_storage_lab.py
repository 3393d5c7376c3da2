"""A VM whose disk is a file under a path the Cluster declares shared (``spec.sharedStorage``),
on the lab: observed as class ``shared``, and moved live, because the migrator carries the
declaration to libvirt (``VIR_MIGRATE_UNSAFE``, as ``virsh migrate --unsafe``). The lab's
folders are on a local file system, which libvirt never takes for shared storage: without the
declaration libvirt refuses the same move and the VM stays where it was. Judged from libvirt."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters import lab as libvirt_lab
from reconciler.adapters.lab import Lab, LabVm
from reconciler.adapters.libvirt.cluster_observer import LibvirtClusterObserver
from reconciler.adapters.libvirt.migrator import LibvirtMigrator
from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.config import load_desired
from reconciler.model.desired import DesiredState
from reconciler.model.snapshot import MigrationClass
from tests.adapters.test_libvirt_migrator import (
    LABELS,
    assert_runs_once_on,
    conn_of,
    migrate,
    move,
    remove_vm,
    tuned,
)

pytestmark = pytest.mark.lab

_names = itertools.count(1)


def declared(desired: DesiredState, *paths: str) -> DesiredState:
    spec = desired.cluster.spec.model_copy(update={"shared_storage": list(paths)})
    return desired.model_copy(update={"cluster": desired.cluster.model_copy(update={"spec": spec})})


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder every lab host sees at the same path (they share this machine's disks)."""
    made = tmp_path / "vm-disks"
    made.mkdir()
    return made


@pytest.fixture
def vm_with_disk(lab: Lab, folder: Path) -> Iterator[LabVm]:
    """A tiny VM running on kvm-01 with one raw file disk in ``folder``."""
    vm = LabVm(f"shd-{os.getpid() % 1000}-{next(_names)}", "kvm-01", 64, 1, dict(LABELS))
    image = folder / f"{vm.name}.img"
    with image.open("wb") as handle:
        handle.truncate(16 * 1024**2)
    disk = (
        "<disk type='file' device='disk'><driver name='qemu' type='raw'/>"
        f"<source file='{image}'/><target dev='vda' bus='virtio'/></disk>"
    )
    xml = libvirt_lab.domain_xml(vm, lab.virt_type).replace(
        "<serial type='pty'/>", disk + "<serial type='pty'/>"
    )
    conn = conn_of(lab, "kvm-01")
    try:
        conn.defineXML(xml).create()
    finally:
        conn.close()
    try:
        yield vm
    finally:
        remove_vm(lab, vm.name)


def test_a_vm_on_declared_shared_storage_is_planned_shared_and_moves_live(
    lab: Lab, folder: Path, vm_with_disk: LabVm
) -> None:
    desired = declared(tuned(load_desired(lab.cluster_dir)), str(folder))
    with ConnectionPool({h.name: h.uri for h in lab.hosts}) as pool:
        seen = LibvirtClusterObserver(desired.cluster, pool=pool, sample_interval=0).observe()
    (observed,) = (v for v in seen.vms if v.name == vm_with_disk.name)
    assert observed.migration_class is MigrationClass.SHARED

    result, _ = migrate(LibvirtMigrator(desired), move(vm_with_disk, "kvm-01", "kvm-02"))

    assert result.succeeded, result.error
    assert_runs_once_on(lab, vm_with_disk.uuid, "kvm-02")
    conn = conn_of(lab, "kvm-02")
    try:
        dom = conn.lookupByUUIDString(vm_with_disk.uuid)
        assert str(folder) in dom.XMLDesc(0)  # the same file, not a copy
    finally:
        conn.close()


def test_without_the_declaration_libvirt_refuses_and_the_vm_stays(
    lab: Lab, vm_with_disk: LabVm
) -> None:
    desired = tuned(load_desired(lab.cluster_dir))
    result, _ = migrate(LibvirtMigrator(desired), move(vm_with_disk, "kvm-01", "kvm-02"))

    assert not result.succeeded
    assert result.error is not None
    assert "unsafe" in result.error.lower()
    assert_runs_once_on(lab, vm_with_disk.uuid, "kvm-01")


def test_a_declared_path_that_does_not_hold_the_disk_adds_nothing(
    lab: Lab, folder: Path, vm_with_disk: LabVm
) -> None:
    desired = declared(tuned(load_desired(lab.cluster_dir)), f"{folder}-elsewhere")
    result, _ = migrate(LibvirtMigrator(desired), move(vm_with_disk, "kvm-01", "kvm-02"))

    assert not result.succeeded
    assert result.error is not None
    assert "unsafe" in result.error.lower()
    assert_runs_once_on(lab, vm_with_disk.uuid, "kvm-01")
