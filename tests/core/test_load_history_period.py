"""The history run keeps from its own samples with a short seasonal period: buckets of a 48th
of it (at least sampleEvery) rather than 5 minutes, so that a 10-minute cycle is learnt from
run's samples as from Prometheus; a history of another width starts again."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import numpy as np

from reconciler.core import load_history, load_samples
from reconciler.core.load_history import BUCKET, LoadHistory, points, width
from reconciler.core.load_view import from_readings
from reconciler.model.load import LoadSpec
from tests.core.builders import host_state, snapshot, vm
from tests.core.test_load_history import SPEC, Run

PERIOD = 600.0
SHORT = LoadSpec.model_validate(
    {
        "window": "1m",
        "sampleEvery": "5s",
        "statistic": "forecast",
        "forecast": {"period": "10m", "history": "1h", "horizon": "3m", "weight": 1},
    }
)


def schedule(name: str, t: float) -> float:
    """The lab's schedule: 0.1 cores, 0.95 from the 4th to the 7th minute of each 10."""
    return 0.95 if 240 <= t % PERIOD < 420 else 0.1


def test_the_buckets_follow_a_short_period_and_the_default_keeps_5_minutes() -> None:
    assert width(SPEC) == BUCKET == 300.0
    assert width(SHORT) == 12.5
    assert load_history.slots_of(SHORT) == 288
    assert load_history.keep_seconds(SHORT) == 60 + 15  # the window, and three sampleEvery
    slow = SHORT.model_copy(update={"sample_every": timedelta(seconds=30)})
    assert width(slow) == 30.0  # never narrower than a sample


def test_a_10_minute_cycle_is_forecast_from_the_samples_run_keeps() -> None:
    r = Run(SHORT, every=5.0)
    r.at = math.floor(r.at / PERIOD) * PERIOD
    r.run(2.5 * PERIOD - 90, schedule, ("x",))  # to 90 s before the third peak
    h = r.history
    assert h is not None
    assert h.bucket == 12.5
    assert h.slots == 288
    got = points(h, ["x"])["x"]
    assert all(b[0] - a[0] == 12.5 for a, b in pairwise(got))
    assert r.store is not None
    snap = snapshot([host_state("a")], [vm("x", "a", vcpus=1)])
    when = datetime.fromtimestamp(r.at, UTC)
    out = from_readings(
        snap,
        SHORT,
        load_samples.readings(r.store),
        when,
        history={"x": got},
        history_step=h.bucket,
    )
    assert out.load is not None
    assert out.load.forecast is not None
    assert out.load.forecast.used == ["x"]
    coming = sum(schedule("x", r.at + k) for k in range(1, 181)) / 180
    fc = out.load.vms["x"].forecast
    assert fc is not None
    assert abs(fc - coming) <= 0.05 * coming
    assert fc > 0.3  # the peak is seen coming; the window (0.1) does not see it
    assert out.load.vms["x"].mean is not None
    assert abs(out.load.vms["x"].mean - 0.1) < 1e-3


def test_a_history_of_another_width_starts_again() -> None:
    r = Run(SHORT, every=5.0)
    r.run(600, schedule, ("x",))
    assert r.history is not None
    daily = SHORT.model_copy(
        update={"forecast": SHORT.forecast.model_copy(update={"period": timedelta(days=1)})}
    )
    r.spec = daily
    r.run(600, lambda name, t: 2.0, ("x",))
    h = r.history
    assert isinstance(h, LoadHistory)
    assert h.bucket == 300.0
    assert h.slots == 12
    assert {round(v, 3) for _, v in points(h, ["x"])["x"]} == {2.0}  # nothing of 12.5 s ones
    assert bool(np.isnan(h.values[0, :-2]).all())
