"""The forecast's history kept from run's own samples: 5-minute buckets per VM, folded as
samples come, bounded, unknown where nothing was sampled (never zero), and the forecast read
from it as from Prometheus's history."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core import load_history, load_samples
from reconciler.core.forecast import DAY
from reconciler.core.load_history import BUCKET, LoadHistory, folded, points
from reconciler.core.load_samples import HostSample, added
from reconciler.core.load_view import from_readings
from reconciler.model.load import LoadSamples, LoadSpec
from tests.core.builders import NOW, host_state, snapshot, vm

SPEC = LoadSpec.model_validate(
    {"window": "10m", "sampleEvery": "30s", "statistic": "forecast", "forecast": {"history": "2d"}}
)
NS = 1_000_000_000
START = math.floor(NOW.timestamp() / BUCKET) * BUCKET - 3 * DAY


class Run:
    """run's sampling of VMs whose cores follow ``rate(name, t)``, every ``every`` seconds,
    each sample added to the window and folded into the history, as SampleKeeper does."""

    def __init__(self, spec: LoadSpec = SPEC, every: float = 30.0) -> None:
        self.spec = spec
        self.every = every
        self.store: LoadSamples | None = None
        self.history: LoadHistory | None = None
        self.counters: dict[str, float] = {}
        self.uuids: dict[str, str] = {}
        self.at = START
        self.folds = 0

    def run(
        self,
        seconds: float,
        rate: Callable[[str, float], float],
        names: tuple[str, ...],
        *,
        silent: bool = False,
    ) -> None:
        for _ in range(round(seconds / self.every)):
            self.at += self.every
            vms = []
            for name in names:
                self.counters[name] = (
                    self.counters.get(name, 0.0) + rate(name, self.at) * self.every
                )
                uuid = self.uuids.setdefault(name, f"u-{name}")
                vms.append((name, uuid, 1, round(self.counters[name] * NS)))
            sample = (
                HostSample("a", self.at, error="down")
                if silent
                else HostSample("a", self.at, tuple(vms))
            )
            self.store = added(self.store, "c", self.spec, [sample], self.at)
            uuids = {n: s.uuid for n, s in self.store.vms.items()}
            new = folded(
                self.history, "c", self.spec, load_samples.readings(self.store), uuids, self.at
            )
            if new is not None:
                self.history = new
                self.folds += 1


def test_a_steady_vm_fills_its_buckets_with_its_rate_and_the_row_stays_bounded() -> None:
    r = Run()
    r.run(3 * 3600, lambda name, t: 0.75, ("x",))
    h = r.history
    assert h is not None
    assert h.slots == 576  # 2d of 5m buckets, however long it ran
    assert h.values.dtype == np.float16
    assert r.folds == 36  # one per bucket completed, written once
    got = points(h, ["x", "unknown"])
    assert list(got) == ["x"]
    assert len(got["x"]) in (35, 36)  # the first bucket may be part-covered
    assert all(abs(v - 0.75) < 1e-3 for _, v in got["x"])
    # each point at the end of its bucket, the last at the end of the last bucket completed
    assert got["x"][-1][0] == math.floor(r.at / BUCKET) * BUCKET
    assert all(b[0] - a[0] == BUCKET for a, b in zip(got["x"], got["x"][1:], strict=False))


def test_a_bucket_nothing_sampled_is_unknown_not_zero_and_a_gone_vm_is_dropped() -> None:
    r = Run()
    r.run(1800, lambda name, t: 1.5, ("x", "y"))
    r.run(900, lambda name, t: 1.5, ("x", "y"), silent=True)  # the host did not answer
    r.run(1800, lambda name, t: 1.5, ("x",))  # y is gone
    h = r.history
    assert h is not None
    got = points(h, ["x", "y"])
    times = [t for t, _ in got["x"]]
    assert all(abs(v - 1.5) < 1e-3 for _, v in got["x"])  # no zero for the silent quarter hour
    assert len(times) < 4500 / BUCKET - 2  # the silent buckets are missing, not zero
    assert "y" in h.names  # still in its history
    later = Run()
    later.history, later.at, later.counters = h, r.at, r.counters
    later.store = r.store
    later.run(2 * DAY + 600, lambda name, t: 1.0, ("x",), silent=False)
    assert later.history is not None
    assert later.history.names == ("x",)  # nothing of y left within the history


def test_another_domain_of_the_name_starts_an_empty_row() -> None:
    r = Run()
    r.run(1800, lambda name, t: 2.0, ("x",))
    r.uuids["x"] = "u-new"
    r.counters["x"] = 0.0
    r.run(900, lambda name, t: 0.5, ("x",))
    assert r.history is not None
    assert r.history.uuids == ("u-new",)
    assert {round(v, 3) for _, v in points(r.history, ["x"])["x"]} == {0.5}


def test_a_shorter_history_keeps_the_latest_buckets() -> None:
    r = Run()
    r.run(3600, lambda name, t: 1.0 + (t // BUCKET) % 2, ("x",))
    before = points(r.history, ["x"])["x"]
    r.spec = SPEC.model_copy(
        update={"forecast": SPEC.forecast.model_copy(update={"history": timedelta(hours=1)})}
    )
    r.run(30, lambda name, t: 1.0 + (t // BUCKET) % 2, ("x",))
    assert r.history is not None
    assert r.history.slots == 12
    assert points(r.history, ["x"])["x"] == before[-12:]  # no bucket ended since


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0, 8, allow_nan=False), min_size=3, max_size=12))
def test_each_bucket_is_the_mean_that_held_in_it(rates: list[float]) -> None:
    """A VM whose rate changes at bucket boundaries: every bucket folded whole is that rate
    (within half-precision rounding), whatever the rates."""
    r = Run()
    first = math.floor(START / BUCKET) + 1

    def rate(name: str, t: float) -> float:
        k = min(len(rates) - 1, max(0, math.floor((t - 1) / BUCKET) - first))
        return rates[k]

    r.run(BUCKET * (len(rates) + 1), rate, ("x",))
    got = dict(points(r.history, ["x"])["x"])
    for k, want in enumerate(rates[:-1]):
        end = (first + k + 1) * BUCKET
        if end in got:
            assert abs(got[end] - want) <= 2e-3 * max(1.0, want), (k, got[end], want)
    assert len(got) >= len(rates) - 1


def test_the_forecast_reads_the_history_run_keeps() -> None:
    """Three days of a daily cycle sampled by run: the forecast of the next 30 minutes is
    made from the buckets, as from Prometheus's history."""

    def cycle(name: str, t: float) -> float:
        return 1.5 - math.cos(2 * math.pi * (t % DAY) / DAY)

    spec = SPEC.model_copy(update={"sample_every": timedelta(minutes=5)})
    r = Run(spec, every=300.0)
    r.run(3 * DAY, cycle, ("x",))
    now = r.at
    snap = snapshot([host_state("a")], [vm("x", "a", vcpus=4)])
    assert r.store is not None
    assert r.history is not None
    series = load_samples.readings(r.store)
    from datetime import UTC, datetime

    when = datetime.fromtimestamp(now, UTC)
    got = from_readings(snap, spec, series, when, history=points(r.history, ["x"]))
    assert got.load is not None
    assert got.load.forecast is not None
    assert got.load.forecast.used == ["x"]
    coming = sum(cycle("x", now + k * 60) for k in range(1, 31)) / 30
    fc = got.load.vms["x"].forecast
    assert fc is not None
    assert abs(fc - coming) < 0.05
    # without the history, none: the window's mean stands, named
    bare = from_readings(snap, spec, series, when)
    assert bare.load is not None
    assert bare.load.forecast is not None
    assert bare.load.forecast.no_history == ["x"]


def test_run_keeps_readings_back_over_a_whole_bucket() -> None:
    short = SPEC.model_copy(
        update={"window": timedelta(seconds=30), "sample_every": timedelta(seconds=10)}
    )
    assert load_samples.keep_seconds(short) == BUCKET + 30
    assert load_history.keep_seconds(short) == BUCKET + 30
