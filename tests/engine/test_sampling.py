"""run's sampling between rounds, on fakes: the window it keeps, gaps where a host did not
answer, the policy asked every time, and a store that cannot be written never stopping it."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from reconciler.core.load_samples import readings
from reconciler.core.load_view import from_readings, unknown
from reconciler.engine.ports import LoadSampler
from reconciler.engine.sampling import IDLE, SampleKeeper
from reconciler.model.load import LoadSpec
from tests.fakes import FakeClock, FakeCluster, FakeHost, FakeSampler, FakeVm, MemorySampleStore

SPEC = LoadSpec.model_validate({"window": "5m", "sampleEvery": "30s"})


def world() -> tuple[FakeCluster, FakeSampler, MemorySampleStore, SampleKeeper]:
    clock = FakeClock()
    cluster = FakeCluster(
        "lab",
        [FakeHost("a"), FakeHost("b")],
        [FakeVm("x", "a", cpu_used=0.8), FakeVm("y", "b", cpu_used=0.1)],
        clock=clock,
    )
    sampler = FakeSampler(cluster)
    store = MemorySampleStore()
    policy: list[tuple[LoadSpec, LoadSampler] | None] = [(SPEC, sampler)]
    keeper = SampleKeeper("lab", lambda: policy[0], store, clock)
    return cluster, sampler, store, keeper


def run_for(keeper: SampleKeeper, clock: FakeClock, samples: int) -> None:
    for _ in range(samples):
        wait = keeper.once()
        clock.advance(timedelta(seconds=wait))


def window_of(cluster: FakeCluster, store: MemorySampleStore) -> dict[str, float | None]:
    assert store.samples is not None
    snap = cluster.observe()
    out = from_readings(snap, SPEC, readings(store.samples), cluster.clock.now())
    assert out.load is not None
    return {name: v.window for name, v in out.load.vms.items()}


def test_the_samples_make_the_window() -> None:
    cluster, sampler, store, keeper = world()
    run_for(keeper, cluster.clock, 11)  # 5 minutes of samples, every 30 s
    assert sampler.calls == 11
    assert window_of(cluster, store) == {"x": pytest.approx(0.8), "y": pytest.approx(0.1)}


def test_a_vm_that_moved_keeps_its_window_and_a_silent_host_leaves_a_gap() -> None:
    cluster, _, store, keeper = world()
    run_for(keeper, cluster.clock, 6)
    cluster.vms["x"].host = "b"  # migrated: its counter starts again on b
    run_for(keeper, cluster.clock, 5)
    assert window_of(cluster, store)["x"] == pytest.approx(0.8)
    cluster.unreachable("b")
    run_for(keeper, cluster.clock, 8)  # 4 minutes without b: most of the window missing
    cluster.unreachable("b", False)
    snap = cluster.observe()
    assert store.samples is not None
    out = from_readings(snap, SPEC, readings(store.samples), cluster.clock.now())
    assert unknown(out).vms == {"x", "y"}


def test_nothing_is_sampled_while_the_policy_asks_for_none_and_a_bad_store_is_survived() -> None:
    cluster, sampler, store, keeper = world()
    keeper.current = lambda: None
    assert keeper.once() == IDLE
    assert sampler.calls == 0
    keeper.current = lambda: (SPEC, sampler)
    store.fail = "disk full"
    assert keeper.once() == 30.0
    assert store.samples is None
    store.fail = None
    assert keeper.once() == 30.0
    assert store.saves == 1


def test_the_thread_stops_when_told() -> None:
    cluster, sampler, _, keeper = world()
    stop = threading.Event()
    slept: list[float] = []

    def sleep(seconds: float, wake: threading.Event) -> None:
        slept.append(seconds)
        cluster.clock.advance(timedelta(seconds=seconds))
        if len(slept) == 3:
            stop.set()

    keeper.sleep = sleep
    thread = threading.Thread(target=keeper.run, args=(stop,))
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    assert sampler.calls == 3
    assert slept == [30.0, 30.0, 30.0]
