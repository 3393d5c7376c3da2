"""The simulator replays ``statistic: forecast``: each round's forecast learns from the trace's
figures before it, up to ``forecast.history``; none in the first two days."""

from __future__ import annotations

import math
from datetime import timedelta

from reconciler.core.simulation.setup import shape_of, shaped
from reconciler.core.simulation.world import World
from tests.core.test_simulation import SMALL, policy, trace

STEP = 300.0
DAY_STEPS = 288


def daily(k: int, phase: int) -> float:
    return round(1.0 - 0.8 * math.cos(2 * math.pi * ((k + phase) % DAY_STEPS) / DAY_STEPS), 4)


def test_a_round_forecasts_from_the_trace_before_it() -> None:
    rows = [[daily(k, p) for k in range(3 * DAY_STEPS)] for p in (0, 96)]
    load = {"window": "10m", "sampleEvery": "5m", "statistic": "forecast", "source": "prometheus"}
    shape = shape_of("2xsmall", {"small": SMALL})
    desired, kinds = shaped(policy(basis="used", load=load), shape)
    t = trace(rows, STEP)
    world = World(desired, t, kinds, {"vm-0": "small-001", "vm-1": "small-002"})
    early = world.snapshot(t.start + timedelta(days=1, hours=12))
    assert early.load is not None
    assert early.load.forecast is not None
    assert early.load.forecast.no_history == ["vm-0", "vm-1"]
    now = 2 * DAY_STEPS + 100
    later = world.snapshot(t.start + timedelta(seconds=now * STEP))
    assert later.load is not None
    assert later.load.forecast is not None
    assert later.load.forecast.used == ["vm-0", "vm-1"]
    for i, vm in enumerate(later.vms):
        phase = (0, 96)[i]
        coming = sum(daily(now + k, phase) for k in range(6)) / 6
        window = sum(daily(now - k, phase) for k in (1, 2)) / 2
        got = later.load.vms[vm.name]
        assert got.forecast is not None
        assert abs(got.forecast - coming) < 1e-3
        assert vm.cpu_used is not None
        assert abs(vm.cpu_used - (coming + window) / 2) < 1e-3
