"""Faults of one lab host on a real lab of its own: a killed, a frozen and a restarted daemon,
and live migration between lab hosts configured by the lab's Cluster alone."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters import lab as lab_api
from reconciler.adapters.lab import Lab
from reconciler.adapters.lab.processes import read_pid, wait_gone
from reconciler.adapters.libvirt.observer import observe_cluster
from reconciler.config import load_desired
from reconciler.errors import LabError
from reconciler.model.cluster import Cluster, Host
from tests.lab_fixtures import pid_alive, start_lab_or_skip, stop_and_check

pytestmark = pytest.mark.lab

libvirt = pytest.importorskip("libvirt")


@pytest.fixture(scope="module")
def small_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """Two hosts, three VMs on kvm-01: a lab the tests here may break (each one mends it)."""
    directory = tmp_path_factory.mktemp("faults") / "lab"
    started = start_lab_or_skip(directory, hosts=2, vms=3)
    yield started
    stop_and_check(directory)


def _qemu_pids(lab: Lab, host: str, vms: set[str]) -> set[int]:
    """The QEMUs of ``vms`` by the pid files libvirtd keeps (it keeps ``driver.pid`` too)."""
    folder = Path(lab.host(host).path) / "run" / "qemu"
    return {int((folder / f"{vm}.pid").read_text()) for vm in vms}


def _vms_on(lab: Lab, host: str) -> set[str]:
    status = lab_api.lab_status(Path(lab.dir))
    return {v.name for v in status.vms if v.host == host and v.state == "running"}


def test_killed_daemon_keeps_its_vms_and_starts_again(small_lab: Lab) -> None:
    directory = Path(small_lab.dir)
    vms = _vms_on(small_lab, "kvm-01")
    qemus = _qemu_pids(small_lab, "kvm-01", vms)
    assert vms
    assert all(pid_alive(q) for q in qemus)

    pid = lab_api.kill_host(directory, "kvm-01")
    assert not pid_alive(pid)
    status = {h.name: h for h in lab_api.lab_status(directory).hosts}
    assert not status["kvm-01"].up
    assert status["kvm-01"].error == "libvirtd is not running"
    assert status["kvm-02"].up
    cluster = load_desired(small_lab.cluster_dir).cluster
    snap = observe_cluster(cluster, sample_interval=0)
    reachable = {h.name: h.reachable for h in snap.hosts}
    assert reachable == {"kvm-01": False, "kvm-02": True}
    assert all(pid_alive(q) for q in qemus), "the VMs outlive their daemon"
    with pytest.raises(LabError, match="not running"):
        lab_api.freeze_host(directory, "kvm-01")

    assert lab_api.start_host(directory, "kvm-01")
    assert _vms_on(small_lab, "kvm-01") == vms
    assert _qemu_pids(small_lab, "kvm-01", vms) == qemus
    assert set(qemus) <= set(lab_api.lab_processes(directory))
    assert not lab_api.start_host(directory, "kvm-01"), "running already"


def test_a_host_whose_qemus_died_comes_back_with_its_definitions_shut_off(small_lab: Lab) -> None:
    directory = Path(small_lab.dir)
    vms = _vms_on(small_lab, "kvm-01")
    qemus = _qemu_pids(small_lab, "kvm-01", vms)
    supervisor = read_pid(Path(small_lab.host("kvm-01").path) / "reaper.pid")
    assert supervisor is not None
    lab_api.kill_host(directory, "kvm-01")
    for pid in qemus:  # the machine lost power: its VMs are gone with its daemon
        os.kill(pid, signal.SIGKILL)
    assert all(wait_gone(pid, 10.0) for pid in [*qemus, supervisor])

    assert lab_api.start_host(directory, "kvm-01")  # as a rebooted machine
    conn = libvirt.open(small_lab.host("kvm-01").uri)
    try:
        seen = {d.name(): (d.isPersistent(), d.state()[0]) for d in conn.listAllDomains()}
        assert seen == dict.fromkeys(vms, (True, libvirt.VIR_DOMAIN_SHUTOFF))
        for name in vms:  # mend the lab for the other tests
            conn.lookupByName(name).create()
    finally:
        conn.close()
    assert _vms_on(small_lab, "kvm-01") == vms


def test_frozen_daemon_hangs_until_thawed(small_lab: Lab) -> None:
    directory = Path(small_lab.dir)
    uri = small_lab.host("kvm-02").uri
    answers: list[int] = []

    def ask() -> None:
        conn = libvirt.open(uri)
        try:
            answers.append(len(conn.listAllDomains(0)))
        finally:
            conn.close()

    pid = lab_api.freeze_host(directory, "kvm-02")
    caller = threading.Thread(target=ask, daemon=True)
    try:
        caller.start()
        caller.join(1.0)
        assert caller.is_alive(), "a frozen daemon does not answer"
        status = {h.name: h for h in lab_api.lab_status(directory).hosts}  # does not hang
        assert not status["kvm-02"].up
        assert f"pid {pid}" in (status["kvm-02"].error or "")
        assert status["kvm-01"].up
    finally:
        thawed = lab_api.thaw_host(directory, "kvm-02")
    assert thawed
    caller.join(10.0)
    assert not caller.is_alive()
    assert answers == [len(_vms_on(small_lab, "kvm-02"))]
    assert not lab_api.thaw_host(directory, "kvm-02"), "not frozen any more"


def _migration_uri(cluster: Cluster, host: Host) -> str:
    template = host.migration.uri or cluster.spec.defaults.migration.uri
    assert template is not None
    return template.replace("{address}", host.address or host.name).replace("{name}", host.name)


def test_live_migration_between_lab_hosts_from_the_cluster_alone(small_lab: Lab) -> None:
    cluster = load_desired(small_lab.cluster_dir).cluster
    hosts = {h.name: h for h in cluster.spec.hosts}
    assert {h.address for h in hosts.values()} == {"127.0.0.1"}
    assert cluster.spec.defaults.migration.uri == "tcp://{address}"
    source, target = hosts["kvm-01"], hosts["kvm-02"]
    name = sorted(_vms_on(small_lab, "kvm-01"))[0]
    flags = (
        libvirt.VIR_MIGRATE_LIVE
        | libvirt.VIR_MIGRATE_PERSIST_DEST
        | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
    )
    for src, dst in ((source, target), (target, source)):  # there and back: the lab is as it was
        sconn, dconn = libvirt.open(src.uri), libvirt.open(dst.uri)
        try:
            sconn.lookupByName(name).migrate(dconn, flags, None, _migration_uri(cluster, dst), 0)
        finally:
            sconn.close()
            dconn.close()
        snap = observe_cluster(cluster, sample_interval=0)
        assert {v.host for v in snap.vms if v.name == name} == {dst.name}


def test_lab_down_cleans_up_a_frozen_and_a_killed_host(tmp_path: Path) -> None:
    directory = tmp_path / "lab"
    start_lab_or_skip(directory, hosts=2, vms=1)
    lab_api.freeze_host(directory, "kvm-01")
    lab_api.kill_host(directory, "kvm-02")
    stop_and_check(directory)  # fails if a process survives or the folder stays


def test_lab_down_stops_a_capabilities_probe_its_killed_daemon_left(tmp_path: Path) -> None:
    """A daemon killed while it probes QEMU's capabilities leaves the probe running, daemonized,
    its pid file in the host's lib/qemu/qmp-*: lab down stops it too."""
    directory = tmp_path / "lab"
    lab = start_lab_or_skip(directory, hosts=2, vms=0)
    probe = Path(lab.host("kvm-01").path) / "lib" / "qemu" / "qmp-probe"
    probe.mkdir(parents=True)
    # the monitor's socket in a short folder: a unix socket's path has at most 107 bytes
    sockets = Path(tempfile.mkdtemp(prefix="qmp-", dir="/tmp"))
    subprocess.run(
        [
            "qemu-system-x86_64", "-S", "-no-user-config", "-nodefaults", "-nographic",
            "-machine", "none", "-qmp", f"unix:{sockets}/qmp.monitor,server=on,wait=off",
            "-pidfile", f"{probe}/qmp.pid", "-daemonize",
        ],
        check=True,
        timeout=30,
        capture_output=True,
    )  # fmt: skip
    shutil.rmtree(sockets)  # the daemonized probe keeps its socket open
    pid = read_pid(probe / "qmp.pid")
    assert pid is not None
    assert pid_alive(pid)
    lab_api.kill_host(directory, "kvm-01")
    stop_and_check(directory)  # fails if the probe survives
    assert not pid_alive(pid)


def test_faults_need_the_qemu_driver(tmp_path: Path) -> None:
    directory = tmp_path / "lab"
    lab_api.start_lab(directory, driver="test")
    try:
        with pytest.raises(LabError, match="test driver"):
            lab_api.kill_host(directory, "kvm-01")
    finally:
        lab_api.stop_lab(directory)
