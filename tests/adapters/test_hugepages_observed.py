"""Huge pages as observed: each host's free pages per size it offers (``getFreePages``), each
VM backed by them its page size and count; and the new snapshot fields through JSON.

libvirt's test driver lists page sizes in its capabilities but its ``getFreePages`` answers
nothing to Python (it reports no cells), so a fake connection stands in for the answers; the
lab (``test_compatibility.py``) checks a real daemon's against the kernel's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import libvirt
import pytest

from reconciler.adapters.files.snapshot import load_snapshot, save_snapshot, snapshot_json
from reconciler.adapters.lab import node_xml
from reconciler.adapters.libvirt import observe_host
from reconciler.adapters.libvirt.observe_host import (
    Probe,
    ProbeSettings,
    capabilities_host,
    free_hugepages,
    huge_page_sizes,
)
from reconciler.adapters.libvirt.observer import observe_cluster
from reconciler.model.base import API_VERSION
from reconciler.model.cluster import Cluster, ClusterMetadata, ClusterSpec, Host
from reconciler.model.snapshot import Snapshot
from tests.adapters.test_migrator_watch import error
from tests.core.builders import NOW, host_state, snapshot, vm

CAPS = """<capabilities>
  <host>
    <cpu><arch>x86_64</arch><model>EPYC</model>
      <pages unit='KiB' size='4'/><pages unit='KiB' size='2048'/>
      <pages unit='KiB' size='1048576'/>
    </cpu>
  </host>
</capabilities>"""


class FakeConn:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[tuple[list[int], int, int]] = []

    def getFreePages(self, sizes: list[int], start: int, cells: int, flags: int) -> Any:  # noqa: N802 - libvirt's name
        self.asked.append((sizes, start, cells))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _probe(conn: Any) -> Probe:
    probe = Probe("h1", "qemu:///system", ProbeSettings(5.0, 5.0, 0.0, ()))
    probe.conn = conn
    return probe


def test_the_huge_page_sizes_are_those_the_capabilities_list_but_the_base_page() -> None:
    assert huge_page_sizes(capabilities_host(CAPS)) == [2048, 1048576]
    assert huge_page_sizes(capabilities_host("<capabilities><host/></capabilities>")) == []
    assert huge_page_sizes(None) == []


def test_free_pages_are_summed_over_the_cells_libvirt_answers_for() -> None:
    conn = FakeConn({-1: {2048: 300, 1048576: 2}})
    assert free_hugepages(_probe(conn), [2048, 1048576]) == {2048: 300, 1048576: 2}
    assert conn.asked == [([2048, 1048576], -1, 1)]  # the host's own totals: one call
    two_cells = FakeConn({0: {2048: 100}, 1: {2048: 28}})
    assert free_hugepages(_probe(two_cells), [2048]) == {2048: 128}


def test_a_host_without_sizes_or_an_answer_reports_none() -> None:
    nothing = FakeConn({})
    assert free_hugepages(_probe(nothing), []) is None
    assert nothing.asked == [], "no huge page size: nothing to ask"
    assert free_hugepages(_probe(nothing), [2048]) is None  # libvirt's test driver
    unsupported = error(libvirt.VIR_ERR_NO_SUPPORT, "no")
    assert free_hugepages(_probe(FakeConn(unsupported)), [2048]) is None


def test_the_test_driver_lists_sizes_and_answers_no_free_pages(tmp_path: Path) -> None:
    path = tmp_path / "h1.xml"
    path.write_text(node_xml())
    conn = libvirt.open(f"test://{path}")
    try:
        sizes = huge_page_sizes(capabilities_host(conn.getCapabilities()))
        assert 2048 in sizes
        assert conn.getFreePages(sizes, -1, 1, 0) == {}
    finally:
        conn.close()


def _cluster(*uris: str) -> Cluster:
    return Cluster(
        api_version=API_VERSION,
        kind="Cluster",
        metadata=ClusterMetadata(name="t"),
        spec=ClusterSpec(hosts=[Host(name=f"h{i}", uri=u) for i, u in enumerate(uris)]),
    )


def _domain(name: str, backing: str) -> str:
    return f"""<domain type='test'>
  <name>{name}</name>
  <memory unit='MiB'>1025</memory><vcpu>1</vcpu>{backing}
  <os><type>hvm</type></os><devices><memballoon model='virtio'/></devices>
</domain>"""


def test_observed_vms_say_their_page_size_and_count_and_hosts_their_free_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "h0.xml"
    path.write_text(
        node_xml(
            "\n".join(
                [
                    _domain("plain", ""),
                    _domain("small", "<memoryBacking><hugepages/></memoryBacking>"),
                    _domain(
                        "large",
                        "<memoryBacking><hugepages><page size='1' unit='GiB'/></hugepages>"
                        "</memoryBacking>",
                    ),
                ]
            )
        )
    )
    real = observe_host.free_hugepages
    answers = {2048: 4096, 1048576: 8}

    def answering(probe: Probe, sizes: list[int]) -> dict[int, int] | None:
        assert real(probe, sizes) is None  # what the test driver itself says
        return {s: answers[s] for s in sizes if s in answers}

    monkeypatch.setattr(observe_host, "free_hugepages", answering)
    snap = observe_cluster(_cluster(f"test://{path}"), sample_interval=0, now=NOW)
    (h0,) = snap.hosts
    assert h0.hugepages_free == {2048: 4096, 1048576: 8}
    need = {v.name: (v.hugepage_kib, v.hugepages) for v in snap.vms}
    # 1025 MiB: 513 pages of 2 MiB, two of 1 GiB (rounded up)
    assert need == {"plain": (None, 0), "small": (2048, 513), "large": (1048576, 2)}


def test_the_new_fields_survive_a_snapshot_file_and_old_snapshots_still_load(
    tmp_path: Path,
) -> None:
    h = host_state("h1").model_copy(update={"hugepages_free": {2048: 512, 1048576: 0}})
    v = vm("a", "h1").model_copy(update={"hugepage_kib": 2048, "hugepages": 2048})
    snap = snapshot([h, host_state("h2")], [v, vm("b", "h2")])
    path = tmp_path / "snapshot.json"
    save_snapshot(snap, path)
    assert load_snapshot(path) == snap
    doc = json.loads(snapshot_json(snap))
    assert doc["hosts"][0]["hugepagesFree"] == {"2048": 512, "1048576": 0}
    assert doc["hosts"][1]["hugepagesFree"] is None
    assert (doc["vms"][0]["hugepageKib"], doc["vms"][0]["hugepages"]) == (2048, 2048)
    # a snapshot written before these fields existed reads as not limited by huge pages
    for item in [*doc["hosts"], *doc["vms"]]:
        for key in ("hugepagesFree", "hugepageKib", "hugepages"):
            item.pop(key, None)
    old = Snapshot.model_validate(doc)
    assert all(h.hugepages_free is None for h in old.hosts)
    assert all((v.hugepage_kib, v.hugepages) == (None, 0) for v in old.vms)
