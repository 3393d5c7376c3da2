"""The lab: its layout, its requirement checks, the test-driver lab, and the real lab."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from reconciler.adapters import lab as lab_api
from reconciler.adapters.lab import Lab, lab_layout, qemu
from reconciler.adapters.libvirt.observer import observe_cluster
from reconciler.config import load_desired
from reconciler.errors import LabError
from reconciler.model.cluster import Cluster
from reconciler.model.snapshot import Snapshot
from tests.lab_fixtures import start_lab_or_skip


def test_default_layout_is_unbalanced() -> None:
    vms = lab_layout(3, 8)
    assert [v.name for v in vms] == [
        "web-1", "web-2", "web-3", "db-1", "db-2", "app-1", "cache-1", "erp",
    ]  # fmt: skip
    per_host = {h: [v.name for v in vms if v.host == h] for h in ("kvm-01", "kvm-02", "kvm-03")}
    assert len(per_host["kvm-01"]) == 6
    assert per_host["kvm-03"] == ["erp"]
    assert {v.host for v in vms if v.name.startswith("db-")} == {"kvm-01", "kvm-02"}
    assert {v.labels.get("app") for v in vms if v.name.startswith("web")} == {"web"}
    assert {v.labels.get("role") for v in vms if v.name.startswith("db")} == {"db"}
    assert all(64 <= v.memory_mib <= 256 and v.vcpus in (1, 2) for v in vms)
    assert len({v.uuid for v in vms}) == 8


def test_more_vms_are_numbered() -> None:
    vms = lab_layout(4, 12)
    assert [v.name for v in vms[8:]] == ["vm-09", "vm-10", "vm-11", "vm-12"]
    assert all(64 <= v.memory_mib <= 256 for v in vms)
    assert lab_layout(1, 3) == [v for v in lab_layout(1, 3) if v.host == "kvm-01"]


def test_not_root_says_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(LabError, match="root") as info:
        lab_api.check_requirements()
    assert "--driver test" in (info.value.hint or "")


@pytest.mark.parametrize(
    ("missing", "package"),
    [
        ("libvirtd", "libvirt-daemon"),
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("unshare", "util-linux"),
    ],
)
def test_missing_binary_names_the_package(
    monkeypatch: pytest.MonkeyPatch, missing: str, package: str
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    real = qemu._which
    monkeypatch.setattr(
        qemu, "_which", lambda name, *extra: None if name == missing else real(name, *extra)
    )
    if missing != "libvirtd" and real("libvirtd", "/usr/sbin") is None:
        pytest.skip("libvirtd is missing here too")
    with pytest.raises(LabError, match=missing) as info:
        lab_api.check_requirements()
    assert package in (info.value.hint or "")


def test_lab_error_becomes_a_visible_skip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def refuse(*_: object, **__: object) -> Lab:
        raise LabError("no libvirtd here", hint="apt-get install libvirt-daemon")

    monkeypatch.setattr(lab_api, "start_lab", refuse)
    with pytest.raises(pytest.skip.Exception, match="no libvirtd here.*apt-get install"):
        start_lab_or_skip(tmp_path / "lab")


def test_too_deep_a_folder_is_refused(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 90)
    with pytest.raises(LabError, match="too deep|root|not installed"):
        lab_api.start_lab(deep)
    assert not (deep / "lab.json").exists()


def test_test_driver_lab_up_status_down(tmp_path: Path) -> None:
    directory = tmp_path / "lab"
    lab = lab_api.start_lab(directory, driver="test")
    assert lab.driver == "test"
    assert not lab.already_up
    desired = load_desired(lab.cluster_dir)
    assert desired.cluster.metadata.name == "lab"
    assert [h.uri for h in desired.cluster.spec.hosts] == [
        f"test://{directory}/hosts/kvm-0{i}.xml" for i in (1, 2, 3)
    ]
    policy = desired.policy.spec
    assert (policy.basis, policy.hold_rounds, policy.min_uptime.total_seconds()) == (
        "allocated",
        1,
        0,
    )
    assert "<memballoon model='virtio'/>" in Path(lab.hosts[0].path).read_text()
    again = lab_api.start_lab(directory, driver="test")
    assert again.already_up
    status = lab_api.lab_status(directory)
    assert all(h.up for h in status.hosts)
    assert sorted(v.name for v in status.vms) == sorted(v.name for v in lab.vms)
    snap = observe_cluster(desired.cluster, sample_interval=0)
    assert {(v.name, v.host) for v in snap.vms} == {(v.name, v.host) for v in lab.vms}
    assert {str(v.name): v.labels for v in snap.vms}["db-1"] == {"role": "db"}
    lab_api.stop_lab(directory)
    assert not directory.exists()
    with pytest.raises(LabError, match="no lab"):
        lab_api.lab_status(directory)


def test_folder_that_is_not_a_lab_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep")
    with pytest.raises(LabError, match="not a lab folder"):
        lab_api.start_lab(tmp_path, driver="test")
    assert (tmp_path / "precious.txt").exists()


def test_policy_overrides_say_why_and_keep_other_comments() -> None:
    text = "kind: BalancePolicy\nspec:\n  basis: used   # how\n  threshold: 20  # when\n"
    out = lab_api.lab_policy_text(text)
    lines = out.splitlines()
    assert lines[0:2] == ["kind: BalancePolicy", "spec:"]
    assert "  threshold: 20  # when" in lines
    by_key = {line.split(":")[0].strip(): line for line in lines[2:]}
    assert by_key["basis"].startswith("  basis: allocated # lab: ")
    assert "# how" not in out
    assert by_key["holdRounds"].startswith("  holdRounds: 1  # lab: one round, to demonstrate")
    assert "keep 2 on real hosts" in by_key["holdRounds"]
    assert by_key["minUptime"].startswith("  minUptime: 0s  # lab: ")
    data = yaml.safe_load(out)
    assert data["spec"] == {
        "basis": "allocated",
        "holdRounds": 1,
        "minUptime": "0s",
        "threshold": 20,
    }


@pytest.mark.lab
def test_lab_runs_real_vms(lab: Lab, lab_cluster: Cluster) -> None:
    assert lab.driver == "qemu"
    assert lab.virt_type in ("kvm", "qemu")
    snap = observe_cluster(lab_cluster, sample_interval=0.3)
    assert all(h.reachable for h in snap.hosts), [h.error for h in snap.hosts]
    assert len({h.uuid for h in snap.hosts}) == 3
    assert all(h.arch == "x86_64" and h.cpu_model for h in snap.hosts)
    assert all(h.memory_free is not None and h.memory_free > 0 for h in snap.hosts)
    assert {(v.name, v.host) for v in snap.vms} == {(v.name, v.host) for v in lab.vms}
    assert not snap.in_flight
    for vm in snap.vms:
        assert vm.state == "running"
        assert vm.state_reason == "booted"
        assert vm.cpu_used is not None
        assert vm.memory_used is not None
        assert vm.memory_used > 1 << 20
        assert vm.memory_max == {v.name: v.memory_mib for v in lab.vms}[vm.name] << 20
        assert vm.migratable, vm.unmigratable
    assert {str(v.name): v.labels for v in snap.vms}["web-2"] == {"app": "web"}
    # a handful of bulk calls per host, plus one XMLDesc and one dirty rate calculation per
    # running VM, whose result the second sweep reads
    for host in snap.hosts:
        count = sum(1 for v in snap.vms if v.host == host.name)
        assert host.libvirt_calls == 14 + 2 * count
    # each VM's dirty rate is measured by QEMU over a second; on a machine too busy to let it
    # finish before the second sweep, the next observation reads it
    measured = {vm.name for vm in snap.vms if vm.dirty_rate is not None}
    for _ in range(3):
        if measured == {vm.name for vm in snap.vms}:
            break
        again = observe_cluster(lab_cluster, sample_interval=0.3)
        measured |= {vm.name for vm in again.vms if vm.dirty_rate is not None}
    assert measured == {vm.name for vm in snap.vms}


@pytest.mark.lab
def test_a_look_without_cpu_samples_sees_the_same_and_asks_for_no_cpu(
    lab: Lab, lab_cluster: Cluster
) -> None:
    full = observe_cluster(lab_cluster, sample_interval=0)
    quick = observe_cluster(lab_cluster, sample_interval=0, cpu_samples=False)

    def seen(snap: Snapshot) -> set[tuple[object, ...]]:
        return {
            (
                v.name,
                v.host,
                v.uuid,
                v.state,
                v.vcpus,
                v.memory_max,
                v.memory_current,
                v.persistent,
                v.migratable,
                tuple(sorted(v.labels.items())),
            )
            for v in snap.vms
        }

    assert seen(quick) == seen(full)
    assert {v.name for v in quick.vms} == {v.name for v in lab.vms}
    # no CPU figure at all: neither sample was taken, so none can be made up
    assert all(v.cpu_used is None for v in quick.vms)
    assert all(v.cpu_used is not None for v in full.vms)
    assert all(h.cpu_utilisation is None for h in quick.hosts)
    # one sweep: neither getCPUStats nor the second getAllDomainStats (with the interval 0
    # of both, no dirty rate calculation is started by either)
    full_calls = {h.name: h.libvirt_calls for h in full.hosts}
    assert {h.name: h.libvirt_calls + 3 for h in quick.hosts} == full_calls


@pytest.mark.lab
def test_lab_status_and_second_up(lab: Lab) -> None:
    directory = Path(lab.dir)
    status = lab_api.lab_status(directory)
    assert [h.up for h in status.hosts] == [True, True, True]
    assert all(h.pid for h in status.hosts)
    assert sorted((v.name, v.state) for v in status.vms) == sorted(
        (v.name, "running") for v in lab.vms
    )
    assert lab_api.start_lab(directory).already_up


def test_a_workload_lab_balances_on_what_its_guests_use_read_from_its_prometheus(
    tmp_path: Path,
) -> None:
    from dataclasses import replace

    from reconciler.adapters.lab.cluster_folder import write_cluster_state

    lab = lab_api.start_lab(tmp_path / "lab", driver="test", hosts=3, vms=4)
    try:
        plain = load_desired(lab.cluster_dir).policy.spec
        assert plain.basis.value == "allocated"
        guests = replace(lab, workloads={"web-1": {"cpu": 30}}, prometheus_port=9)
        write_cluster_state(guests)
        desired = load_desired(lab.cluster_dir)
        spec = desired.policy.spec
        assert spec.basis.value == "used"
        assert spec.load.source.value == "prometheus"
        assert spec.load.prometheus is not None
        assert spec.load.prometheus.url == "http://127.0.0.1:9"
        assert spec.load.window.total_seconds() == 60
        text = (lab.cluster_dir / "policy.yaml").read_text()
        assert "basis: used            # lab: its workload guests burn real CPU" in text
        # without a Prometheus, the guests' load is sampled by run itself
        write_cluster_state(replace(guests, prometheus_port=0))
        spec = load_desired(lab.cluster_dir).policy.spec
        assert (spec.basis.value, spec.load.source.value) == ("used", "samples")
    finally:
        lab_api.stop_lab(tmp_path / "lab")
