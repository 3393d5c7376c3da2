"""Hosts that would refuse a VM, asked of libvirt while observing: CPU and machine type.

Fakes stand in where libvirt's test driver has no such calls; the real daemons of a lab answer
the questions the fakes cannot vouch for."""

from __future__ import annotations

import contextlib
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from reconciler.adapters.lab import Lab
from reconciler.adapters.libvirt.compatibility import (
    Candidate,
    Compatibility,
    Needs,
    needs_of,
)
from reconciler.adapters.libvirt.pool import ConnectionPool
from tests.adapters.test_migrator_watch import error
from tests.lab_fixtures import start_lab_or_skip, stop_and_check

MIB = 1024**2
DOMAIN = """<domain type='kvm'><name>a</name><memory unit='GiB'>4</memory>
<os><type arch='x86_64' machine='pc-q35-7.2'>hvm</type></os>{cpu}{backing}
<devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices></domain>"""


class FakeConn:
    """Answers the questions as told; counts what it was asked."""

    def __init__(
        self,
        *,
        cpu: int | libvirt.libvirtError = libvirt.VIR_CPU_COMPARE_IDENTICAL,
        machines: tuple[str, ...] = ("pc-q35-7.2",),
        free_pages: int = 0,
        hang: float = 0.0,
    ) -> None:
        self.cpu, self.machines, self.free_pages, self.hang = cpu, machines, free_pages, hang
        self.asked: list[str] = []

    def compareHypervisorCPU(self, *args: Any) -> int:  # noqa: N802 - libvirt's name
        self.asked.append("cpu")
        time.sleep(self.hang)
        if isinstance(self.cpu, libvirt.libvirtError):
            raise self.cpu
        return self.cpu

    def getDomainCapabilities(self, emulator: Any, arch: Any, machine: Any, *_: Any) -> str:  # noqa: N802
        self.asked.append("caps")
        if machine is not None and machine not in self.machines:
            raise error(libvirt.VIR_ERR_INVALID_ARG, f"the machine '{machine}' is not supported")
        return (
            "<domainCapabilities><cpu><mode name='host-model' supported='yes'>"
            "<model fallback='forbid'>EPYC-Milan</model><vendor>AMD</vendor>"
            "</mode></cpu></domainCapabilities>"
        )

    def getFreePages(self, sizes: list[int], *_: Any) -> dict[int, dict[int, int]]:  # noqa: N802
        self.asked.append("pages")
        return {-1: {sizes[0]: self.free_pages}}


def _compat(conns: dict[str, FakeConn], timeout: float = 5.0) -> Compatibility:
    def call(host: str, fn: Callable[[Any], Any]) -> Any:
        return fn(conns[host])

    return Compatibility(call, timeout)


def _needs(cpu: str = "", backing: str = "") -> Needs:
    return needs_of(ET.fromstring(DOMAIN.format(cpu=cpu, backing=backing)))


def test_needs_are_read_from_the_domain_xml() -> None:
    n = _needs(
        "<cpu mode='host-model'><model fallback='forbid'>EPYC</model>"
        "<feature policy='require' name='x2apic'/></cpu>",
        "<memoryBacking><hugepages><page size='1' unit='GiB'/></hugepages></memoryBacking>",
    )
    assert (n.cpu_mode, n.arch, n.machine, n.virt_type) == (
        "host-model",
        "x86_64",
        "pc-q35-7.2",
        "kvm",
    )
    assert n.emulator == "/usr/bin/qemu-system-x86_64"
    assert (n.hugepage_kib, n.memory) == (1024 * 1024, 4 * 1024**3)
    assert n.cpu_xml is not None
    cpu = ET.fromstring(n.cpu_xml)
    assert (cpu.get("mode"), cpu.findtext("model")) == ("custom", "EPYC")  # as migration sends it
    plain = _needs("<cpu mode='custom'><model>Haswell</model></cpu>", "<memoryBacking/>")
    assert (plain.cpu_mode, plain.cpu_xml, plain.hugepage_kib) == (None, None, None)
    assert _needs(backing="<memoryBacking><hugepages/></memoryBacking>").hugepage_kib == 2048


def test_an_incompatible_cpu_is_refused_with_libvirts_words_and_asked_once_per_pair() -> None:
    no = error(
        libvirt.VIR_ERR_CPU_INCOMPATIBLE, "Host CPU does not provide required features: avx512f"
    )
    conns = {"h0": FakeConn(), "h1": FakeConn(cpu=no), "h2": FakeConn()}
    compat = _compat(conns)
    vms = [Candidate("h0", f"u{i}", _needs("<cpu mode='host-passthrough'/>")) for i in range(5)]
    refused = compat.refusals(vms, ["h0", "h1", "h2"])
    assert set(refused) == {(f"u{i}", "h0") for i in range(5)}
    assert set(refused[("u0", "h0")]) == {"h1"}
    assert "avx512f" in refused[("u0", "h0")]["h1"]
    assert conns["h1"].asked.count("cpu") == 1, "cached per source, target and CPU"
    assert conns["h0"].asked.count("cpu") == 0, "never against its own host"


def test_a_named_cpu_model_is_not_compared() -> None:
    conns = {"h0": FakeConn(), "h1": FakeConn(cpu=libvirt.VIR_CPU_COMPARE_INCOMPATIBLE)}
    vm = Candidate("h0", "u", _needs("<cpu mode='custom'><model>Haswell</model></cpu>"))
    assert _compat(conns).refusals([vm], ["h0", "h1"]) == {}
    assert "cpu" not in conns["h1"].asked


def test_an_unknown_machine_type_or_emulator_is_refused() -> None:
    conns = {"h0": FakeConn(), "h1": FakeConn(machines=("pc-q35-6.2",))}
    refused = _compat(conns).refusals([Candidate("h0", "u", _needs())], ["h0", "h1"])
    assert "pc-q35-7.2" in refused[("u", "h0")]["h1"]


def test_hugepages_are_no_refusal_here_the_planner_counts_them() -> None:
    # a per-VM refusal against what is free now would keep a VM off a host that a move of
    # the same plan empties first: the free pages are observed with the host instead
    backing = "<memoryBacking><hugepages/></memoryBacking>"  # 4 GiB: 2048 pages of 2 MiB
    conns = {"h0": FakeConn(), "h1": FakeConn(free_pages=0)}
    refused = _compat(conns).refusals([Candidate("h0", "u", _needs(backing=backing))], list(conns))
    assert refused == {}
    assert "pages" not in conns["h1"].asked


def test_a_shut_off_vm_is_checked_for_its_machine_type_only() -> None:
    no = error(libvirt.VIR_ERR_CPU_INCOMPATIBLE, "incompatible")
    conns = {"h0": FakeConn(), "h1": FakeConn(cpu=no, free_pages=0)}
    needs = _needs("<cpu mode='host-passthrough'/>", "<memoryBacking><hugepages/></memoryBacking>")
    vm = Candidate("h0", "u", needs, running=False)
    assert _compat(conns).refusals([vm], list(conns)) == {}


def test_a_driver_without_the_calls_refuses_nothing() -> None:
    """libvirt's test driver implements none of them: the observation goes on."""
    conn = libvirt.open("test:///default")
    try:
        compat = _compat({"h0": conn, "h1": conn})
        needs = _needs("<cpu mode='host-model'/>", "<memoryBacking><hugepages/></memoryBacking>")
        assert compat.refusals([Candidate("h0", "u", needs)], ["h0", "h1"]) == {}
    finally:
        conn.close()


def test_a_host_that_does_not_answer_refuses_nothing_within_the_timeout() -> None:
    conns = {"h0": FakeConn(), "h1": FakeConn(hang=3.0)}
    vms = [Candidate("h0", f"u{i}", _needs("<cpu mode='host-passthrough'/>")) for i in range(3)]
    began = time.monotonic()
    assert _compat(conns, timeout=0.3).refusals(vms, list(conns)) == {}
    assert time.monotonic() - began < 2.5, "one wait for the silent host, not one per VM"


# --- the real daemon --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    directory = tmp_path_factory.mktemp("compatlab") / "lab"
    started = start_lab_or_skip(directory, hosts=2, vms=1)
    try:
        yield started
    finally:
        stop_and_check(directory)


@pytest.mark.lab
def test_the_real_daemon_answers_each_question(two_hosts: Lab) -> None:
    virt = two_hosts.virt_type
    with ConnectionPool({h.name: h.uri for h in two_hosts.hosts}) as pool:
        compat = Compatibility(lambda host, fn: fn(pool.get(host)), 10.0)
        base = Needs(arch="x86_64", machine="pc", virt_type=virt, memory=64 * MIB)
        ok = [
            Candidate("kvm-01", "same-cpu", base._replace(cpu_mode="host-passthrough")),
            Candidate("kvm-01", "plain", base),
        ]
        assert compat.refusals(ok, ["kvm-01", "kvm-02"]) == {}  # identical hosts accept
        bad = [
            Candidate("kvm-01", "machine", base._replace(machine="pc-none-0.1")),
            Candidate("kvm-01", "emulator", base._replace(emulator="/nonexistent/qemu")),
            Candidate(
                "kvm-01",
                "cpu",
                base._replace(
                    cpu_mode="host-model",
                    cpu_xml="<cpu mode='custom' match='exact'><model>EPYC-Milan</model>"
                    "<feature policy='require' name='avx512f'/></cpu>",
                ),
            ),
        ]
        refused = compat.refusals(bad, ["kvm-01", "kvm-02"])
    whys = {uuid: hosts["kvm-02"] for (uuid, _), hosts in refused.items()}
    assert set(whys) == {"machine", "emulator", "cpu"}, whys
    assert "pc-none-0.1" in whys["machine"]
    assert "/nonexistent/qemu" in whys["emulator"]
    assert "avx512f" in whys["cpu"]


@pytest.mark.lab
def test_observing_a_lab_gathers_refusals_into_the_snapshot(two_hosts: Lab, tmp_path: Path) -> None:
    """A running host-passthrough VM on identical hosts is refused by none; the snapshot says so."""
    from reconciler.adapters.libvirt.cluster_observer import LibvirtClusterObserver
    from reconciler.config import load_desired

    d = load_desired(two_hosts.cluster_dir)
    snap = LibvirtClusterObserver(d.cluster, sample_interval=0).observe()
    assert snap.vms
    assert all(v.refused_by == {} for v in snap.vms)


def _sysfs_free_pages() -> dict[int, int]:
    """What the kernel says is free, per huge page size in KiB, for the whole machine."""
    out = {}
    for folder in Path("/sys/kernel/mm/hugepages").glob("hugepages-*kB"):
        size = int(folder.name.removeprefix("hugepages-").removesuffix("kB"))
        out[size] = int((folder / "free_hugepages").read_text())
    return out


@pytest.mark.lab
def test_observing_a_lab_reports_each_hosts_free_huge_pages(two_hosts: Lab) -> None:
    """The daemons share this machine's kernel: each reports its free pages per size."""
    from reconciler.adapters.libvirt.cluster_observer import LibvirtClusterObserver
    from reconciler.config import load_desired

    d = load_desired(two_hosts.cluster_dir)
    kernel = _sysfs_free_pages()
    if not kernel:
        pytest.skip("this kernel has no huge page sizes")
    snap = LibvirtClusterObserver(d.cluster, sample_interval=0).observe()
    for host in snap.hosts:
        assert host.hugepages_free == kernel, host.name


@pytest.mark.lab
def test_a_vm_the_observed_room_cannot_hold_is_one_libvirt_will_not_start(two_hosts: Lab) -> None:
    """A VM backed by huge pages, defined on a host that reports fewer free than it needs, is
    observed with its need, and libvirt there will not start it. (A machine without free huge
    pages usually has no hugetlbfs mounted either, and libvirt says so before QEMU runs; giving
    the lab pages would change the kernel settings of the whole machine.)"""
    from reconciler.adapters.lab.qemu import domain_xml
    from reconciler.adapters.lab.state import LabVm
    from reconciler.adapters.libvirt.cluster_observer import LibvirtClusterObserver
    from reconciler.config import load_desired

    d = load_desired(two_hosts.cluster_dir)
    kvm01 = next(h for h in two_hosts.hosts if h.name == "kvm-01")
    spec = LabVm(name="paged", host="kvm-01", memory_mib=64, vcpus=1)
    xml = domain_xml(spec, two_hosts.virt_type).replace(
        "<vcpu>", "<memoryBacking><hugepages/></memoryBacking>\n  <vcpu>", 1
    )
    conn = libvirt.open(kvm01.uri)
    dom = conn.defineXML(xml)
    try:
        snap = LibvirtClusterObserver(d.cluster, sample_interval=0).observe()
        (paged,) = (v for v in snap.vms if v.name == "paged")
        assert (paged.hugepage_kib, paged.hugepages) == (2048, 32)  # 64 MiB in 2 MiB pages
        host = next(h for h in snap.hosts if h.name == "kvm-01")
        free = (host.hugepages_free or {}).get(2048)
        if free is None or free >= 32:
            pytest.skip(f"this machine has {free} free 2 MiB pages: the VM would fit")
        with pytest.raises(libvirt.libvirtError):
            dom.create()
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            dom.destroy()
        dom.undefine()
        conn.close()
