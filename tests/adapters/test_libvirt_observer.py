"""The observer against libvirt's test driver and against hosts that fail or hang."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import libvirt
import pytest

from reconciler.adapters.files.snapshot import load_snapshot, save_snapshot
from reconciler.adapters.lab import node_xml, write_node_files
from reconciler.adapters.libvirt import observe_host, observe_pool
from reconciler.adapters.libvirt import observer as libvirt_observer
from reconciler.adapters.libvirt.domain_metadata import render_metadata
from reconciler.adapters.libvirt.observe_host import RawVm
from reconciler.adapters.libvirt.observe_result import host_result
from reconciler.adapters.libvirt.observer import observe_cluster, observe_settings
from reconciler.errors import ConfigError
from reconciler.model.base import API_VERSION
from reconciler.model.cluster import Cluster, ClusterMetadata, ClusterSpec, Host, Observe
from reconciler.model.snapshot import (
    MigrationClass,
    ReconcilerState,
    Snapshot,
    UnmigratableReason,
    VmRunState,
)

pytestmark = pytest.mark.libvirt

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def cluster_of(
    *hosts: tuple[str, str], shared: list[str] | None = None, observe: Observe | None = None
) -> Cluster:
    return Cluster(
        api_version=API_VERSION,
        kind="Cluster",
        metadata=ClusterMetadata(name="t"),
        spec=ClusterSpec(
            hosts=[Host(name=n, uri=u) for n, u in hosts],
            shared_storage=shared or [],
            observe=observe or Observe(),
        ),
    )


def disk(kind: str, source: str, dev: str) -> str:
    return f"<disk type='{kind}' device='disk'>{source}<target dev='{dev}' bus='virtio'/></disk>"


def vm_xml(name: str, uuid: str, *, memory_mib: int = 128, extra: str = "") -> str:
    return f"""<domain type='test'>
  <name>{name}</name><uuid>{uuid}</uuid>
  <metadata>{render_metadata({"app": name}, ReconcilerState(last_moved_from="x", moves=2))}
  </metadata>
  <memory unit='MiB'>{memory_mib}</memory><vcpu>2</vcpu>
  <os><type>hvm</type></os>
  <devices>{extra}<memballoon model='virtio'/></devices>
</domain>"""


def write(path: Path, *domains: str) -> str:
    path.write_text(node_xml("\n".join(domains)))
    return f"test://{path}"


def test_many_hosts_observed_correctly(tmp_path: Path) -> None:
    cluster = write_node_files(tmp_path, 200, 30)
    snap = observe_cluster(cluster, sample_interval=0.05, now=NOW)
    assert snap.taken_at == NOW
    assert [h.name for h in snap.hosts] == [h.name for h in cluster.spec.hosts]
    assert all(h.reachable and h.error is None for h in snap.hosts)
    assert len(snap.vms) == 6000
    assert not snap.in_flight
    by_host: dict[str, list[str]] = {}
    for vm in snap.vms:
        by_host.setdefault(vm.host, []).append(vm.name)
    assert len(by_host) == 200
    for host, names in by_host.items():
        assert sorted(names) == [f"{host}-vm-{j:02d}" for j in range(30)]
    for vm in snap.vms:
        j = int(vm.name.rsplit("-", 1)[1])
        assert vm.labels == {"app": f"app-{j % 5}"}
        assert vm.memory_max == vm.memory_current == 64 * (1 + j % 4) * 1024**2
        assert vm.vcpus == 1 + j % 2
        assert vm.state is VmRunState.RUNNING
        assert vm.persistent
        assert vm.migratable
    first = snap.hosts[0]
    assert first.cpus == 16
    assert first.memory_total == 65536 * 1024**2
    # bulk: a fixed number of calls per host plus one XMLDesc per VM; the test driver's CPU
    # figures are fixed, so there is one sample of them (no getCPUStats, no second sweep)
    assert {h.libvirt_calls for h in snap.hosts} == {11 + 30}
    assert {h.cpu_utilisation for h in snap.hosts} == {None}
    assert {vm.cpu_used for vm in snap.vms} == {None}


def test_host_and_vm_fields(tmp_path: Path) -> None:
    uri = write(
        tmp_path / "a.xml",
        vm_xml("web-1", "11111111-2222-4333-8444-000000000001", memory_mib=192),
        vm_xml(
            "db-1",
            "11111111-2222-4333-8444-000000000002",
            extra="<disk type='file' device='disk'><source file='/srv/db.img'/>"
            "<target dev='vda' bus='virtio'/></disk>",
        ),
    )
    snap = observe_cluster(cluster_of(("kvm-01", uri)), sample_interval=0, now=NOW)
    host = snap.hosts[0]
    assert host.reachable
    assert host.uri == uri
    assert host.arch
    assert host.hypervisor == "TEST"
    assert host.libvirt_version
    assert host.cpus == 4
    assert host.memory_total == 4096 * 1024**2
    assert host.observe_seconds > 0
    web, db = sorted(snap.vms, key=lambda v: v.name, reverse=True)
    assert web.name == "web-1"
    assert web.uuid == "11111111-2222-4333-8444-000000000001"
    assert web.memory_max == 192 * 1024**2
    assert web.vcpus == 2
    assert web.labels == {"app": "web-1"}
    assert web.reconciler == ReconcilerState(last_moved_from="x", moves=2)
    assert web.migratable
    assert not web.unmigratable
    assert not db.migratable
    assert [u.code for u in db.unmigratable] == [UnmigratableReason.LOCAL_DISK]
    again = observe_cluster(
        cluster_of(("kvm-01", uri)), sample_interval=0, shared_paths=["/srv"], now=NOW
    )
    assert all(vm.migratable for vm in again.vms)


def test_vm_on_two_hosts_is_in_flight(tmp_path: Path) -> None:
    uuid = "11111111-2222-4333-8444-0000000000ff"
    a = write(tmp_path / "a.xml", vm_xml("moving", uuid))
    b = write(tmp_path / "b.xml", vm_xml("moving", uuid), vm_xml("other", uuid[:-2] + "01"))
    snap = observe_cluster(cluster_of(("kvm-01", a), ("kvm-02", b)), sample_interval=0)
    assert [(f.name, f.uuid, f.hosts) for f in snap.in_flight] == [
        ("moving", uuid, ["kvm-01", "kvm-02"])
    ]
    moving = [vm for vm in snap.vms if vm.name == "moving"]
    assert len(moving) == 2
    for vm in moving:
        assert not vm.migratable
        assert UnmigratableReason.IN_FLIGHT in [u.code for u in vm.unmigratable]


def test_vms_are_listed_in_name_then_host_order_whatever_host_they_run_on(
    tmp_path: Path,
) -> None:
    """The planner indexes VMs in (name, host) order: the snapshot lists them so, and a VM that
    moves keeps its place in the list (recorded observations differ by its fields alone)."""
    ids = iter(f"11111111-2222-4333-8444-{k:012d}" for k in range(1, 100))
    web2, db1, web1, moving = (next(ids) for _ in range(4))

    def observed(on_a: list[tuple[str, str]], on_b: list[tuple[str, str]]) -> Snapshot:
        a = write(tmp_path / "a.xml", *(vm_xml(n, u) for n, u in on_a))
        b = write(tmp_path / "b.xml", *(vm_xml(n, u) for n, u in on_b))
        return observe_cluster(cluster_of(("kvm-01", a), ("kvm-02", b)), sample_interval=0)

    before = observed([("web-2", web2), ("db-1", db1)], [("web-1", web1), ("moving", moving)])
    assert [(vm.name, vm.host) for vm in before.vms] == [
        ("db-1", "kvm-01"),
        ("moving", "kvm-02"),
        ("web-1", "kvm-02"),
        ("web-2", "kvm-01"),
    ]
    after = observed([("web-2", web2), ("db-1", db1), ("moving", moving)], [("web-1", web1)])
    assert [vm.name for vm in after.vms] == [vm.name for vm in before.vms]
    assert after.vms[1].host == "kvm-01"
    both = observed([("moving", moving), ("db-1", db1)], [("moving", moving)])
    assert [(vm.name, vm.host) for vm in both.vms] == [
        ("db-1", "kvm-01"),
        ("moving", "kvm-01"),
        ("moving", "kvm-02"),
    ]


def test_unreachable_host_is_reported_not_empty(tmp_path: Path) -> None:
    good = write(tmp_path / "a.xml", vm_xml("web-1", "11111111-2222-4333-8444-000000000001"))
    bad = f"qemu+unix:///system?socket={tmp_path}/no-such/libvirt-sock"
    snap = observe_cluster(cluster_of(("kvm-01", good), ("kvm-02", bad)), sample_interval=0)
    ok, down = snap.hosts
    assert ok.reachable
    assert not down.reachable
    assert down.error
    assert "no-such" in down.error
    assert down.cpus is None
    assert down.memory_total is None
    assert down.libvirt_calls == 1
    assert [vm.host for vm in snap.vms] == ["kvm-01"]


def test_missing_node_file_is_unreachable(tmp_path: Path) -> None:
    snap = observe_cluster(cluster_of(("kvm-01", f"test://{tmp_path}/missing.xml")))
    assert not snap.hosts[0].reachable
    assert "missing.xml" in (snap.hosts[0].error or "")


@pytest.fixture
def silent_socket(tmp_path: Path) -> Iterator[Path]:
    """A unix socket that accepts connections (in its backlog) and never answers."""
    path = tmp_path / "hung-sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(16)
    yield path
    server.close()


def test_hung_host_times_out_without_holding_the_others(
    tmp_path: Path, silent_socket: Path
) -> None:
    good = write(tmp_path / "a.xml", vm_xml("web-1", "11111111-2222-4333-8444-000000000001"))
    hung = f"qemu+unix:///system?socket={silent_socket}"
    began = time.monotonic()
    snap = observe_cluster(
        cluster_of(("kvm-01", good), ("kvm-02", hung)),
        connect_timeout=0.5,
        call_timeout=0.5,
        sample_interval=0,
    )
    elapsed = time.monotonic() - began
    assert elapsed < 3, f"a hung host held the observer for {elapsed:.1f}s"
    ok, down = snap.hosts
    assert ok.reachable
    assert len(snap.vms) == 1
    assert not down.reachable
    assert "connect timeout" in (down.error or "")
    assert 0.4 < down.observe_seconds < 3


def test_json_round_trip(tmp_path: Path) -> None:
    cluster = write_node_files(tmp_path / "nodes", 3, 4)
    snap = observe_cluster(cluster, sample_interval=0, now=NOW)
    path = tmp_path / "snap.json"
    save_snapshot(snap, path)
    text = path.read_text()
    assert '"apiVersion": "placement/v1alpha1"' in text
    assert '"kind": "Snapshot"' in text
    assert '"takenAt"' in text
    assert '"inFlight"' in text
    loaded = load_snapshot(path)
    assert loaded == snap
    assert isinstance(loaded, Snapshot)


def test_shared_storage_of_the_cluster_makes_file_disks_migratable(tmp_path: Path) -> None:
    uuid = "11111111-2222-4333-8444-0000000000"
    uri = write(
        tmp_path / "a.xml",
        vm_xml("on-nfs", uuid + "01", extra=disk("file", "<source file='/mnt/nfs/a.img'/>", "vda")),
        vm_xml("local", uuid + "02", extra=disk("file", "<source file='/var/lib/b.img'/>", "vda")),
        vm_xml(
            "near-miss", uuid + "03", extra=disk("file", "<source file='/mnt/nfs2/c.img'/>", "vda")
        ),
        vm_xml(
            "network",
            uuid + "04",
            extra=disk("network", "<source protocol='rbd' name='pool/d'/>", "vda")
            + disk("network", "<source protocol='gluster' name='vol/e'/>", "vdb")
            + disk("network", "<source protocol='nbd' name='f'/>", "vdc"),
        ),
    )
    snap = observe_cluster(cluster_of(("kvm-01", uri), shared=["/mnt/nfs"]), sample_interval=0)
    verdict = {vm.name: [u.code for u in vm.unmigratable] for vm in snap.vms}
    assert verdict == {
        "on-nfs": [],
        "local": [UnmigratableReason.LOCAL_DISK],
        "near-miss": [UnmigratableReason.LOCAL_DISK],
        "network": [],
    }
    # without sharedStorage the NFS disk is local again; network disks never block
    bare = observe_cluster(cluster_of(("kvm-01", uri)), sample_interval=0)
    assert {vm.name for vm in bare.vms if vm.migratable} == {"network"}
    # an explicit prefix (the CLI's --shared-path) adds to the Cluster's
    more = observe_cluster(
        cluster_of(("kvm-01", uri), shared=["/mnt/nfs"]),
        sample_interval=0,
        shared_paths=["/var/lib"],
    )
    assert {vm.name for vm in more.vms if vm.migratable} == {"on-nfs", "local", "network"}


def test_settings_come_from_the_cluster_and_overrides_win() -> None:
    cluster = cluster_of(
        ("kvm-01", "test:///default"),
        shared=["/mnt/nfs"],
        observe=Observe(
            connect_timeout=timedelta(seconds=2),
            call_timeout=timedelta(seconds=3),
            sample_interval=timedelta(milliseconds=200),
            concurrency=7,
        ),
    )
    got = observe_settings(cluster)
    assert (got.connect_timeout, got.call_timeout, got.sample_interval) == (2, 3, 0.2)
    assert (got.shared_paths, got.concurrency) == (("/mnt/nfs",), 7)
    over = observe_settings(
        cluster,
        connect_timeout=1,
        call_timeout=4,
        sample_interval=0,
        shared_paths=["/srv", "/mnt/nfs"],
        concurrency=3,
    )
    assert (over.connect_timeout, over.call_timeout, over.sample_interval) == (1, 4, 0)
    assert (over.shared_paths, over.concurrency) == (("/mnt/nfs", "/srv"), 3)
    default = observe_settings(cluster_of(("kvm-01", "test:///default")))
    assert (default.connect_timeout, default.call_timeout, default.sample_interval) == (5, 10, 0.5)
    with pytest.raises(ConfigError, match="call timeout must be more than 0"):
        observe_settings(cluster, call_timeout=0)
    with pytest.raises(ConfigError, match="connect timeout"):
        observe_settings(cluster, connect_timeout=-1)


def test_a_call_deadline_does_not_count_local_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # this machine is slow to parse (busy), the host answers at once: the host is fine
    uri = write(tmp_path / "a.xml", vm_xml("web-1", "11111111-2222-4333-8444-000000000001"))
    slow_parse = observe_host._parse_vms

    def busy(*args: Any) -> Any:
        time.sleep(0.4)
        return slow_parse(*args)

    monkeypatch.setattr(observe_host, "_parse_vms", busy)
    snap = observe_cluster(cluster_of(("kvm-01", uri)), call_timeout=0.2, sample_interval=0)
    assert snap.hosts[0].reachable, snap.hosts[0].error
    assert [vm.name for vm in snap.vms] == ["web-1"]
    assert snap.hosts[0].observe_seconds < 0.4  # the host's own time, not ours


def test_a_host_hung_in_a_call_is_cut_off_at_the_call_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = write(tmp_path / "a.xml", vm_xml("web-1", "11111111-2222-4333-8444-000000000001"))
    hung_file = write(tmp_path / "b.xml", vm_xml("db-1", "11111111-2222-4333-8444-000000000002"))
    answer = libvirt.virConnect.getHostname

    def hangs(conn: libvirt.virConnect) -> str:
        if hung_file.removeprefix("test://") in conn.getURI():
            time.sleep(5)
        return str(answer(conn))

    monkeypatch.setattr(libvirt.virConnect, "getHostname", hangs)
    began = time.monotonic()
    snap = observe_cluster(
        cluster_of(("kvm-01", good), ("kvm-02", hung_file), ("kvm-03", good)),
        call_timeout=0.5,
        sample_interval=0,
        concurrency=1,
    )
    elapsed = time.monotonic() - began
    ok, down, also_ok = snap.hosts
    assert ok.reachable
    assert also_ok.reachable, "the stuck thread was not replaced"
    assert not down.reachable
    assert "did not answer getHostname within the call timeout of 0.5s" in (down.error or "")
    assert 0.5 <= down.observe_seconds < 2
    assert elapsed < 4, f"a hung call held the observer for {elapsed:.1f}s"
    assert sorted(vm.name for vm in snap.vms) == ["web-1", "web-1"]


def test_cpu_samples_are_two_sweeps_not_a_pause_per_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as for a driver whose counters move: the test driver's alone would take one sample
    monkeypatch.setattr(observe_host, "repeats_first_sample", lambda *_: False)
    cluster = write_node_files(tmp_path, 12, 2)
    began = time.monotonic()
    snap = observe_cluster(cluster, sample_interval=0.5, concurrency=1)
    elapsed = time.monotonic() - began
    assert all(h.reachable for h in snap.hosts)
    assert {h.libvirt_calls for h in snap.hosts} == {14 + 2}  # both sweeps were made
    # one thread sleeping 0.5 s per host would need 6 s
    assert elapsed < 4, f"{elapsed:.1f}s: the sample interval was waited per host"


def test_the_test_driver_cpu_figures_are_fixed_so_one_sample_tells_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the premise of one sample per test-driver host: its counters do not move and its
    # domains report no CPU time, so a second sample gives exactly the first's answers
    cluster = write_node_files(tmp_path / "nodes", 3, 4)
    conn = libvirt.open(cluster.spec.hosts[0].uri)
    try:
        before = conn.getCPUStats(libvirt.VIR_NODE_CPU_STATS_ALL_CPUS, 0)
        records = conn.getAllDomainStats(0, 0)
        time.sleep(0.05)
        assert conn.getCPUStats(libvirt.VIR_NODE_CPU_STATS_ALL_CPUS, 0) == before
        assert records
        assert not any("cpu.time" in stats for _, stats in records)
        assert observe_host.repeats_first_sample(conn.getURI(), records)
    finally:
        conn.close()
    one = observe_cluster(cluster, sample_interval=0.05, now=NOW)
    monkeypatch.setattr(observe_host, "repeats_first_sample", lambda *_: False)
    two = observe_cluster(cluster, sample_interval=0.05, now=NOW)

    def shape(snap: Snapshot) -> Any:
        hosts = [h.model_dump(exclude={"observe_seconds", "libvirt_calls"}) for h in snap.hosts]
        return hosts, [vm.model_dump() for vm in snap.vms]

    assert shape(one) == shape(two)
    assert {h.libvirt_calls for h in one.hosts} == {11 + 4}
    assert {h.libvirt_calls for h in two.hosts} == {14 + 4}
    # a host whose VMs report CPU time gets its second sample, in this process or not
    timed = [(None, {"state.state": 1, "cpu.time": 5})]
    assert not observe_host.repeats_first_sample("test:///default", timed)
    assert not observe_host.repeats_first_sample("qemu:///system", [])


def test_processes_give_the_same_snapshot(tmp_path: Path) -> None:
    cluster = write_node_files(tmp_path / "nodes", 7, 3)
    one = observe_cluster(cluster, sample_interval=0, processes=1, now=NOW)
    three = observe_cluster(cluster, sample_interval=0, processes=3, concurrency=3, now=NOW)

    def shape(snap: Snapshot) -> Any:
        hosts = [h.model_dump(exclude={"observe_seconds", "cpu_utilisation"}) for h in snap.hosts]
        return hosts, [vm.model_dump(exclude={"cpu_used"}) for vm in snap.vms]

    assert shape(three) == shape(one)
    assert len(three.vms) == 21


@pytest.mark.parametrize(
    ("uri", "remote"),
    [
        ("test:///tmp/node.xml", False),
        ("qemu:///system", False),
        ("qemu+unix:///system?socket=/run/x", True),
        ("qemu+ssh://root@kvm-01/system", True),
        ("qemu+tls://kvm-01.example.net/system", True),
        ("qemu://kvm-01/system", True),
    ],
)
def test_keepalive_only_on_connections_that_cross_a_socket(uri: str, remote: bool) -> None:
    assert observe_host._is_remote(uri) is remote


def test_values_that_make_no_valid_model_make_the_host_unreachable() -> None:
    good: RawVm = (
        "web-1", "11111111-2222-4333-8444-000000000001", 1, 1, True, 2, 1 << 30, 1 << 30,
        0.5, None, {"app": "web"}, ReconcilerState(), [], None, [], None,
        MigrationClass.SHARED, ["no disks"], 3 << 20,
    )  # fmt: skip
    bad = (*good[:6], -1024, *good[7:])  # a negative size, say from a domain XML
    facts = {"cpus": 4, "memory_total": 8 << 30}
    host, vms = host_result(("kvm-01", "test:///x", facts, 12.5, None, 40, 0.01, [good], None))
    assert host.reachable
    assert (host.cpu_utilisation, host.libvirt_calls, host.cpus) == (12.5, 40, 4)
    assert [(vm.name, vm.state, vm.state_reason, vm.host, vm.dirty_rate) for vm, _, _ in vms] == [
        ("web-1", VmRunState.RUNNING, "booted", "kvm-01", 3 << 20)
    ]
    host, vms = host_result(("kvm-01", "test:///x", facts, 12.5, None, 40, 0.01, [good, bad], None))
    assert not host.reachable
    assert vms == []
    assert "observing test:///x failed" in (host.error or "")
    assert host.libvirt_calls == 40


def test_test_driver_hosts_share_one_thread_socket_hosts_get_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the test driver runs in this process: a second thread would only contend for the GIL
    running: list[int] = [0]
    most: list[int] = [0]
    first_sweep = observe_host.first_sweep

    def counted(probe: observe_host.Probe) -> None:
        running[0] += 1
        most[0] = max(most[0], running[0])
        try:
            time.sleep(0.05)
            first_sweep(probe)
        finally:
            running[0] -= 1

    monkeypatch.setattr(observe_pool, "first_sweep", counted)
    cluster = write_node_files(tmp_path / "nodes", 6, 1)
    snap = observe_cluster(cluster, sample_interval=0, concurrency=4, processes=1)
    assert all(h.reachable for h in snap.hosts)
    assert most[0] == 1
    missing = [
        Host(name=f"gone-{i}", uri=f"qemu+unix:///system?socket={tmp_path}/none-{i}")
        for i in range(3)
    ]
    spec = cluster.spec.model_copy(update={"hosts": [*cluster.spec.hosts, *missing]})
    mixed = cluster.model_copy(update={"spec": spec})
    most[0] = 0
    snap = observe_cluster(mixed, sample_interval=0, concurrency=4, processes=1)
    assert [h.reachable for h in snap.hosts] == [True] * 6 + [False] * 3
    assert most[0] > 1


def test_worker_processes_only_for_cores_this_process_may_run_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    allowed = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(allowed)})
        assert libvirt_observer._usable_cores() == 1
    finally:
        os.sched_setaffinity(0, allowed)
    assert libvirt_observer._usable_cores() == len(allowed)
    started: list[object] = []
    popen = subprocess.Popen

    def counted(*args: Any, **kwargs: Any) -> Any:
        started.append(args)
        return popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", counted)
    monkeypatch.setattr(libvirt_observer, "HOSTS_PER_PROCESS", 2)
    cluster = write_node_files(tmp_path / "nodes", 4, 1)
    monkeypatch.setattr(libvirt_observer, "_usable_cores", lambda: 1)
    one = observe_cluster(cluster, sample_interval=0)
    assert started == []  # one core: no second process to time-share it
    monkeypatch.setattr(libvirt_observer, "_usable_cores", lambda: 2)
    two = observe_cluster(cluster, sample_interval=0)
    assert len(started) == 1
    assert [vm.name for vm in one.vms] == [vm.name for vm in two.vms]


def test_the_worker_process_imports_this_package_whatever_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = write_node_files(tmp_path / "nodes", 2, 1)
    other = tmp_path / "elsewhere" / "reconciler"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("raise ImportError('another reconciler package')\n")
    monkeypatch.chdir(other.parent)
    snap = observe_cluster(cluster, sample_interval=0, processes=2)
    assert all(h.reachable for h in snap.hosts), [h.error for h in snap.hosts]


CHILD_THAT_DIES = """
import pickle, sys
hosts, settings, threads = pickle.load(sys.stdin.buffer)
name, uri = hosts[0]
facts = {"cpus": 4, "memory_total": 8 << 30}
pickle.dump((name, uri, facts, None, None, 1, 0.0, [], None), sys.stdout.buffer)
sys.stdout.buffer.flush()
sys.exit(3)
"""


def test_a_worker_that_dies_midway_loses_only_the_hosts_it_did_not_send(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = write_node_files(tmp_path / "nodes", 6, 1)
    popen = subprocess.Popen

    def dying(args: list[str], **kwargs: Any) -> Any:
        return popen([args[0], "-c", CHILD_THAT_DIES], **kwargs)

    monkeypatch.setattr(subprocess, "Popen", dying)
    snap = observe_cluster(cluster, sample_interval=0, processes=2)
    # hosts 0, 2, 4 here; 1, 3, 5 in the worker, which sent host 1 and ended
    assert [h.reachable for h in snap.hosts] == [True, True, True, False, True, False]
    lost = snap.hosts[3]
    assert "ended without a result (exit 3)" in (lost.error or "")
    assert snap.hosts[1].cpus == 4  # as the worker sent it
    assert sorted(vm.host for vm in snap.vms) == ["node-000", "node-002", "node-004"]
