"""``VIR_MIGRATE_UNSAFE`` exactly when the declared shared storage answers libvirt's safety
check: some disk libvirt would hold against the migration, and every such disk a file under a
path of ``spec.sharedStorage`` (or ``--shared-path``); never otherwise. The rule without
libvirt, then what the migrator passes to a fake host. The lab test
(``test_libvirt_migrator.py``) shows libvirt refusing without it and moving with it."""

from __future__ import annotations

import threading
from typing import Any

import libvirt
import pytest

from reconciler.adapters.libvirt.calls import declared_shared, objected_disks
from reconciler.adapters.libvirt.domain_disks import DiskRef
from reconciler.adapters.libvirt.live_move import LiveMove, Watch
from reconciler.adapters.libvirt.migrator import LibvirtMigrator
from reconciler.model.desired import DesiredState
from reconciler.model.snapshot import MigrationClass
from tests.adapters.test_migrator_watch import (
    DONE,
    MOVE,
    UUID,
    Clock,
    Domain,
    fake_hosts,
    tuned,
)

SHARED = ("/srv/shared",)


def file(target: str, path: str | None, **kw: Any) -> DiskRef:
    return DiskRef(target=target, device=kw.pop("device", "disk"), kind="file", path=path, **kw)


@pytest.mark.parametrize(
    ("disks", "copied", "unsafe"),
    [
        ([file("vda", "/srv/shared/a.qcow2")], [], True),
        ([file("vda", "/srv/shared")], [], True),  # the declared path itself
        ([file("vda", "/srv/shared-not/a.qcow2")], [], False),  # a sibling, not under it
        ([file("vda", "/srv/shared/a.qcow2"), file("vdb", "/var/lib/b.img")], [], False),
        # the local disk is copied (class copy): libvirt does not hold it against the move
        ([file("vda", "/srv/shared/a.qcow2"), file("vdb", "/var/lib/b.img")], ["vdb"], True),
        ([file("vda", "/var/lib/b.img")], ["vda"], False),  # nothing left to object to
        ([file("vda", "/var/lib/b.img", readonly=True)], [], False),
        ([file("vda", "/srv/shared/a.img"), file("hdc", "/iso/x.iso", readonly=True)], [], True),
        ([file("hdc", None, device="cdrom")], [], False),  # an empty drive
        ([DiskRef("vda", "disk", "network", protocol="rbd", name="pool/a")], [], False),
        ([DiskRef("vda", "disk", "block", path="/srv/shared/dev")], [], False),
        # a volume whose file was not found is never taken for a declared one
        ([file("vda", "/srv/shared/a"), DiskRef("vdb", "disk", "volume", pool="p")], [], False),
        ([], [], False),
    ],
)
def test_the_flag_is_declared_exactly_when_every_disk_libvirt_objects_to_is_under_a_shared_path(
    disks: list[DiskRef], copied: list[str], unsafe: bool
) -> None:
    assert declared_shared(disks, copied, SHARED) is unsafe
    assert declared_shared(disks, copied, ()) is False  # nothing declared: never


def test_the_disks_objected_to_are_the_file_disks_with_a_medium_not_read_only_not_copied() -> None:
    disks = [
        file("vda", "/a"),
        file("vdb", "/b", readonly=True),
        file("vdc", "/c"),
        file("hdc", None, device="cdrom"),
        DiskRef("vdd", "disk", "dir", path="/d"),
        DiskRef("vde", "disk", "volume", pool="p", volume="e"),
    ]
    assert [d.target for d in objected_disks(disks, ["vdc"])] == ["vda", "vde"]


# --- what the migrator passes ------------------------------------------------------------


def domain_xml(*disks: str) -> str:
    return f"<domain><name>web-1</name><devices>{''.join(disks)}</devices></domain>"


FILE_DISK = "<disk type='file' device='disk'><source file='{}'/><target dev='{}'/></disk>"


def shared(desired: DesiredState, *paths: str) -> DesiredState:
    spec = desired.cluster.spec.model_copy(update={"shared_storage": list(paths)})
    return desired.model_copy(update={"cluster": desired.cluster.model_copy(update={"spec": spec})})


def flags_passed(
    release: list[Domain],
    xml: str,
    desired: DesiredState,
    *,
    klass: MigrationClass = MigrationClass.SHARED,
    extra: tuple[str, ...] = (),
) -> int:
    class WithDisks(Domain):
        def XMLDesc(self, flags: int = 0) -> str:  # noqa: N802 (libvirt's name)
            return xml

    world, source, pool = fake_hosts([DONE], release, source_type=WithDisks)
    migrator = LibvirtMigrator(
        desired, pool=pool, poll_interval=0.001, clock=Clock(), shared_paths=extra
    )
    move = MOVE.model_copy(update={"migration_class": klass})
    result = migrator.migrate(move, on_progress=lambda p: None, abort=threading.Event(), uuid=UUID)
    assert result.succeeded, result.error
    ((_, _, flags),) = source.called
    return flags


def test_a_vm_on_declared_shared_storage_migrates_with_the_unsafe_flag(
    release: list[Domain],
) -> None:
    xml = domain_xml(FILE_DISK.format("/srv/shared/web-1.qcow2", "vda"))
    flags = flags_passed(release, xml, shared(tuned(), "/srv/shared"))
    assert flags & libvirt.VIR_MIGRATE_UNSAFE
    assert flags & libvirt.VIR_MIGRATE_LIVE


def test_a_path_given_on_the_command_line_counts_as_declared(release: list[Domain]) -> None:
    xml = domain_xml(FILE_DISK.format("/srv/shared/web-1.qcow2", "vda"))
    assert flags_passed(release, xml, tuned(), extra=("/srv/shared",)) & (
        libvirt.VIR_MIGRATE_UNSAFE
    )


@pytest.mark.parametrize(
    "xml",
    [
        domain_xml(FILE_DISK.format("/var/lib/web-1.qcow2", "vda")),
        domain_xml(
            FILE_DISK.format("/srv/shared/web-1.qcow2", "vda"),
            FILE_DISK.format("/var/lib/web-1-data.img", "vdb"),
        ),
        domain_xml(),
        "not xml",
    ],
)
def test_without_every_objected_disk_declared_the_flag_is_never_passed(
    release: list[Domain], xml: str
) -> None:
    flags = flags_passed(release, xml, shared(tuned(), "/srv/shared"))
    assert not flags & libvirt.VIR_MIGRATE_UNSAFE


def test_nothing_declared_the_disks_are_not_even_read(release: list[Domain]) -> None:
    # the fake domain of the other tests has no XMLDesc: reading it would fail the move
    world, source, pool = fake_hosts([DONE], release)
    migrator = LibvirtMigrator(tuned(), pool=pool, poll_interval=0.001, clock=Clock())
    result = migrator.migrate(MOVE, on_progress=lambda p: None, abort=threading.Event(), uuid=UUID)
    assert result.succeeded, result.error
    ((_, _, flags),) = source.called
    assert not flags & libvirt.VIR_MIGRATE_UNSAFE


def test_a_copy_move_leaves_its_copied_disks_out_of_the_check(release: list[Domain]) -> None:
    class WithDisks(Domain):
        def XMLDesc(self, flags: int = 0) -> str:  # noqa: N802 (libvirt's name)
            return domain_xml(
                FILE_DISK.format("/srv/shared/web-1.qcow2", "vda"),
                FILE_DISK.format("/var/lib/web-1-data.img", "vdb"),
            )

    desired = shared(tuned(), "/srv/shared")
    world, source, pool = fake_hosts([DONE], release, source_type=WithDisks)
    live = LiveMove(desired, pool, Watch(poll_interval=0.001, clock=Clock()), shared_paths=SHARED)
    move = MOVE.model_copy(update={"migration_class": MigrationClass.COPY, "disks": ["vdb"]})
    target = desired.cluster.spec.hosts[1]
    result = live.migrate(move, target, on_progress=lambda p: None, abort=threading.Event())
    assert result.succeeded, result.error
    ((_, params, flags),) = source.called
    assert flags & libvirt.VIR_MIGRATE_UNSAFE
    assert flags & libvirt.VIR_MIGRATE_NON_SHARED_DISK
    assert params[libvirt.VIR_MIGRATE_PARAM_MIGRATE_DISKS] == ["vdb"]
