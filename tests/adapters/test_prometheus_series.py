"""Whose series is whose, against a loopback server answering as Prometheus's API does: a VM
created again under the same name does not inherit the old one's window (followed by UUID),
a VM scraped by three jobs counts once and the plan says so, a VM that moved between hosts
keeps its window, and a series without a UUID is the VM's by its name."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from reconciler.adapters.load.sources import PrometheusLoad
from reconciler.core.load_view import unknown
from reconciler.core.planner import plan
from reconciler.model.base import VmUuid
from reconciler.model.history import History
from reconciler.model.load import LoadSpec, PrometheusSpec
from reconciler.model.snapshot import Snapshot, VmState
from reconciler.report.plan_table import plan_table
from tests.core.builders import desired, host, host_state, snapshot, vm
from tests.promhttp import fake_prometheus, matrix

END = 1_750_000_000
NOW = datetime.fromtimestamp(END, UTC)
STEP = 15
OLD, NEW = "6f1c0a52-0000-4000-8000-000000000001", "6f1c0a52-0000-4000-8000-000000000002"


def spec(url: str) -> LoadSpec:
    prometheus = PrometheusSpec.model_validate({"url": url})
    return LoadSpec.model_validate(
        {"source": "prometheus", "window": "10m", "sampleEvery": f"{STEP}s"}
    ).model_copy(update={"prometheus": prometheus})


def points(cores: float, since: int = 600, until: int = 0) -> list[tuple[float, float]]:
    """``cores`` every step from ``since`` to ``until`` seconds before the end."""
    return [(t, cores) for t in range(END - since, END - until + 1, STEP)]


def with_uuid(v: VmState, uuid: str) -> VmState:
    return v.model_copy(update={"uuid": VmUuid(uuid)})


def seen() -> Snapshot:
    return snapshot(
        [host_state("a", cpus=8), host_state("b", cpus=8), host_state("c", cpus=8)],
        [
            with_uuid(vm("reborn", "a", cpu_used=0.1), NEW),
            vm("tripled", "a", cpu_used=1.0),
            vm("mover", "b", cpu_used=1.0),
            vm("plain", "b", cpu_used=0.5),
        ],
    )


def answer(query: str) -> dict[str, Any]:
    exporter = {"instance": "a:9177", "job": "libvirt"}
    return matrix(
        # the old reborn, 2 cores until a minute ago, then deleted; the new one since then
        ({"domain": "reborn", "uuid": OLD.upper(), **exporter}, points(2.0, until=60)),
        ({"domain": "reborn", "uuid": NEW, **exporter}, points(0.1, since=45)),
        # one exporter scraped by three jobs: three series of one VM
        *(
            ({"domain": "tripled", "instance": "a:9177", "job": job}, points(1.0))
            for job in ("libvirt", "libvirt-dr", "federate")
        ),
        # moved from a to b five minutes ago: one series on each host, one after the other
        ({"domain": "mover", "instance": "a:9177", "job": "libvirt"}, points(1.0, until=300)),
        ({"domain": "mover", "instance": "b:9177", "job": "libvirt"}, points(1.0, since=285)),
        # a query that sums by domain: no uuid, no instance
        ({"domain": "plain"}, points(0.5)),
    )


@pytest.fixture
def windowed() -> Snapshot:
    with fake_prometheus(answer) as server:
        return PrometheusLoad().window(seen(), spec(server.url), NOW)


def test_a_vm_created_again_under_its_name_does_not_inherit_the_old_window(
    windowed: Snapshot,
) -> None:
    assert windowed.load is not None
    reborn = windowed.load.vms["reborn"]
    # summed by domain it read 1.8 cores, the old VM's; its own minute covers 10% of it
    assert reborn.window is None
    assert reborn.covered == pytest.approx(0.1, abs=0.03)
    assert "reborn" in unknown(windowed).vms


def test_a_vm_scraped_by_three_jobs_counts_once_and_the_plan_says_so(
    windowed: Snapshot,
) -> None:
    assert windowed.load is not None
    assert windowed.load.vms["tripled"].window == pytest.approx(1.0)  # not 3.0
    assert windowed.load.duplicates == {"tripled": "3 series (job: federate, libvirt, libvirt-dr)"}
    d = desired([host(n) for n in ("a", "b", "c")], threshold=20)
    p = plan(d, windowed, History(), now=NOW)
    assert p.load is not None
    assert p.load.duplicates == windowed.load.duplicates
    text = " ".join(plan_table(p).split())
    assert (
        "seen in several series at once, counted once: tripled: 3 series "
        "(job: federate, libvirt, libvirt-dr)" in text
    )


def test_a_vm_that_moved_keeps_its_window_and_is_not_named(windowed: Snapshot) -> None:
    assert windowed.load is not None
    mover = windowed.load.vms["mover"]
    assert mover.window == pytest.approx(1.0)
    assert mover.covered == pytest.approx(1.0, abs=0.03)
    assert "mover" not in windowed.load.duplicates


def test_a_series_without_uuid_is_the_vms_by_its_name(windowed: Snapshot) -> None:
    assert windowed.load is not None
    assert windowed.load.vms["plain"].window == pytest.approx(0.5)
    assert {str(v.name): v.cpu_used for v in windowed.vms}["plain"] == pytest.approx(0.5)
