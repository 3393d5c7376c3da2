"""Moves that copy disks, on a lab of its own: a live copy, a cold move, a copy whose target
dies mid-way, a target pool that already holds the volume. Verified by reading volumes back."""

from __future__ import annotations

import itertools
import os
import threading
import time
import uuid as uuidlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import libvirt
import pytest

from reconciler.adapters import lab as libvirt_lab
from reconciler.adapters.lab import Lab
from reconciler.adapters.libvirt import cold_move, copy_move
from reconciler.adapters.libvirt.cluster_observer import LibvirtClusterObserver
from reconciler.adapters.libvirt.leftovers import Leftovers
from reconciler.adapters.libvirt.live_move import LiveMove
from reconciler.adapters.libvirt.migrator import LibvirtMigrator
from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.adapters.libvirt.recorder import LibvirtRecorder
from reconciler.config import load_desired
from reconciler.core import intents
from reconciler.model.base import HostName, VmName
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Move, Reason
from reconciler.model.policy import LocalDisks
from reconciler.model.snapshot import MigrationClass, MoveIntent, ReconcilerState
from tests.lab_fixtures import lab_with_local_pools

pytestmark = pytest.mark.lab

MIB = 1024**2
_names = itertools.count(1)


@pytest.fixture(scope="module")
def disk_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from lab_with_local_pools(tmp_path_factory.mktemp("disklab") / "lab", hosts=3, vms=3)


def _desired(lab: Lab) -> DesiredState:
    d = load_desired(lab.cluster_dir)
    spec = d.policy.spec
    migration = spec.migration.model_copy(update={"local_disks": LocalDisks.COPY})
    policy = d.policy.model_copy(update={"spec": spec.model_copy(update={"migration": migration})})
    return d.model_copy(update={"policy": policy})


def _conn(lab: Lab, host: str) -> Any:
    return libvirt.open(next(h.uri for h in lab.hosts if h.name == host))


def _volume(conn: Any, name: str, fmt: str, data: bytes, *, sparse: bool = False) -> None:
    pool = conn.storagePoolLookupByName("local")
    allocation = "<allocation unit='bytes'>0</allocation>" if sparse else ""
    vol = pool.createXML(
        f"<volume><name>{name}</name><capacity unit='bytes'>{64 * MIB}</capacity>{allocation}"
        f"<target><format type='{fmt}'/></target></volume>",
        0,
    )
    if fmt == "raw":
        stream = conn.newStream(0)
        vol.upload(stream, 0, len(data), 0)
        for start in range(0, len(data), 4 * MIB):
            stream.send(data[start : start + 4 * MIB])
        stream.finish()


def _read(conn: Any, name: str) -> bytes | None:
    pool = conn.storagePoolLookupByName("local")
    pool.refresh(0)
    try:
        vol = pool.storageVolLookupByName(name)
    except libvirt.libvirtError:
        return None
    stream = conn.newStream(0)
    vol.download(stream, 0, 0, 0)
    out = bytearray()
    while chunk := stream.recv(MIB):
        out += chunk
    stream.finish()
    return bytes(out)


def _define(conn: Any, lab: Lab, name: str, volume: str, fmt: str) -> Any:
    xml = (
        f"<domain type='{lab.virt_type}'><name>{name}</name><uuid>{uuidlib.uuid4()}</uuid>"
        "<memory unit='MiB'>64</memory><vcpu>1</vcpu>"
        "<os><type arch='x86_64' machine='pc'>hvm</type></os><devices>"
        f"<disk type='volume' device='disk'><driver name='qemu' type='{fmt}'/>"
        f"<source pool='local' volume='{volume}'/><target dev='vda' bus='virtio'/></disk>"
        "<serial type='pty'/><memballoon model='none'/></devices></domain>"
    )
    return conn.defineXML(xml)


def _move(name: str, source: str, target: str, klass: MigrationClass) -> Move:
    memory = 0 if klass is MigrationClass.COLD else 64 * MIB
    return Move(
        vm=VmName(name),
        source=HostName(source),
        target=HostName(target),
        memory=memory,
        vcpus=1,
        reason=Reason.BALANCE,
        detail="test",
        wave=0,
        migration_class=klass,
        disks=["vda"],
        disk_bytes=4 * MIB,
        copy_bytes=memory + 4 * MIB,
    )


def _migrate(lab: Lab, move: Move) -> Any:
    return LibvirtMigrator(_desired(lab)).migrate(
        move, on_progress=lambda _p: None, abort=threading.Event()
    )


@pytest.mark.parametrize("fmt", ["raw", "qcow2"])
def test_live_copy_moves_the_disk_and_cleans_the_source_after(disk_lab: Lab, fmt: str) -> None:
    name = f"copy-{next(_names)}"
    data = os.urandom(MIB) * 4
    src, dst = _conn(disk_lab, "kvm-01"), _conn(disk_lab, "kvm-02")
    _volume(src, f"{name}.img", fmt, data)
    before = _read(src, f"{name}.img")
    _define(src, disk_lab, name, f"{name}.img", fmt).create()
    result = _migrate(disk_lab, _move(name, "kvm-01", "kvm-02", MigrationClass.COPY))
    assert result.succeeded, result.error
    assert result.running_on == ["kvm-02"]
    copied = _read(dst, f"{name}.img")
    assert copied is not None
    assert before is not None
    if fmt == "raw":
        assert copied[: len(data)] == data
    else:
        assert copied[:4] == b"QFI\xfb"  # the qcow2 header came across
    assert _read(src, f"{name}.img") is None  # deleted only after the verified move
    dst.lookupByName(name).destroy()


def test_cold_move_copies_the_volume_and_keeps_the_vm_shut_off(disk_lab: Lab) -> None:
    name = f"cold-{next(_names)}"
    data = os.urandom(MIB) * 3
    src, dst = _conn(disk_lab, "kvm-01"), _conn(disk_lab, "kvm-03")
    _volume(src, f"{name}.img", "raw", data)
    _define(src, disk_lab, name, f"{name}.img", "raw")
    began = time.monotonic()
    result = _migrate(disk_lab, _move(name, "kvm-01", "kvm-03", MigrationClass.COLD))
    assert result.succeeded, result.error
    assert time.monotonic() - began < 60
    dom = dst.lookupByName(name)
    assert (dom.isActive(), dom.isPersistent()) == (0, 1)
    with pytest.raises(libvirt.libvirtError):
        src.lookupByName(name)
    copied = _read(dst, f"{name}.img")
    assert copied is not None
    assert copied[: len(data)] == data
    assert _read(src, f"{name}.img") is None


def test_a_target_pool_holding_the_volume_refuses_and_nothing_changes(disk_lab: Lab) -> None:
    name = f"taken-{next(_names)}"
    data = os.urandom(MIB)
    src, dst = _conn(disk_lab, "kvm-01"), _conn(disk_lab, "kvm-02")
    _volume(src, f"{name}.img", "raw", data)
    _volume(dst, f"{name}.img", "raw", b"\x00" * MIB)
    _define(src, disk_lab, name, f"{name}.img", "raw")
    result = _migrate(disk_lab, _move(name, "kvm-01", "kvm-02", MigrationClass.COLD))
    assert not result.succeeded
    assert "already holds a volume" in (result.error or "")
    assert (_read(src, f"{name}.img") or b"")[:MIB] == data
    assert (_read(dst, f"{name}.img") or b"x")[:MIB] == b"\x00" * MIB
    assert src.lookupByName(name).isPersistent()


def test_a_copy_whose_target_dies_leaves_the_source_intact_and_no_partial_volume(
    disk_lab: Lab, tmp_path: Path
) -> None:
    name = f"dies-{next(_names)}"
    data = os.urandom(MIB) * 48
    src = _conn(disk_lab, "kvm-01")
    _volume(src, f"{name}.img", "raw", data)
    _define(src, disk_lab, name, f"{name}.img", "raw").create()
    d = _desired(disk_lab)
    hosts = [
        h.model_copy(update={"migration": h.migration.model_copy(update={"bandwidth": 8})})
        for h in d.cluster.spec.hosts
    ]
    cluster = d.cluster.model_copy(
        update={"spec": d.cluster.spec.model_copy(update={"hosts": hosts})}
    )
    d = d.model_copy(update={"cluster": cluster})
    move = _move(name, "kvm-01", "kvm-02", MigrationClass.COPY)
    noted = tmp_path / "leftover-volumes.json"
    killer = threading.Timer(1.5, libvirt_lab.kill_host, (Path(disk_lab.dir), "kvm-02"))
    killer.start()
    try:
        result = LibvirtMigrator(d, leftovers=Leftovers(noted)).migrate(
            move, on_progress=lambda _p: None, abort=threading.Event()
        )
    finally:
        killer.join()
        libvirt_lab.start_host(Path(disk_lab.dir), "kvm-02")
    assert not result.succeeded
    dom = src.lookupByName(name)
    assert dom.isActive()
    assert dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
    assert (_read(src, f"{name}.img") or b"")[: len(data)] == data
    _no_partial_volume_after_restart(disk_lab, d, noted, "kvm-02", f"{name}.img", result.error)
    dom.destroy()


def _no_partial_volume_after_restart(
    lab: Lab, d: DesiredState, noted: Path, host: str, volume: str, error: str | None
) -> None:
    """The target volume is gone, or (its daemon dead at that moment) noted and deleted by a
    reconciler started afresh once the host answers again."""
    if _read(_conn(lab, host), volume) is None:
        return
    assert "noted and will be deleted" in (error or ""), error
    assert volume in noted.read_text()
    restarted = LibvirtMigrator(d, leftovers=Leftovers(noted))
    with ConnectionPool({h.name: h.uri for h in lab.hosts}) as pool:
        restarted.leftovers.sweep(pool)
    assert _read(_conn(lab, host), volume) is None
    assert restarted.leftovers.entries() == []


def test_a_cold_move_whose_target_dies_leaves_the_source_intact_and_no_partial_volume(
    disk_lab: Lab, tmp_path: Path
) -> None:
    name = f"colddies-{next(_names)}"
    data = os.urandom(MIB) * 64
    src = _conn(disk_lab, "kvm-01")
    _volume(src, f"{name}.img", "raw", data)
    _define(src, disk_lab, name, f"{name}.img", "raw")
    d = _desired(disk_lab)
    noted = tmp_path / "leftover-volumes.json"
    migrator = LibvirtMigrator(d, leftovers=Leftovers(noted))

    def slow(_p: Any) -> None:  # stretch the copy so the kill lands mid-stream
        time.sleep(0.05)

    killer = threading.Timer(0.5, libvirt_lab.kill_host, (Path(disk_lab.dir), "kvm-03"))
    killer.start()
    try:
        result = migrator.migrate(
            _move(name, "kvm-01", "kvm-03", MigrationClass.COLD),
            on_progress=slow,
            abort=threading.Event(),
        )
    finally:
        killer.join()
        libvirt_lab.start_host(Path(disk_lab.dir), "kvm-03")
    assert not result.succeeded
    assert src.lookupByName(name).isPersistent()
    assert (_read(src, f"{name}.img") or b"")[: len(data)] == data
    with pytest.raises(libvirt.libvirtError):
        _conn(disk_lab, "kvm-03").lookupByName(name)
    _no_partial_volume_after_restart(disk_lab, d, noted, "kvm-03", f"{name}.img", result.error)


def test_a_cold_move_stopped_after_defining_the_target_is_undone_by_the_next_round(
    disk_lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed between defining the VM on the target and undefining it on the source: both hosts
    hold it, shut off, with the same intent; the next reconciler removes the target copy."""
    name = f"halfcold-{next(_names)}"
    data = os.urandom(MIB) * 2
    src = _conn(disk_lab, "kvm-02")
    _volume(src, f"{name}.img", "raw", data)
    found = _define(src, disk_lab, name, f"{name}.img", "raw").UUIDString()
    d = _desired(disk_lab)
    intent = MoveIntent(source="kvm-02", target="kvm-03", started_at=datetime.now(UTC))
    LibvirtRecorder(d.cluster).record("kvm-02", name, ReconcilerState(intent=intent), uuid=found)
    noted = tmp_path / "leftover-volumes.json"

    class Killed(BaseException):
        pass

    def killed(*_a: object) -> None:
        raise Killed

    monkeypatch.setattr(cold_move, "_defined_once", killed)
    with pytest.raises(Killed):
        LibvirtMigrator(d, leftovers=Leftovers(noted)).migrate(
            _move(name, "kvm-02", "kvm-03", MigrationClass.COLD),
            on_progress=lambda _p: None,
            abort=threading.Event(),
        )
    monkeypatch.undo()
    dst = _conn(disk_lab, "kvm-03")
    assert dst.lookupByUUIDString(found).isPersistent()  # the crash left two definitions
    with ConnectionPool({h.name: h.uri for h in disk_lab.hosts}) as pool:
        seen = LibvirtClusterObserver(d.cluster, pool=pool, sample_interval=0).observe()
        _, resolutions = intents.resolved(seen, datetime.now(UTC))
        (r,) = (r for r in resolutions if r.vm == name)
        assert (r.host, r.discard_on) == ("kvm-02", "kvm-03")
        LibvirtMigrator(d, pool=pool, leftovers=Leftovers(noted)).discard_copy(
            "kvm-03", name, uuid=found
        )
    with pytest.raises(libvirt.libvirtError):
        dst.lookupByUUIDString(found)
    assert _read(dst, f"{name}.img") is None
    assert src.lookupByUUIDString(found).isPersistent()
    assert (_read(src, f"{name}.img") or b"")[: len(data)] == data


def test_a_cold_copy_is_sparse(disk_lab: Lab) -> None:
    name = f"sparse-{next(_names)}"
    data = os.urandom(MIB)
    src, dst = _conn(disk_lab, "kvm-03"), _conn(disk_lab, "kvm-01")
    _volume(src, f"{name}.img", "raw", data, sparse=True)  # 1 MiB of data in 64 MiB
    _define(src, disk_lab, name, f"{name}.img", "raw")
    result = _migrate(disk_lab, _move(name, "kvm-03", "kvm-01", MigrationClass.COLD))
    assert result.succeeded, result.error
    assert result.data_bytes is not None
    assert result.data_bytes < 8 * MIB
    vol = dst.storagePoolLookupByName("local").storageVolLookupByName(f"{name}.img")
    _kind, capacity, allocation = vol.info()
    assert capacity == 64 * MIB
    assert allocation < 8 * MIB
    assert (_read(dst, f"{name}.img") or b"")[: len(data)] == data


class _Stopped(BaseException):
    """The reconciler's process ending at this point (nothing after it runs)."""


def _stop(*_a: object, **_k: object) -> None:
    raise _Stopped


def _copy_stopped_at(
    lab: Lab, monkeypatch: pytest.MonkeyPatch, where: tuple[object, str], noted: Path
) -> tuple[str, bytes]:
    """A running VM with a local disk on kvm-02, live-copied to kvm-03 by a reconciler that
    stops at ``where`` (the object and function that would run next); (name, disk data)."""
    name = f"stopped-{next(_names)}"
    data = os.urandom(MIB) * 4
    src = _conn(lab, "kvm-02")
    _volume(src, f"{name}.img", "raw", data)
    _define(src, lab, name, f"{name}.img", "raw").create()
    monkeypatch.setattr(*where, _stop)
    with pytest.raises(_Stopped):
        LibvirtMigrator(_desired(lab), leftovers=Leftovers(noted)).migrate(
            _move(name, "kvm-02", "kvm-03", MigrationClass.COPY),
            on_progress=lambda _p: None,
            abort=threading.Event(),
        )
    monkeypatch.undo()
    return name, data


def test_a_live_copy_ended_while_its_reconciler_was_down_has_its_source_volume_deleted_later(
    disk_lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped after libvirt ended the move, before its verification: the VM runs on the
    target, its source volume left on the source. The next move (of the same VM back, which
    that volume would refuse) deletes it first, after checking the VM runs on the target with
    its copy, and goes."""
    noted = tmp_path / "leftover-volumes.json"
    name, data = _copy_stopped_at(disk_lab, monkeypatch, (copy_move, "verify_volumes"), noted)
    src, dst = _conn(disk_lab, "kvm-02"), _conn(disk_lab, "kvm-03")
    assert dst.lookupByName(name).state()[0] == libvirt.VIR_DOMAIN_RUNNING
    with pytest.raises(libvirt.libvirtError):
        src.lookupByName(name)
    assert (_read(src, f"{name}.img") or b"")[: len(data)] == data  # left behind
    back = LibvirtMigrator(_desired(disk_lab), leftovers=Leftovers(noted)).migrate(
        _move(name, "kvm-03", "kvm-02", MigrationClass.COPY),
        on_progress=lambda _p: None,
        abort=threading.Event(),
    )
    assert back.succeeded, back.error
    assert src.lookupByName(name).state()[0] == libvirt.VIR_DOMAIN_RUNNING
    assert (_read(src, f"{name}.img") or b"")[: len(data)] == data  # the copy came back
    assert _read(dst, f"{name}.img") is None
    src.lookupByName(name).destroy()


def test_a_source_volume_is_kept_while_its_vm_does_not_run_on_the_target(
    disk_lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same stop, then the target loses the VM: the source volume is the only copy left
    beside the target's, and no later reconciler deletes it."""
    noted = tmp_path / "leftover-volumes.json"
    name, data = _copy_stopped_at(disk_lab, monkeypatch, (copy_move, "verify_volumes"), noted)
    src, dst = _conn(disk_lab, "kvm-02"), _conn(disk_lab, "kvm-03")
    dom = dst.lookupByName(name)
    dom.destroy()
    dom.undefine()
    with ConnectionPool({h.name: h.uri for h in disk_lab.hosts}) as pool:
        Leftovers(noted).sweep(pool)
    assert (_read(src, f"{name}.img") or b"")[: len(data)] == data
    assert (_read(dst, f"{name}.img") or b"")[: len(data)] == data


def test_a_source_volume_is_kept_when_the_reconciler_stopped_before_libvirt_moved_it(
    disk_lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped before libvirt started: the VM runs on its source with its disk, which a later
    reconciler keeps (and forgets); no volume was made on the target."""
    noted = tmp_path / "leftover-volumes.json"
    name, data = _copy_stopped_at(disk_lab, monkeypatch, (LiveMove, "migrate"), noted)
    src, dst = _conn(disk_lab, "kvm-02"), _conn(disk_lab, "kvm-03")
    later = Leftovers(noted)
    with ConnectionPool({h.name: h.uri for h in disk_lab.hosts}) as pool:
        later.sweep(pool)
    assert src.lookupByName(name).state()[0] == libvirt.VIR_DOMAIN_RUNNING
    assert (_read(src, f"{name}.img") or b"")[: len(data)] == data
    assert _read(dst, f"{name}.img") is None
    assert later.entries() == []
    src.lookupByName(name).destroy()
