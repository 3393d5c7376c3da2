"""The samples run keeps: a bounded window per VM that follows it across hosts, and the
snapshot it makes for the planner."""

from __future__ import annotations

from datetime import timedelta

import pytest

from reconciler.core.load_samples import HostSample, added, keep_seconds, readings, stale
from reconciler.core.load_view import from_readings, unknown
from reconciler.model.load import MAX_SAMPLES, LoadBasis, LoadSpec
from reconciler.model.snapshot import VmRunState
from tests.core.builders import NOW, host_state, snapshot, vm

SPEC = LoadSpec.model_validate({"window": "2m", "sampleEvery": "10s"})
NS = 1_000_000_000
T0 = NOW.timestamp() - 120


def sampled(cores: dict[str, tuple[str, float]], seconds: int, every: int = 10) -> object:
    """Samples every ``every`` s for ``seconds`` s of VMs using fixed cores, by host."""
    store = None
    for k in range(seconds // every + 1):
        at = T0 + k * every
        by_host: dict[str, list[tuple[str, str, int, int]]] = {}
        for name, (host, c) in cores.items():
            by_host.setdefault(host, []).append((name, f"u-{name}", 1, round(c * k * every * NS)))
        store = added(
            store, "test", SPEC, [HostSample(h, at, tuple(v)) for h, v in by_host.items()], at
        )
    assert store is not None
    return store


def test_the_window_of_each_vm_becomes_its_cpu_in_the_snapshot() -> None:
    store = sampled({"x": ("a", 0.8), "y": ("b", 0.1)}, 120)
    snap = snapshot(
        [host_state("a"), host_state("b")], [vm("x", "a", cpu_used=0.0), vm("y", "b", cpu_used=3)]
    )
    out = from_readings(snap, SPEC, readings(store), NOW)  # type: ignore[arg-type]
    cpu = {v.name: v.cpu_used for v in out.vms}
    assert cpu == {"x": pytest.approx(0.8), "y": pytest.approx(0.1)}
    assert out.load is not None
    assert out.load.basis is LoadBasis.WINDOW
    assert out.load.vms["y"].now == 3
    assert out.load.vms["y"].covered == 1.0
    assert not unknown(out).vms


def test_a_vm_that_moved_inside_the_window_keeps_its_window() -> None:
    store = None
    for k in range(13):
        at = T0 + 10 * k
        host = "a" if k < 6 else "b"  # moved at 60 s: a new process, its counter from 0
        cpu = round(0.5 * 10 * (k if k < 6 else k - 6) * NS)
        store = added(
            store, "test", SPEC, [HostSample(host, at, (("x", "u", 0 if k < 6 else 1, cpu),))], at
        )
    assert store is not None
    snap = snapshot([host_state("a"), host_state("b")], [vm("x", "b", cpu_used=0)])
    out = from_readings(snap, SPEC, readings(store), NOW)
    assert out.vms[0].cpu_used == pytest.approx(0.5)
    assert out.load is not None
    assert out.load.vms["x"].covered == pytest.approx(110 / 120, abs=1e-4)


def test_a_new_vm_is_unknown_until_half_its_window_is_sampled() -> None:
    snap = snapshot([host_state("a")], [vm("x", "a", cpu_used=0.2)])
    young = sampled({"x": ("a", 0.0)}, 50)  # sampled for 50 s, the window is 120 s
    out = from_readings(snap, SPEC, readings(young), NOW)  # type: ignore[arg-type]
    assert out.vms[0].cpu_used == 0.2  # keeps its short sample, for mandatory moves only
    u = unknown(out)
    assert u.vms == {"x"}
    assert "over the 2m window is unknown" in u.hosts["a"]
    # a shut-off VM has no load to know
    off = snap.model_copy(
        update={"vms": [snap.vms[0].model_copy(update={"state": VmRunState.SHUTOFF})]}
    )
    assert not unknown(from_readings(off, SPEC, {}, NOW)).vms


def test_the_store_is_bounded_and_forgets_vms_gone() -> None:
    long = LoadSpec.model_validate({"window": "2h", "sampleEvery": "10s"})
    store = None
    for k in range(MAX_SAMPLES + 50):
        at = T0 + 10 * k
        vms = [("x", "u", 1, k * NS)] + ([("gone", "g", 1, k)] if k < 10 else [])
        store = added(store, "test", long, [HostSample("a", at, tuple(vms))], at)
    assert store is not None
    assert len(store.vms["x"].readings) <= MAX_SAMPLES + 3
    assert "gone" not in store.vms
    kept = store.vms["x"].readings
    assert store.last is not None
    assert store.last - kept[0][0] <= keep_seconds(long)


def test_another_domain_of_the_name_starts_anew_and_failed_hosts_add_nothing() -> None:
    store = added(None, "t", SPEC, [HostSample("a", T0, (("x", "u1", 1, 5),))], T0)
    store = added(store, "t", SPEC, [HostSample("a", T0 + 10, (("x", "u2", 1, 7),))], T0 + 10)
    assert store.vms["x"].uuid == "u2"
    assert len(store.vms["x"].readings) == 1
    store = added(store, "t", SPEC, [HostSample("a", T0 + 20, (), error="timeout")], T0 + 20)
    assert len(store.vms["x"].readings) == 1
    assert store.last == T0 + 20


def test_a_window_is_fresh_while_run_samples() -> None:
    store = added(None, "t", SPEC, [], NOW.timestamp())
    assert stale(store, SPEC, NOW + timedelta(seconds=30), "/s") is None
    assert stale(store, SPEC, NOW + timedelta(seconds=31), "/s") == (
        "run's last sample in /s is 31s old"
    )
    assert stale(None, SPEC, NOW, "/s") == "run keeps no samples in /s"
