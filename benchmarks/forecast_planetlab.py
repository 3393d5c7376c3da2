"""``statistic: forecast`` against ``mean`` on PlanetLab days it never saw: train on the
earlier day(s), score the later one.

The three PlanetLab days at hand (``20110303``, ``20110306``, ``20110309``, one day each of 288
five-minute figures per VM) are joined, in that order, into one trace of the VMs present on
all three (403 of about 1,000), laid end to end as consecutive days. Two cases:

- **train 0303 -> score 0306**: the trace [0303, 0306] of the 558 VMs of both days; the
  forecast learns from 0303 (and from 0306 only up to each round, as ``run`` would);
- **train 0303 + 0306 -> score 0309**: the trace [0303, 0306, 0309] of the 403 VMs of all
  three.

Each policy is replayed from the same start (``reconciler.core.simulation.setup.simulated``),
each round decided as ``run`` decides it. Only the scored day is scored: hours over hostLimit
and migrations of the scored day are the whole trace's less those of the training day(s)
alone (the same replay cut where the scored day begins: the replay is causal, so its
training days are the prefix of the whole); hot host-hours and moves as the rounds of the
scored day saw them, from the per-round timeline. ``seasonal`` needs two days of history
before its first forecast, so with one training day it makes none (the figures equal
``mean``'s); ``trend`` needs none.

VMs of 1 vCPU and 512 MiB, each VM's demand its PlanetLab percentage of a core; hosts of 8
CPUs (``forecast_daily.KIND``), as many as make them ``--busy`` (60%) busy on average over
the case; the policy of ``forecast_daily.py`` (window 10m, rounds every 15m, cooldown 30m,
hostLimit 90) with ``cpuOvercommit: 16`` (PlanetLab's VMs are many and small).

Run: ``.venv/bin/python benchmarks/forecast_planetlab.py [--traces ../shared/traces/planetlab]
[--busy 0.6] [--threshold 20] [--case 1|2]``. Numbers in ``benchmarks/README.md``
("Forecast on held-out PlanetLab days").
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from forecast_daily import KIND, cluster

from reconciler.adapters.traces import read_planetlab
from reconciler.core.simulation.setup import simulated
from reconciler.core.simulation.trace import Trace, TraceVm
from reconciler.model.desired import DesiredState
from reconciler.model.simulation import PolicyFigures

GIB = 1024**3
DAYS = ("20110303", "20110306", "20110309")
CASES = ((("20110303",), "20110306"), (("20110303", "20110306"), "20110309"))
VCPUS = 1
INTERVAL = 900.0


def day(folder: Path) -> Trace:
    return read_planetlab(
        folder,
        lambda i, name: TraceVm(name=name, vcpus=VCPUS, memory=GIB // 2),
        lambda i: float(VCPUS),
    )


def joined(traces: list[Trace]) -> Trace:
    """The VMs present on every day, their days end to end."""
    names = set.intersection(*({vm.name for vm in t.vms} for t in traces))
    order = sorted(names)
    rows = []
    for name in order:
        row: list[float] = []
        for t in traces:
            i = next(k for k, vm in enumerate(t.vms) if vm.name == name)
            row.extend(t.demand[i])
        rows.append(tuple(row))
    first = traces[0]
    vms = tuple(next(vm for vm in first.vms if vm.name == n) for n in order)
    return replace(
        first,
        source="PlanetLab " + " + ".join(Path(t.source).name for t in traces),
        vms=vms,
        demand=tuple(rows),
    )


def policies(hosts: int, threshold: float) -> list[tuple[str, DesiredState]]:
    base: dict[str, object] = {"window": "10m", "sampleEvery": "5m", "source": "prometheus"}
    spec: dict[str, object] = {"threshold": threshold, "cpuOvercommit": 16}
    out: list[tuple[str, DesiredState]] = [
        ("mean", cluster(hosts, {**base, "statistic": "mean"}, **spec))
    ]
    for model in ("seasonal", "trend"):
        f = {"horizon": "30m", "weight": 0.5, "model": model, "history": "7d"}
        load = {**base, "statistic": "forecast", "forecast": f}
        out.append((f"forecast {model} 30m", cluster(hosts, load, **spec)))
    return out


def scored(
    whole: PolicyFigures, train: PolicyFigures, since: float
) -> tuple[float, int, float, int]:
    """Of the scored day: hours over hostLimit and migrations (whole less training), hot
    host-hours and moves as its rounds saw them."""
    later = [p for p in whole.timeline if p.at >= since]
    return (
        whole.hours_over_limit - train.hours_over_limit,
        whole.migrations - train.migrations,
        sum(p.hot for p in later) * INTERVAL / 3600.0,
        sum(p.migrations for p in later),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=Path, default=Path("../shared/traces/planetlab"))
    parser.add_argument(
        "--busy", type=float, default=0.6, help="hosts for this mean utilisation of their CPUs"
    )
    parser.add_argument("--case", type=int, choices=(1, 2), help="one case only")
    parser.add_argument("--threshold", type=float, default=20)
    args = parser.parse_args()
    days = {d: day(args.traces / d) for d in DAYS}
    print(
        f"PlanetLab days end to end, the VMs of every day of a case, {VCPUS} vCPU each; hosts "
        f"of {KIND.cpus} CPUs for {args.busy:.0%} busy on average; threshold "
        f"{args.threshold:g}, window 10m, rounds every 15m"
    )
    print(
        "case          VMs hosts policy                 h>limit  migr | rounds: hot host-h  moves"
    )
    for n, (train, score) in enumerate(CASES, 1):
        if args.case is not None and n != args.case:
            continue
        trace = joined([days[d] for d in (*train, score)])
        cut = len(train) * round(86400 / trace.step)
        mean = sum(sum(row) for row in trace.demand) / trace.steps
        hosts = max(2, round(mean / (KIND.cpus * args.busy)))
        named = policies(hosts, args.threshold)
        kinds = {h.name: KIND for h in named[0][1].cluster.spec.hosts}
        began = time.perf_counter()
        whole = simulated("planetlab", named, trace, kinds).policies
        prefix = simulated("planetlab", named, trace, kinds, steps=cut).policies
        case = f"{'+'.join(d[4:] for d in train)} -> {score[4:]}"
        for w, t in zip(whole, prefix, strict=True):
            hours, migrations, hot, moves = scored(w, t, cut * trace.step)
            print(
                f"{case:<13} {len(trace.vms):3d} {hosts:5d} {w.policy:<22} {hours:7.2f} "
                f"{migrations:5d} | {hot:17.2f} {moves:6d}",
                flush=True,
            )
        print(f"     ({len(trace.vms)} VMs, {time.perf_counter() - began:.0f}s)", file=sys.stderr)


if __name__ == "__main__":
    main()
