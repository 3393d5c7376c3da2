"""The libvirt migrator on the real lab: live migrations, refusals, aborts, timeouts and faults.

Every test migrates a VM of its own (defined here, removed afterwards), so the session lab's
VMs stay where the other tests expect them. The fault tests kill or freeze a libvirtd, so they
run on a private two-host lab that is stopped at the end of the module.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import libvirt
import pytest

from reconciler.adapters import lab as libvirt_lab
from reconciler.adapters.lab import Lab, LabVm, qemu
from reconciler.adapters.libvirt.calls import migration_call
from reconciler.adapters.libvirt.connection import ConnectionSettings
from reconciler.adapters.libvirt.domain_metadata import (
    METADATA_KEY,
    METADATA_NS,
    parse_metadata,
    render_metadata,
)
from reconciler.adapters.libvirt.migrator import LibvirtMigrator
from reconciler.config import load_desired
from reconciler.model.base import HostName, VmName
from reconciler.model.cluster import Migration
from reconciler.model.desired import DesiredState
from reconciler.model.migration import MigrationProgress, MigrationResult
from reconciler.model.plan import Move, Reason
from reconciler.model.snapshot import ReconcilerState
from tests.lab_fixtures import start_lab_or_skip, stop_and_check

pytestmark = pytest.mark.lab

LABELS = {"app": "mig", "team": "ops"}
STATE = ReconcilerState(
    first_seen=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC), moves=1, last_moved_from="kvm-03"
)
_names = itertools.count(1)
FAST = ConnectionSettings(connect_timeout=3.0, keepalive_interval=1, keepalive_count=2)


# --- helpers --------------------------------------------------------------------------------


def tuned(
    desired: DesiredState, *, per_gib: float = 60.0, stall: float = 20.0, **hosts: Any
) -> DesiredState:
    """``desired`` with these migration timeouts, and host fields replaced by name."""
    spec = desired.policy.spec
    migration = spec.migration.model_copy(
        update={
            "timeout_per_gib": timedelta(seconds=per_gib),
            "progress_timeout": timedelta(seconds=stall),
        }
    )
    policy = desired.policy.model_copy(
        update={"spec": spec.model_copy(update={"migration": migration})}
    )
    cluster = desired.cluster
    if hosts:
        new_hosts = [
            h.model_copy(update=hosts[h.name.replace("-", "_")])
            if h.name.replace("-", "_") in hosts
            else h
            for h in cluster.spec.hosts
        ]
        cluster = cluster.model_copy(
            update={"spec": cluster.spec.model_copy(update={"hosts": new_hosts})}
        )
    return desired.model_copy(update={"policy": policy, "cluster": cluster})


def conn_of(lab: Lab, host: str) -> Any:
    return libvirt.open(next(h.uri for h in lab.hosts if h.name == host))


def start_vm(lab: Lab, host: str) -> LabVm:
    """A fresh tiny VM of this test on ``host``, with labels and a reconciler state."""
    vm = LabVm(f"mig-{os.getpid() % 1000}-{next(_names)}", host, 64, 1, dict(LABELS))
    conn = conn_of(lab, host)
    try:
        dom = conn.defineXML(libvirt_lab.domain_xml(vm, lab.virt_type))
        dom.setMetadata(
            libvirt.VIR_DOMAIN_METADATA_ELEMENT,
            render_metadata(LABELS, STATE, for_set_metadata=True),
            METADATA_KEY,
            METADATA_NS,
            libvirt.VIR_DOMAIN_AFFECT_CONFIG,
        )
        dom.create()
    finally:
        conn.close()
    return vm


def remove_vm(lab: Lab, name: str) -> None:
    for host in lab.hosts:
        with contextlib.suppress(libvirt.libvirtError):
            conn = conn_of(lab, host.name)
            try:
                for dom in conn.listAllDomains(0):
                    if dom.name() == name:
                        with contextlib.suppress(libvirt.libvirtError):
                            dom.destroy()
                        with contextlib.suppress(libvirt.libvirtError):
                            dom.undefine()
            finally:
                conn.close()


def where(lab: Lab, uuid: str) -> dict[str, tuple[bool, int, bool]]:
    """(active, state, persistent) of the domain ``uuid`` on each host that has it."""
    seen = {}
    for host in lab.hosts:
        conn = conn_of(lab, host.name)
        try:
            with contextlib.suppress(libvirt.libvirtError):
                dom = conn.lookupByUUIDString(uuid)
                seen[host.name] = (bool(dom.isActive()), dom.state()[0], bool(dom.isPersistent()))
        finally:
            conn.close()
    return seen


def assert_runs_once_on(lab: Lab, uuid: str, host: str) -> None:
    """The VM runs on ``host`` only, not paused, and is defined (persistent) there only."""
    assert where(lab, uuid) == {host: (True, libvirt.VIR_DOMAIN_RUNNING, True)}


def move(vm: LabVm, source: str, target: str) -> Move:
    return Move(
        vm=VmName(vm.name),
        source=HostName(source),
        target=HostName(target),
        memory=vm.memory_mib * 1024**2,
        vcpus=vm.vcpus,
        reason=Reason.BALANCE,
        detail="test",
        wave=0,
    )


def migrate(
    migrator: LibvirtMigrator,
    mv: Move,
    *,
    abort: threading.Event | None = None,
    hook: Any = None,
) -> tuple[MigrationResult, list[MigrationProgress]]:
    seen: list[MigrationProgress] = []

    def on_progress(p: MigrationProgress) -> None:
        seen.append(p)
        if hook is not None:
            hook(p)

    result = migrator.migrate(mv, on_progress=on_progress, abort=abort or threading.Event())
    return result, seen


def migration_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(("migrate ", "libvirt-open"))]


# --- on the shared lab ----------------------------------------------------------------------


@pytest.fixture
def desired(lab: Lab) -> DesiredState:
    return tuned(load_desired(lab.cluster_dir))


@pytest.fixture
def vm(lab: Lab) -> Iterator[LabVm]:
    started = start_vm(lab, "kvm-01")
    try:
        yield started
    finally:
        remove_vm(lab, started.name)


def test_live_migration_moves_the_vm_with_its_identity_and_metadata(
    lab: Lab, desired: DesiredState, vm: LabVm
) -> None:
    result, progress = migrate(LibvirtMigrator(desired), move(vm, "kvm-01", "kvm-02"))

    assert result.succeeded, result
    assert not result.aborted
    assert result.error is None
    assert result.running_on == ["kvm-02"]
    assert result.paused_on == []
    assert_runs_once_on(lab, vm.uuid, "kvm-02")
    conn = conn_of(lab, "kvm-02")
    try:
        dom = conn.lookupByName(vm.name)
        assert dom.UUIDString() == vm.uuid
        for flags in (0, libvirt.VIR_DOMAIN_XML_INACTIVE):
            kept = parse_metadata(dom.XMLDesc(flags))
            assert kept.labels == LABELS
            assert kept.state == STATE
    finally:
        conn.close()
    assert progress
    assert all(p.vm == vm.name for p in progress)
    assert [p.elapsed for p in progress] == sorted(p.elapsed for p in progress)
    assert result.data_bytes is not None
    assert result.data_bytes > 0
    assert result.downtime_ms is not None
    assert result.downtime_ms >= 0
    assert 0 < result.seconds < 30
    assert not migration_threads()


def test_a_target_that_cannot_be_reached_leaves_the_vm_running_on_the_source(
    lab: Lab, desired: DesiredState, vm: LabVm
) -> None:
    broken = "qemu+unix:///system?socket=/nonexistent/libvirt-sock"
    bad = tuned(desired, kvm_02={"uri": broken})
    result, _ = migrate(LibvirtMigrator(bad, connection=FAST), move(vm, "kvm-01", "kvm-02"))

    assert not result.succeeded
    assert not result.aborted
    assert result.error is not None
    assert "kvm-02 unreachable" in result.error
    assert result.running_on == ["kvm-01"]
    assert result.paused_on == []
    assert_runs_once_on(lab, vm.uuid, "kvm-01")


def test_libvirt_refusing_the_migration_is_a_failed_result(
    lab: Lab, desired: DesiredState, vm: LabVm
) -> None:
    # another domain of the same name already defined on the target: libvirt refuses
    other = LabVm(vm.name, "kvm-02", 64, 1, {})
    other_uuid = "0f0f0f0f-1111-2222-3333-444455556666"
    conn = conn_of(lab, "kvm-02")
    xml = libvirt_lab.domain_xml(other, lab.virt_type).replace(other.uuid, other_uuid)
    conn.defineXML(xml)
    conn.close()

    result, _ = migrate(LibvirtMigrator(desired), move(vm, "kvm-01", "kvm-02"))

    assert not result.succeeded
    assert not result.aborted
    assert result.error is not None
    assert result.error.startswith("libvirt:")
    assert result.running_on == ["kvm-01"]
    assert result.paused_on == []
    assert_runs_once_on(lab, vm.uuid, "kvm-01")
    assert where(lab, other_uuid) == {"kvm-02": (False, libvirt.VIR_DOMAIN_SHUTOFF, True)}


ATTEMPTS = 4
"""A tiny VM may switch over before an abort takes effect on a busy machine: the migrator then
truthfully reports a success. The abort tests move such a VM back and try again, and fail when
no attempt was aborted."""


def aborted_attempt(
    lab: Lab, desired: DesiredState, vm: LabVm, attempt: Callable[[], MigrationResult]
) -> MigrationResult:
    """The first result of ``attempt`` that was aborted; a lost race must be told truthfully."""
    for _ in range(ATTEMPTS):
        result = attempt()
        if result.aborted:
            return result
        # the switch-over won the race: the result says so and the VM runs once, on the target
        assert result.succeeded, result
        assert result.running_on == ["kvm-02"]
        assert_runs_once_on(lab, vm.uuid, "kvm-02")
        back, _ = migrate(LibvirtMigrator(desired), move(vm, "kvm-02", "kvm-01"))
        assert back.succeeded, back
    raise AssertionError(f"no migration was aborted in {ATTEMPTS} attempts")


def test_setting_abort_stops_the_migration_and_the_vm_runs_on_the_source(
    lab: Lab, desired: DesiredState, vm: LabVm
) -> None:
    slow = {"migration": Migration(bandwidth=1)}  # 1 MiB/s: the abort usually comes first

    def attempt() -> MigrationResult:
        # asked to stop 50 ms after the start: seen at the job's first poll
        abort = threading.Event()
        timer = threading.Timer(0.05, abort.set)
        timer.start()
        try:
            result, _ = migrate(
                LibvirtMigrator(tuned(desired, kvm_02=slow)),
                move(vm, "kvm-01", "kvm-02"),
                abort=abort,
            )
        finally:
            timer.cancel()
        return result

    result = aborted_attempt(lab, desired, vm, attempt)
    assert not result.succeeded
    assert result.error is not None
    assert "stopped on request" in result.error
    assert result.running_on == ["kvm-01"]
    assert result.paused_on == []
    assert_runs_once_on(lab, vm.uuid, "kvm-01")
    assert not migration_threads()


def test_a_migration_past_its_time_limit_is_aborted(
    lab: Lab, desired: DesiredState, vm: LabVm
) -> None:
    # 0.3 s per GiB: a 64 MiB VM (1 GiB rounded up) may take 0.3 s; at 1 MiB/s it takes longer
    slow = {"migration": Migration(bandwidth=1)}
    limited = tuned(desired, per_gib=0.3, kvm_02=slow)
    result = aborted_attempt(
        lab,
        desired,
        vm,
        lambda: migrate(LibvirtMigrator(limited), move(vm, "kvm-01", "kvm-02"))[0],
    )
    assert not result.succeeded
    assert result.error is not None
    assert "ran past its limit of 0.3s" in result.error
    assert result.running_on == ["kvm-01"]
    assert result.paused_on == []
    assert_runs_once_on(lab, vm.uuid, "kvm-01")


def test_migration_parameters_follow_the_cluster_and_the_policy(desired: DesiredState) -> None:
    target = next(h for h in desired.cluster.spec.hosts if h.name == "kvm-02")
    call = migration_call(desired, target)
    assert call.dest_uri == target.uri
    assert call.params[libvirt.VIR_MIGRATE_PARAM_URI] == "tcp://127.0.0.1"
    assert call.params[libvirt.VIR_MIGRATE_PARAM_LISTEN_ADDRESS] == "127.0.0.1"
    assert libvirt.VIR_MIGRATE_PARAM_BANDWIDTH not in call.params
    assert not call.flags & (libvirt.VIR_MIGRATE_AUTO_CONVERGE | libvirt.VIR_MIGRATE_POSTCOPY)

    named = target.model_copy(
        update={
            "address": None,
            "migration": target.migration.model_copy(
                update={"uri": "tcp://{name}.migration", "bandwidth": 50}
            ),
        }
    )
    spec = desired.policy.spec
    policy = desired.policy.model_copy(
        update={
            "spec": spec.model_copy(
                update={
                    "migration": spec.migration.model_copy(
                        update={"auto_converge": True, "post_copy": True}
                    )
                }
            )
        }
    )
    call = migration_call(desired.model_copy(update={"policy": policy}), named)
    assert call.params == {
        libvirt.VIR_MIGRATE_PARAM_URI: "tcp://kvm-02.migration",
        libvirt.VIR_MIGRATE_PARAM_BANDWIDTH: 50,
        # after a switch to post-copy the same limit, not QEMU's default of none
        libvirt.VIR_MIGRATE_PARAM_BANDWIDTH_POSTCOPY: 50,
    }
    assert call.flags & libvirt.VIR_MIGRATE_AUTO_CONVERGE
    assert call.flags & libvirt.VIR_MIGRATE_POSTCOPY


# --- faults, on a private lab ---------------------------------------------------------------


@pytest.fixture(scope="module")
def fault_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    directory = tmp_path_factory.mktemp("faults") / "lab"
    started = start_lab_or_skip(directory, hosts=2, vms=0)
    try:
        yield started
    finally:
        for host in started.hosts:  # a frozen daemon would not stop
            with contextlib.suppress(Exception):
                libvirt_lab.thaw_host(directory, host.name)
        stop_and_check(directory)


def _daemon_pid(lab: Lab, host: str) -> int | None:
    return qemu.daemon_pid(next(h for h in lab.hosts if h.name == host))


def _settles_on(lab: Lab, uuid: str, host: str, timeout: float = 20.0) -> None:
    """Wait for libvirt's own recovery (a restarted daemon kills a half-received VM)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            assert_runs_once_on(lab, uuid, host)
            return
        except (AssertionError, libvirt.libvirtError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_target_libvirtd_killed_mid_migration(fault_lab: Lab) -> None:
    lab = fault_lab
    vm = start_vm(lab, "kvm-01")
    desired = tuned(load_desired(lab.cluster_dir))
    pid = _daemon_pid(lab, "kvm-02")
    assert pid is not None
    killed: list[int] = []

    def kill(_: MigrationProgress) -> None:
        if not killed:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    try:
        result, _ = migrate(
            LibvirtMigrator(desired, connection=FAST), move(vm, "kvm-01", "kvm-02"), hook=kill
        )
        assert killed
        assert not result.succeeded
        assert result.running_on == ["kvm-01"]
        assert result.paused_on == []
        assert result.error is not None
        assert "kvm-02" in result.error
    finally:
        with contextlib.suppress(Exception):
            libvirt_lab.start_host(Path(lab.dir), "kvm-02")
    _settles_on(lab, vm.uuid, "kvm-01")
    assert not migration_threads()
    remove_vm(lab, vm.name)


def test_hung_target_is_cut_off_by_the_progress_timeout(fault_lab: Lab) -> None:
    lab = fault_lab
    vm = start_vm(lab, "kvm-01")
    desired = tuned(load_desired(lab.cluster_dir), stall=1.0)
    pid = _daemon_pid(lab, "kvm-02")
    assert pid is not None
    frozen: list[int] = []

    def freeze(_: MigrationProgress) -> None:
        if not frozen:
            os.kill(pid, signal.SIGSTOP)
            frozen.append(pid)

    # libvirt cannot abort a job waiting on the frozen target: stop waiting for it after 3 s
    migrator = LibvirtMigrator(desired, connection=FAST, settle_timeout=3.0)
    began = time.monotonic()
    try:
        result, _ = migrate(migrator, move(vm, "kvm-01", "kvm-02"), hook=freeze)
        took = time.monotonic() - began
        assert frozen
        assert result.aborted
        assert not result.succeeded
        assert result.error is not None
        assert "no progress for 1s" in result.error
        assert result.running_on == ["kvm-01"]
        assert result.paused_on == []
        assert took < 15
    finally:
        os.kill(pid, signal.SIGCONT)
    # thawed, the target answers; the source's job sees its abort and ends
    deadline = time.monotonic() + 20
    while migration_threads() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not migration_threads()
    _settles_on(lab, vm.uuid, "kvm-01")
    remove_vm(lab, vm.name)
