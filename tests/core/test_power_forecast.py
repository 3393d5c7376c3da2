"""Power-on by forecast (``statistic: forecast``): a standby host is powered on when the
forecast of the next horizon says demand will be above the band, before it is, without
waiting ``powerOnAfter``; the simulator's rounds decide it the same way."""

from __future__ import annotations

import math
from datetime import timedelta

from reconciler.core.power import HostFacts, power_next
from reconciler.core.simulation.replay import RunDecider
from reconciler.core.simulation.setup import shape_of, shaped
from reconciler.core.simulation.world import World
from reconciler.model.desired import DesiredState
from reconciler.model.load import (
    ForecastModel,
    ForecastView,
    LoadBasis,
    LoadSource,
    LoadView,
    Statistic,
    VmLoad,
)
from reconciler.model.power import HostCapacity, PowerBook, StandbyHost
from reconciler.model.snapshot import Snapshot
from tests.core.builders import NOW, desired, host, host_state, snapshot, vm
from tests.core.test_simulation import SMALL, policy, trace

GIB = 2**30
HOSTS = ["h0", "h1", "h2"]
ALL = {h: HostFacts() for h in HOSTS}
"""Every host may be powered off."""


def cluster(statistic: str = "forecast") -> DesiredState:
    return desired(
        [host(h) for h in HOSTS],
        basis="used",
        load={"statistic": statistic, "forecast": {"horizon": "30m"}},
        power={"mode": "apply", "powerOffAfter": "30m", "powerOnAfter": "5m"},
    )


def looked(now: float, ahead: float, *, used: bool = True) -> Snapshot:
    """h0 and h1 in service (32 CPUs), two 16-vCPU VMs using ``now`` cores each, forecast
    to use ``ahead`` each over the next 30 minutes; h2 asleep."""
    vms = [vm(f"v{i}", h, vcpus=16, cpu_used=now, memory_gib=1) for i, h in enumerate(HOSTS[:2])]
    names = [str(v.name) for v in vms]
    view = LoadView(
        source=LoadSource.PROMETHEUS,
        basis=LoadBasis.WINDOW,
        window=timedelta(minutes=10),
        statistic=Statistic.FORECAST,
        until=NOW,
        vms={n: VmLoad(now=now, window=now, covered=1, forecast=ahead) for n in names},
        forecast=ForecastView(
            horizon=timedelta(minutes=30),
            weight=0.5,
            model=ForecastModel.SEASONAL,
            used=names if used else [],
            ignored={} if used else dict.fromkeys(names, "it erred"),
        ),
    )
    seen = snapshot([host_state(h, reachable=h != "h2") for h in HOSTS], vms)
    return seen.model_copy(update={"load": view})


BOOK = PowerBook(
    standby={"h2": StandbyHost(since=NOW - timedelta(hours=5), why="x")},
    capacity={"h2": HostCapacity(cpus=16, memory=64 * GIB)},
)


def test_a_forecast_above_the_band_powers_a_host_on_before_the_demand_is_there() -> None:
    decided = power_next(cluster(), looked(now=11, ahead=15), BOOK, NOW)  # 69% now, 94% ahead
    assert decided.power_on == ("h2",)
    assert decided.why["h2"].startswith("forecast: demand expected at 94%")
    assert "over the next 30m" in decided.why["h2"]


def test_a_forecast_within_the_band_powers_nothing_on() -> None:
    decided = power_next(cluster(), looked(now=11, ahead=12), BOOK, NOW)
    assert decided.power_on == ()


def test_a_forecast_the_plan_did_not_use_powers_nothing_on() -> None:
    decided = power_next(cluster(), looked(now=11, ahead=15, used=False), BOOK, NOW)
    assert decided.power_on == ()


def test_a_host_already_booting_counts_against_the_forecast() -> None:
    book = BOOK.model_copy(update={"standby": {}, "booting": {"h2": NOW}})
    decided = power_next(cluster(), looked(now=11, ahead=15), book, NOW)
    assert decided.power_on == ()


def test_no_host_is_emptied_for_a_lull_the_forecast_says_is_ending() -> None:
    awake = BOOK.model_copy(update={"standby": {}, "low_since": NOW - timedelta(hours=2)})
    seen = looked(now=1, ahead=12)
    seen = seen.model_copy(update={"hosts": [host_state(h) for h in HOSTS]})
    assert power_next(cluster(), seen, awake, NOW, facts=ALL).empty == ()
    quiet = looked(now=1, ahead=1).model_copy(update={"hosts": [host_state(h) for h in HOSTS]})
    assert power_next(cluster(), quiet, awake, NOW, facts=ALL).empty != ()


STEPS = 288


def daily(k: int) -> float:
    return round(1.0 - 0.8 * math.cos(2 * math.pi * (k % STEPS) / STEPS), 4)


def simulated(statistic: str) -> tuple[RunDecider, World, int]:
    """Four VMs of a daily cycle on two small hosts, the third asleep; two days learnt."""
    load = {
        "window": "10m",
        "sampleEvery": "5m",
        "statistic": statistic,
        "source": "prometheus",
        "forecast": {"horizon": "1h"},
    }
    power = {"mode": "apply", "band": {"low": 20, "high": 75}, "powerOnAfter": "5m"}
    shape = shape_of("3xsmall", {"small": SMALL})
    d, kinds = shaped(policy(basis="used", load=load, power=power), shape)
    t = trace([[daily(k) for k in range(3 * STEPS)] for _ in range(4)], 300.0)
    on = {"vm-0": "small-001", "vm-1": "small-001", "vm-2": "small-002", "vm-3": "small-002"}
    world = World(d, t, kinds, on)
    world.power_off("small-003")
    book = PowerBook(
        standby={"small-003": StandbyHost(since=t.start, why="x")},
        capacity={"small-003": HostCapacity(cpus=SMALL.cpus, memory=SMALL.memory)},
    )
    return RunDecider(d, book=book), world, 2 * STEPS + 100


def test_the_simulator_powers_on_by_forecast_before_the_daily_rise() -> None:
    """At 73% of the capacity in service now, 77% expected over the next hour: the forecast
    policy boots the standby host now; the mean policy does not (it is inside the band)."""
    for statistic, expected in (("forecast", 1), ("mean", 0)):
        decider, world, k = simulated(statistic)
        decider.decide(world, world.trace.start + timedelta(seconds=300.0 * k))
        assert decider.power_ons == expected, statistic
