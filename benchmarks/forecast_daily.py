"""``statistic: forecast`` against ``mean`` at the same threshold, on synthetic daily cycles.

A week (by default) of load every 5 minutes: VMs in three groups whose demand peaks each day
in the morning, at midday or in the evening (a smooth bump of a few hours on a low base, its
height and time a little different each day), plus noise. The VMs start spread over the hosts
by ``place``; each policy is replayed by the simulator from the same start
(``reconciler.core.simulation.setup.simulated``), deciding each round as ``run`` does. The
forecast learns from the trace's figures before each round only (``forecast.history``): the
first two days have no forecast (too little history), the figures of those days are the
window's mean under both policies.

Scored over the whole trace (SLATAH: share of active host time at 100% of its CPUs; hours
over hostLimit; migrations) and, from the per-round timeline, over the days after the first
two, where the forecast can act (host-hours a round saw above hostLimit, moves started).
Numbers in ``benchmarks/README.md`` ("Forecast on synthetic daily cycles").

Run: ``.venv/bin/python benchmarks/forecast_daily.py [--threshold 20] [--days 7] [--vms 40]
[--hosts 6] [--seeds 1,2,3] [--noise 0.1] [--forecasts 30m:0.5,1h:0.5] [--model seasonal]
[--window 10m]``.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reconciler.core.simulation.setup import simulated
from reconciler.core.simulation.trace import Trace, TraceVm
from reconciler.model.base import API_VERSION, Metadata
from reconciler.model.cluster import Cluster, ClusterMetadata, ClusterSpec, Host, Reserve
from reconciler.model.desired import DesiredState
from reconciler.model.placement import Placement, PlacementSpec
from reconciler.model.policy import BalancePolicy, BalancePolicySpec
from reconciler.model.rules import PlacementRules, PlacementRulesSpec
from reconciler.model.simulation import HostKind, PolicyFigures, PowerCurve

GIB = 1024**3
STEP = 300.0
START = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday
PEAKS = (9.0, 13.5, 19.0)
"""Hours of the day each group of VMs peaks at."""
KIND = HostKind(name="node", cpus=8, memory=64 * GIB, power=PowerCurve(idle=100, peak=250))


def demand(rng: random.Random, peak: float, days: int, noise: float) -> tuple[float, ...]:
    """One VM's cores every 5 minutes: a base, a daily bump at about ``peak`` o'clock, noise."""
    base = rng.uniform(0.2, 0.6)
    height = rng.uniform(1.2, 2.2)
    width = rng.uniform(1.5, 3.0)  # hours
    out = []
    for _ in range(days):
        at = peak + rng.uniform(-0.5, 0.5)
        h = height * rng.uniform(0.9, 1.1)
        for k in range(round(86400 / STEP)):
            hour = k * STEP / 3600.0
            bump = h * math.exp(-0.5 * ((hour - at) / (width / 2)) ** 2)
            value = (base + bump) * (1 + rng.gauss(0, noise))
            out.append(round(max(0.0, min(3.9, value)), 4))
    return tuple(out)


def synthetic(days: int, vms: int, seed: int, noise: float) -> Trace:
    rng = random.Random(seed)
    names = [f"vm-{i:03d}" for i in range(vms)]
    rows = tuple(demand(rng, PEAKS[i % len(PEAKS)], days, noise) for i in range(vms))
    return Trace(
        source=f"synthetic daily cycles, {days}d, seed {seed}",
        start=START,
        step=STEP,
        vms=tuple(TraceVm(name=n, vcpus=4, memory=4 * GIB) for n in names),
        demand=rows,
    )


def cluster(hosts: int, load: dict[str, object], **spec: object) -> DesiredState:
    names = [f"node-{i:02d}" for i in range(hosts)]
    policy = BalancePolicySpec.model_validate(
        {
            "mode": "apply",
            "basis": "used",
            "interval": "15m",
            "cooldown": "30m",
            "minUptime": "0s",
            "holdRounds": 1,
            "load": load,
            **spec,
        }
    )
    return DesiredState(
        cluster=Cluster(
            api_version=API_VERSION,
            kind="Cluster",
            metadata=ClusterMetadata(name="synthetic"),
            spec=ClusterSpec(
                hosts=[
                    Host(name=n, uri=f"sim:///{n}", reserve=Reserve(memory=0, cpus=0))
                    for n in names
                ]
            ),
        ),
        policy=BalancePolicy(
            api_version=API_VERSION, kind="BalancePolicy", metadata=Metadata(name="p"), spec=policy
        ),
        rules=PlacementRules(
            api_version=API_VERSION,
            kind="PlacementRules",
            metadata=Metadata(name="r"),
            spec=PlacementRulesSpec(rules=[]),
        ),
        placement=Placement(
            api_version=API_VERSION,
            kind="Placement",
            metadata=Metadata(name="p"),
            spec=PlacementSpec(vms={}),
        ),
    )


def compare(
    trace: Trace,
    hosts: int,
    *,
    threshold: float,
    forecasts: list[dict[str, object]],
    window: str = "10m",
    steps: int | None = None,
) -> list[PolicyFigures]:
    """``mean`` and ``forecast`` with each of ``forecasts`` at ``threshold`` on ``trace``,
    from the same start."""
    base: dict[str, object] = {"window": window, "sampleEvery": "5m", "source": "prometheus"}
    policies = [("mean", cluster(hosts, {**base, "statistic": "mean"}, threshold=threshold))]
    for f in forecasts:
        name = f"forecast {f['horizon']} w{f['weight']}"
        load: dict[str, object] = {**base, "statistic": "forecast", "forecast": f}
        policies.append((name, cluster(hosts, load, threshold=threshold)))
    kinds = {h.name: KIND for h in policies[0][1].cluster.spec.hosts}
    return simulated("synthetic", policies, trace, kinds, steps=steps).policies


def scored(figures: PolicyFigures, since: float, interval: float) -> tuple[float, int]:
    """Host-hours over hostLimit (as the rounds saw them) and migrations started from
    ``since`` seconds on, from the per-round timeline."""
    later = [p for p in figures.timeline if p.at >= since]
    return sum(p.hot for p in later) * interval / 3600.0, sum(p.migrations for p in later)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--vms", type=int, default=40)
    parser.add_argument("--hosts", type=int, default=6)
    parser.add_argument("--threshold", type=float, default=10)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument(
        "--forecasts", default="30m:0.5,1h:0.5", help="horizon:weight, comma-separated"
    )
    parser.add_argument("--model", default="seasonal")
    parser.add_argument("--window", default="10m")
    args = parser.parse_args()
    forecasts: list[dict[str, object]] = []
    for item in args.forecasts.split(","):
        horizon, weight = item.split(":")
        forecasts.append({"horizon": horizon, "weight": float(weight), "model": args.model})
    totals: dict[str, list[float]] = {}
    print(
        f"{args.days}d of daily cycles every 5m, {args.vms} VMs on {args.hosts} hosts of 8 "
        f"CPUs, threshold {args.threshold:g}, window {args.window}, rounds every 15m"
    )
    print("seed policy             slatah  h>limit  migrations back | day 3 on: hot host-h  moves")
    for seed in (int(s) for s in args.seeds.split(",")):
        trace = synthetic(args.days, args.vms, seed, args.noise)
        began = time.perf_counter()
        results = compare(
            trace, args.hosts, threshold=args.threshold, forecasts=forecasts, window=args.window
        )
        for f in results:
            hot, moves = scored(f, 2 * 86400.0, 900.0)
            row = [f.slatah, f.hours_over_limit, f.migrations, f.moved_back, hot, moves]
            acc = totals.setdefault(f.policy, [0.0] * len(row))
            for i, v in enumerate(row):
                acc[i] += v
            print(
                f"{seed:>4} {f.policy:<18} {f.slatah:.5f} {f.hours_over_limit:8.2f} "
                f"{f.migrations:11d} {f.moved_back:4d} | {hot:18.2f} {moves:6d}"
            )
        print(f"     ({time.perf_counter() - began:.0f}s)", file=sys.stderr)
    n = len(args.seeds.split(","))
    for name, acc in totals.items():
        print(
            f"mean {name:<18} {acc[0] / n:.5f} {acc[1] / n:8.2f} {acc[2] / n:11.1f} "
            f"{acc[3] / n:4.1f} | {acc[4] / n:18.2f} {acc[5] / n:6.1f}"
        )


if __name__ == "__main__":
    main()
