"""``reconciler drain`` then ``apply`` on a lab whose VMs keep their disks on each host's own
``local`` pool: a running VM moves live with its disk copied, a shut-off one moves cold; both
are read back by content on the target, and the source volumes are gone only afterwards."""

from __future__ import annotations

import os
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.adapters.lab import Lab
from reconciler.cli import main
from tests.lab_fixtures import lab_with_local_pools

pytestmark = pytest.mark.lab

libvirt = pytest.importorskip("libvirt")
MIB = 1024**2


@pytest.fixture
def disk_lab(tmp_path: Path) -> Iterator[Lab]:
    yield from lab_with_local_pools(tmp_path / "lab", hosts=2, vms=0)


def _uri(lab: Lab, host: str) -> str:
    return next(h.uri for h in lab.hosts if h.name == host)


def _volume(conn: Any, name: str, data: bytes) -> None:
    vol = conn.storagePoolLookupByName("local").createXML(
        f"<volume><name>{name}</name><capacity unit='bytes'>{32 * MIB}</capacity>"
        "<allocation unit='bytes'>0</allocation><target><format type='raw'/></target></volume>",
        0,
    )
    stream = conn.newStream(0)
    vol.upload(stream, 0, len(data), 0)
    stream.send(data)
    stream.finish()


def _read(uri: str, name: str) -> bytes | None:
    conn = libvirt.open(uri)
    try:
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
    finally:
        conn.close()


def _define(conn: Any, lab: Lab, name: str) -> Any:
    return conn.defineXML(
        f"<domain type='{lab.virt_type}'><name>{name}</name><uuid>{uuidlib.uuid4()}</uuid>"
        "<memory unit='MiB'>64</memory><vcpu>1</vcpu>"
        "<os><type arch='x86_64' machine='pc'>hvm</type></os><devices>"
        "<disk type='volume' device='disk'><driver name='qemu' type='raw'/>"
        f"<source pool='local' volume='{name}.img'/><target dev='vda' bus='virtio'/></disk>"
        "<serial type='pty'/><memballoon model='none'/></devices></domain>"
    )


def _states(lab: Lab, name: str) -> dict[str, tuple[bool, int]]:
    """host -> (persistent, state) of domain ``name`` wherever it is."""
    out: dict[str, tuple[bool, int]] = {}
    for host in lab.hosts:
        conn = libvirt.open(host.uri)
        try:
            dom = conn.lookupByName(name)
            out[host.name] = (bool(dom.isPersistent()), dom.state()[0])
        except libvirt.libvirtError:
            pass
        finally:
            conn.close()
    return out


def test_a_drain_moves_local_disk_vms_live_and_cold_verified_by_content(
    disk_lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = Path(disk_lab.cluster_dir)
    policy = folder / "policy.yaml"
    policy.write_text(
        policy.read_text().replace(
            "    postCopy: false\n", "    postCopy: false\n    localDisks: copy\n"
        )
    )
    live, cold = os.urandom(3 * MIB), os.urandom(2 * MIB)
    src = libvirt.open(_uri(disk_lab, "kvm-01"))
    try:
        _volume(src, "live1.img", live)
        _volume(src, "cold1.img", cold)
        _define(src, disk_lab, "live1").create()
        _define(src, disk_lab, "cold1")
    finally:
        src.close()
    state = tmp_path / "state"
    assert main(["drain", "kvm-01", str(folder), "--state-dir", str(state)]) in (0, 2)
    code = main(["apply", str(folder), "--yes", "--state-dir", str(state)])
    out, err = capsys.readouterr()
    assert code == 0, err + out
    assert _states(disk_lab, "live1") == {"kvm-02": (True, libvirt.VIR_DOMAIN_RUNNING)}
    assert _states(disk_lab, "cold1") == {"kvm-02": (True, libvirt.VIR_DOMAIN_SHUTOFF)}
    target = _uri(disk_lab, "kvm-02")
    assert (_read(target, "live1.img") or b"")[: len(live)] == live
    assert (_read(target, "cold1.img") or b"")[: len(cold)] == cold
    source = _uri(disk_lab, "kvm-01")
    assert _read(source, "live1.img") is None
    assert _read(source, "cold1.img") is None
