"""run's sampling between rounds, on fakes: the window it keeps, gaps where a host did not
answer, the policy asked every time, and a store that cannot be written never stopping it."""

from __future__ import annotations

import math
import threading
from datetime import timedelta

import pytest

from reconciler.core.load_history import LoadHistory
from reconciler.core.load_samples import readings
from reconciler.core.load_view import from_readings, unknown
from reconciler.engine.ports import LoadSampler
from reconciler.engine.sampling import IDLE, SampleKeeper
from reconciler.errors import TerminalError
from reconciler.model.load import LoadSpec, Statistic
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


class MemoryHistory:
    def __init__(self) -> None:
        self.kept: LoadHistory | None = None
        self.saves = 0
        self.reads = 0
        self.fail: str | None = None

    def load(self) -> LoadHistory | None:
        self.reads += 1
        return self.kept

    def save(self, history: LoadHistory) -> None:
        if self.fail is not None:
            raise TerminalError(self.fail)
        self.saves += 1
        self.kept = history


def test_with_a_forecast_each_bucket_is_folded_once_and_a_failed_write_is_tried_again() -> None:
    cluster, _, _, keeper = world()
    spec = SPEC.model_copy(update={"statistic": Statistic.FORECAST})
    keeper.current = lambda: (spec, FakeSampler(cluster))
    history = MemoryHistory()
    keeper.history = history
    cluster.clock.advance(timedelta(seconds=-(cluster.clock.now().timestamp() % 300)))
    run_for(keeper, cluster.clock, 21)  # 10 minutes and a sample: two buckets ended
    assert history.reads == 1  # read once, kept in memory after
    assert history.saves == 2
    assert history.kept is not None
    assert history.kept.names == ("x", "y")
    history.fail = "disk full"
    run_for(keeper, cluster.clock, 10)  # a third bucket ends: not written, sampling goes on
    assert history.saves == 2
    assert keeper.samples == 31
    history.fail = None
    run_for(keeper, cluster.clock, 1)
    assert history.saves == 3
    assert history.kept.end == math.floor(cluster.clock.now().timestamp() / 300) - 1


def test_without_a_forecast_no_history_is_kept() -> None:
    cluster, _, _, keeper = world()
    history = MemoryHistory()
    keeper.history = history
    run_for(keeper, cluster.clock, 25)
    assert history.reads == history.saves == 0


def test_a_host_asleep_on_purpose_is_no_warning_but_one_silent_by_surprise_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster, _, _, keeper = world()
    asleep = {"b"}
    keeper.asleep = lambda: asleep
    cluster.unreachable("b")
    with caplog.at_level("INFO", logger="reconciler.engine.sampling"):
        run_for(keeper, cluster.clock, 3)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == []
    assert any("b: none, asleep on purpose" in r.getMessage() for r in caplog.records)
    # woken, then silent without power saving knowing: a warning, once
    cluster.unreachable("b", False)
    run_for(keeper, cluster.clock, 1)
    asleep.clear()
    cluster.unreachable("b")
    caplog.clear()
    with caplog.at_level("INFO", logger="reconciler.engine.sampling"):
        run_for(keeper, cluster.clock, 3)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("load sample of b:"), warnings
