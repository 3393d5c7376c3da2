"""Compatibility asked while observing: over the connection each host is observed on, once per
question and host, with the same refusals as asking everything afterwards.

libvirt's test driver answers neither question, so its connections are wrapped: each host
answers from a table of what it accepts (the questions' words as libvirt would give them)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import libvirt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.adapters.lab import node_xml
from reconciler.adapters.libvirt import compatibility
from reconciler.adapters.libvirt.observer import observe_cluster
from reconciler.model.base import API_VERSION
from reconciler.model.cluster import Cluster, ClusterMetadata, ClusterSpec, Host
from reconciler.model.snapshot import Snapshot
from tests.adapters.test_migrator_watch import error

pytestmark = pytest.mark.libvirt

CPUS = (
    "",
    "<cpu mode='host-passthrough'/>",
    "<cpu mode='host-model'/>",
    "<cpu mode='host-model'><model>Skylake</model><feature policy='require' name='avx512f'/></cpu>",
    "<cpu mode='custom'><model>Haswell</model></cpu>",
)
MACHINES = ("", "pc-q35-7.2", "pc-q35-8.0")
DEVICES = ("", "<hostdev mode='subsystem' type='pci'><source><address bus='1'/></source></hostdev>")


def domain(name: str, uuid: str, cpu: str = "", machine: str = "", devices: str = "") -> str:
    os_type = (
        f"<type arch='x86_64' machine='{machine}'>hvm</type>" if machine else "<type>hvm</type>"
    )
    return (
        f"<domain type='test'><name>{name}</name><uuid>{uuid}</uuid>"
        f"<memory unit='MiB'>128</memory><vcpu>1</vcpu><os>{os_type}</os>{cpu}"
        f"<devices>{devices}<memballoon model='virtio'/></devices></domain>"
    )


class Answering:
    """A test-driver connection that also answers the compatibility questions.

    Host ``i`` accepts every machine type but ``pc-q35-8.0`` when ``i`` is odd, offers a
    host-model CPU of its own (``EPYC-<i mod 3>``) and finds a CPU requiring avx512f
    incompatible when ``i`` is a multiple of 3.
    """

    def __init__(self, conn: Any, index: int, asked: Counter[tuple[int, str]]) -> None:
        self._conn, self._index, self._asked = conn, index, asked

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def getDomainCapabilities(self, emulator: Any, arch: Any, machine: Any, *_: Any) -> str:  # noqa: N802 - libvirt's name
        self._asked[self._index, "caps"] += 1
        if machine == "pc-q35-8.0" and self._index % 2:
            raise error(libvirt.VIR_ERR_INVALID_ARG, f"machine type {machine} is not supported")
        return (
            "<domainCapabilities><cpu><mode name='host-model' supported='yes'>"
            f"<model fallback='forbid'>EPYC-{self._index % 3}</model></mode></cpu>"
            "</domainCapabilities>"
        )

    def compareHypervisorCPU(self, *args: Any) -> int:  # noqa: N802
        self._asked[self._index, "cpu"] += 1
        if "avx512f" in args[4] and self._index % 3 == 0:
            raise error(libvirt.VIR_ERR_CPU_INCOMPATIBLE, "Host CPU does not provide avx512f")
        identical: int = libvirt.VIR_CPU_COMPARE_IDENTICAL
        return identical


class Hosts:
    """Node files ``host-<i>.xml`` and a ``libvirt.open`` that wraps their connections."""

    def __init__(self, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.folder = folder
        self.opened: Counter[int] = Counter()
        self.asked: Counter[tuple[int, str]] = Counter()
        real: Callable[[str], Any] = libvirt.open

        def answering_open(uri: str) -> Any:
            index = int(uri.rsplit("host-", 1)[1].removesuffix(".xml"))
            self.opened[index] += 1
            return Answering(real(uri), index, self.asked)

        monkeypatch.setattr(libvirt, "open", answering_open)

    def cluster(self, layout: list[list[tuple[str, str, str]]]) -> Cluster:
        """Host ``i`` runs a VM per (cpu, machine, devices) of ``layout[i]``."""
        hosts = []
        for i, vms in enumerate(layout):
            domains = [
                domain(f"h{i}-v{j}", f"00000000-0000-4000-8000-{i:06d}{j:06d}", *vm)
                for j, vm in enumerate(vms)
            ]
            path = self.folder / f"host-{i}.xml"
            path.write_text(node_xml("\n".join(domains)))
            hosts.append(Host(name=f"host-{i}", uri=f"test://{path}"))
        return Cluster(
            api_version=API_VERSION,
            kind="Cluster",
            metadata=ClusterMetadata(name="c"),
            spec=ClusterSpec(hosts=hosts),
        )


def refused(snap: Snapshot) -> dict[str, dict[str, str]]:
    return {
        vm.name: {str(h): why for h, why in vm.refused_by.items()}
        for vm in snap.vms
        if vm.refused_by
    }


def test_a_cluster_of_one_kind_is_asked_over_the_observations_connections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = Hosts(tmp_path, monkeypatch)
    kind = (CPUS[3], MACHINES[2], "")
    cluster = hosts.cluster([[kind, kind] for _ in range(6)])
    snap = observe_cluster(cluster, sample_interval=0, processes=1)
    assert all(h.reachable for h in snap.hosts)
    assert set(hosts.opened.values()) == {1}, "no connection beyond the observation's"
    # one question of each kind per host, however many VMs ask it
    assert set(hosts.asked.values()) == {1}
    assert {what for _, what in hosts.asked} == {"caps", "cpu"}
    by_vm = refused(snap)
    # odd hosts refuse the machine type, multiples of 3 the CPU; a VM is never refused by
    # its own host
    assert set(by_vm["h0-v0"]) == {"host-1", "host-3", "host-5"}
    assert set(by_vm["h1-v1"]) == {"host-0", "host-3", "host-5"}
    assert "pc-q35-8.0" in by_vm["h0-v0"]["host-1"]
    assert "avx512f" in by_vm["h1-v1"]["host-0"]
    assert by_vm["h1-v1"]["host-3"].startswith("host-3 does not accept machine type")


def test_a_kind_first_seen_after_a_host_is_asked_of_it_afterwards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = Hosts(tmp_path, monkeypatch)
    plain = ("", "", "")
    late = ("", MACHINES[2], "")
    cluster = hosts.cluster([[plain], [plain], [plain, late]])
    snap = observe_cluster(cluster, sample_interval=0, processes=1)
    assert set(refused(snap)) == {"h2-v1"}
    assert set(refused(snap)["h2-v1"]) == {"host-1"}
    # hosts 0 and 1 were done before the new machine type was seen: asked on a connection
    # opened for it; host 2 only on its own
    assert hosts.opened == Counter({0: 2, 1: 2, 2: 1})


def test_what_cannot_move_is_not_asked_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = Hosts(tmp_path, monkeypatch)
    stuck = (CPUS[3], MACHINES[2], DEVICES[1])  # a host device: immovable
    cluster = hosts.cluster([[("", "", "")], [stuck], [stuck]])
    snap = observe_cluster(cluster, sample_interval=0, processes=1)
    assert refused(snap) == {}
    assert {what for _, what in hosts.asked} == {"caps"}  # the plain VM's machine type only
    assert set(hosts.opened.values()) == {1}


def test_a_fresh_look_asks_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = Hosts(tmp_path, monkeypatch)
    kind = (CPUS[3], MACHINES[2], "")
    cluster = hosts.cluster([[kind], [kind]])
    observe_cluster(cluster, sample_interval=0, processes=1, compatibility=False)
    assert hosts.asked == Counter()


def test_a_host_that_hangs_on_a_question_is_observed_and_refuses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = Hosts(tmp_path, monkeypatch)
    kind = ("", MACHINES[2], "")
    cluster = hosts.cluster([[kind], [kind], [kind]])
    answer = Answering.getDomainCapabilities

    def hangs_on_host_1(self: Answering, *args: Any) -> str:
        if self._index == 1:
            time.sleep(3)
        return answer(self, *args)

    monkeypatch.setattr(Answering, "getDomainCapabilities", hangs_on_host_1)
    began = time.monotonic()
    snap = observe_cluster(cluster, sample_interval=0, processes=1, call_timeout=0.5)
    assert time.monotonic() - began < 2.5, "one call timeout, not a wait for the answer"
    assert all(h.reachable for h in snap.hosts), [h.error for h in snap.hosts]
    assert sorted(vm.name for vm in snap.vms) == ["h0-v0", "h1-v0", "h2-v0"]
    assert refused(snap) == {}, "host 1 refuses nothing: it did not answer"


MIXED = st.lists(
    st.lists(
        st.tuples(st.sampled_from(CPUS), st.sampled_from(MACHINES), st.sampled_from(DEVICES)),
        max_size=3,
    ),
    min_size=2,
    max_size=5,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(layout=MIXED)
def test_the_refusals_are_those_of_asking_everything_afterwards(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    layout: list[list[tuple[str, str, str]]],
) -> None:
    with monkeypatch.context() as patch:
        hosts = Hosts(tmp_path_factory.mktemp("hosts"), patch)
        cluster = hosts.cluster(layout)
        swept = observe_cluster(cluster, sample_interval=0, processes=1)
        # the same observation with every answer given while observing left unused
        init = compatibility.Compatibility.__init__

        def unanswered(self: Any, call: Any, timeout: float, answers: Any = None) -> None:
            init(self, call, timeout, None)

        patch.setattr(compatibility.Compatibility, "__init__", unanswered)
        afterwards = observe_cluster(cluster, sample_interval=0, processes=1)
    assert refused(swept) == refused(afterwards)
