"""``statistic: forecast`` in the snapshot the planner reads: each VM's figure is its window's
mean blended with its forecast where it has one that is not worse than the window; the view
names the VMs forecast, those without history and those whose forecast erred too much; an
unknown window stays unknown."""

from __future__ import annotations

import math
import random
from datetime import timedelta

from reconciler.core import load_view
from reconciler.core.forecast import DAY
from reconciler.core.load_window import Reading
from reconciler.core.planner import plan
from reconciler.model.history import History
from reconciler.model.load import LoadSource, LoadSpec, Statistic
from reconciler.report.plan_table import load_texts
from tests.core.builders import NOW, desired, host, host_state, snapshot, vm

STEP = 300.0
END = NOW.timestamp()
SPEC = LoadSpec(
    source=LoadSource.PROMETHEUS,
    window=timedelta(minutes=10),
    sample_every=timedelta(seconds=30),
    statistic=Statistic.FORECAST,
    forecast={"horizon": "30m", "weight": 0.5},  # type: ignore[arg-type]
)


def cycle(t: float) -> float:
    """Cores over the day: 0.5 at night, 2.5 at 14:00 (points stand for the step before)."""
    return 1.5 - math.cos(2 * math.pi * ((t - STEP) % DAY) / DAY)


def history(days: float, cores: object = cycle) -> list[tuple[float, float]]:
    assert callable(cores)
    return [(END - k * STEP, float(cores(END - k * STEP))) for k in range(round(days * DAY / STEP))]


def window(value: float) -> list[tuple[float, float]]:
    return [(END - k * 30.0, value) for k in range(20)]


def wander(t: float) -> float:
    """A level that wanders with no daily cycle: yesterday says nothing of today, the last
    minutes say most."""
    rng = random.Random(int((END - t) / STEP) // 12)  # a new level every hour
    return 0.5 + 3 * rng.random()


def test_the_figure_blends_the_forecast_where_the_history_allows() -> None:
    snap = snapshot(
        [host_state("h1"), host_state("h2")],
        [
            vm("cyclic", "h1", vcpus=4),
            vm("new", "h1", vcpus=4),
            vm("noisy", "h2", vcpus=4),
            vm("unseen", "h2", vcpus=4, cpu_used=0.25),
        ],
    )
    points = {"cyclic": window(1.0), "new": window(1.0), "noisy": window(1.0)}
    past = {"cyclic": history(3), "new": history(1), "noisy": history(3, wander), "unseen": []}
    got = load_view.from_points(snap, SPEC, points, NOW, history=past, history_step=STEP)
    view = got.load
    assert view is not None
    assert view.forecast is not None
    assert view.forecast.used == ["cyclic"]
    assert view.forecast.no_history == ["new"]
    assert list(view.forecast.ignored) == ["noisy"]
    assert "erred by" in view.forecast.ignored["noisy"]
    coming = sum(cycle(END + k * STEP) for k in range(1, 7)) / 6
    cyclic = view.vms["cyclic"]
    assert cyclic.forecast is not None
    assert abs(cyclic.forecast - coming) < 1e-3
    assert cyclic.forecast_error == 0.0
    used = {str(v.name): v.cpu_used for v in got.vms}
    assert used["cyclic"] is not None
    assert abs(used["cyclic"] - (0.5 * coming + 0.5)) < 1e-3
    assert used["new"] == 1.0  # the window's mean stands
    assert used["noisy"] == 1.0
    # no window: unknown, and a forecast does not make it known
    assert view.vms["unseen"].window is None
    assert used["unseen"] == 0.25
    assert load_view.unknown(got).vms == frozenset({"unseen"})


def test_a_fresh_look_keeps_what_the_forecast_made_of_the_figures() -> None:
    snap = snapshot([host_state("h1")], [vm("cyclic", "h1", vcpus=4)])
    got = load_view.from_points(
        snap, SPEC, {"cyclic": window(1.0)}, NOW, history={"cyclic": history(3)}, history_step=STEP
    )
    assert got.load is not None
    again = load_view.reapplied(snap, got.load)
    assert again.load is not None
    assert again.load.forecast == got.load.forecast
    assert again.load.vms["cyclic"] == got.load.vms["cyclic"]
    assert again.vms[0].cpu_used == got.vms[0].cpu_used


def test_without_history_the_window_stands_and_the_plan_says_so() -> None:
    snap = snapshot([host_state("h1")], [vm("a", "h1", vcpus=4)])
    # Prometheus without a history query (it failed), and run's samples (they keep the window)
    got = load_view.from_points(snap, SPEC, {"a": window(1.5)}, NOW)
    assert got.vms[0].cpu_used == 1.5
    assert got.load is not None
    assert got.load.forecast is not None
    assert got.load.forecast.no_history == ["a"]
    spec = SPEC.model_copy(update={"source": LoadSource.SAMPLES})
    readings = [
        Reading(at=END - 600 + 30 * k, cpu_ns=k * 30 * 10**9, host="h1", uuid="uuid-a")
        for k in range(21)
    ]
    got = load_view.from_readings(snap, spec, {"a": readings}, NOW)
    assert got.vms[0].cpu_used == 1.0
    assert got.load is not None
    assert got.load.forecast is not None
    assert got.load.forecast.no_history == ["a"]
    assert got.load.forecast.used == []


def test_other_statistics_make_no_forecast() -> None:
    snap = snapshot([host_state("h1")], [vm("a", "h1", vcpus=4)])
    spec = SPEC.model_copy(update={"statistic": Statistic.MEAN})
    got = load_view.from_points(snap, spec, {"a": window(1.5)}, NOW, history={"a": history(3)})
    assert got.load is not None
    assert got.load.forecast is None
    assert got.load.vms["a"].forecast is None
    assert got.vms[0].cpu_used == 1.5


def test_the_plan_says_which_vms_were_forecast_and_which_kept_their_window() -> None:
    snap = snapshot(
        [host_state("h1"), host_state("h2")],
        [vm("cyclic", "h1", vcpus=4), vm("new", "h1", vcpus=4), vm("noisy", "h2", vcpus=4)],
    )
    points = {name: window(1.0) for name in ("cyclic", "new", "noisy")}
    past = {"cyclic": history(3), "new": history(1), "noisy": history(3, wander)}
    got = load_view.from_points(snap, SPEC, points, NOW, history=past, history_step=STEP)
    d = desired([host("h1"), host("h2")], basis="used", load={"statistic": "forecast"})
    p = plan(d, got, History(), now=NOW)
    assert p.load is not None
    assert p.load.statistic == "forecast"
    assert got.load is not None
    assert p.load.forecast == got.load.forecast
    texts = load_texts(p.load)
    assert texts is not None
    title, said = texts
    assert title == "Load: forecast over 10m, from prometheus"
    assert said[0] == "forecast 30m ahead (seasonal, weight 0.5) blended into 1 VM(s)"
    assert said[1] == "too little history to forecast, the window's mean stands: new"
    assert said[2].startswith("forecast not used, the window's mean stands: noisy: its forecast")
