"""A week of a 1,000-host cluster at 15-minute rounds, through the simulator, on one core.

The cluster: ``--hosts`` hosts of 32 CPUs and 256 GiB (110 W idle, 320 W at full load) and
``--vms`` VMs of 1-8 vCPUs and 2-16 GiB, each started on host ``i mod hosts``. The load: one
figure per VM every ``--step`` (15 minutes by default), a base, a daily bump in one of three
groups (morning, midday, evening; its time and height a little different per VM) and 10%
noise, the same for the same ``--seed``. The rows are computed when read
(:class:`DailyRow`), not held: the trace of a week of 15,000 VMs would be 10 million floats,
and the peak memory measured is then the simulator's own, flat or not in the number of rounds.

The policy is the product's default balance policy (``BalancePolicySpec`` defaults: basis
``used``, threshold 20, holdRounds 2, batch 4, cooldown 6h, hostLimit 90, window 10m), played
as ``apply`` every 15 minutes: each round ``core.next_actions`` decides, as ``run`` does.

Each period (``--days``, 1 and 7 by default) runs in a process of its own, so that each
peak resident size (``ru_maxrss``) is that period's alone; it prints the seconds of CPU,
the rounds, the migrations, the timeline's points and the peak memory. ``--profile FILE``
writes a cProfile of the first period instead.

Run: ``.venv/bin/python benchmarks/simulate_week.py [--days 1,7] [--hosts 1000]
[--vms 15000] [--step 15m] [--seed 1] [--format json]``. Figures in ``benchmarks/README.md``
("Simulator").
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import overload

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reconciler.core.simulation.meter import Meter
from reconciler.core.simulation.replay import RunDecider, replay
from reconciler.core.simulation.trace import Trace, TraceVm
from reconciler.core.simulation.world import World
from reconciler.model.base import API_VERSION, Metadata
from reconciler.model.cluster import Cluster, ClusterMetadata, ClusterSpec, Host
from reconciler.model.desired import DesiredState
from reconciler.model.placement import Placement, PlacementSpec
from reconciler.model.policy import BalancePolicy, BalancePolicySpec
from reconciler.model.quantity import parse_duration
from reconciler.model.rules import PlacementRules, PlacementRulesSpec
from reconciler.model.simulation import HostKind, PowerCurve

GIB = 1024**3
START = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday
PEAKS = (9.0, 13.5, 19.0)
"""Hours of the day each group of VMs peaks at."""
KIND = HostKind(name="r640", cpus=32, memory=256 * GIB, power=PowerCurve(idle=110, peak=320))
SIZES = ((1, 2), (2, 4), (4, 8), (8, 16))
"""(vCPUs, GiB) of the VM sizes, in turn."""
NOISE = 4099
"""Length of the shared table of noise (a prime: no VM repeats another's)."""


class DailyRow(Sequence[float]):
    """One VM's demand in cores, computed when read: a base, a daily bump, noise."""

    __slots__ = ("_amp", "_base", "_noise", "_offset", "_profile", "_steps")

    def __init__(
        self,
        base: float,
        amp: float,
        profile: Sequence[float],
        noise: Sequence[float],
        offset: int,
        steps: int,
    ) -> None:
        self._base, self._amp, self._profile = base, amp, profile
        self._noise, self._offset, self._steps = noise, offset, steps

    def __len__(self) -> int:
        return self._steps

    @overload
    def __getitem__(self, k: int) -> float: ...

    @overload
    def __getitem__(self, k: slice) -> Sequence[float]: ...

    def __getitem__(self, k: int | slice) -> float | Sequence[float]:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(self._steps))]
        if not 0 <= k < self._steps:
            raise IndexError(k)
        level = self._base + self._amp * self._profile[k % len(self._profile)]
        return max(0.0, level * self._noise[(self._offset + k) % NOISE])

    def __iter__(self) -> Iterator[float]:
        return (self[k] for k in range(self._steps))


def trace(vms: int, days: int, step: float, seed: int) -> Trace:
    """``vms`` VMs over ``days`` days, one figure every ``step`` seconds."""
    rng = random.Random(seed)
    per_day = round(86400 / step)
    noise = [1.0 + rng.uniform(-0.1, 0.1) for _ in range(NOISE)]
    profiles: dict[tuple[int, int], list[float]] = {}
    specs: list[TraceVm] = []
    rows: list[DailyRow] = []
    for i in range(vms):
        vcpus, gib = SIZES[i % len(SIZES)]
        group = rng.randrange(len(PEAKS))
        shift = rng.randrange(-2, 3)  # quarter hours
        width = rng.choice((2, 3))  # hours
        key = (group * 8 + shift, width)
        if key not in profiles:
            at = PEAKS[group] + shift / 4
            profiles[key] = [
                math.exp(-(((k * step / 3600 - at + 12) % 24 - 12) ** 2) / (2 * (width / 2) ** 2))
                for k in range(per_day)
            ]
        base = rng.uniform(0.05, 0.25) * vcpus
        amp = rng.uniform(0.2, 0.6) * vcpus
        specs.append(TraceVm(name=f"vm-{i:05d}", vcpus=vcpus, memory=gib * GIB))
        rows.append(DailyRow(base, amp, profiles[key], noise, rng.randrange(NOISE), days * per_day))
    return Trace(
        source=f"synthetic daily cycles, seed {seed}",
        start=START,
        step=step,
        vms=tuple(specs),
        demand=tuple(rows),
    )


def desired_of(hosts: int) -> DesiredState:
    names = [f"node-{i:04d}" for i in range(hosts)]
    return DesiredState(
        cluster=Cluster(
            api_version=API_VERSION,
            kind="Cluster",
            metadata=ClusterMetadata(name="week"),
            spec=ClusterSpec(hosts=[Host(name=n, uri=f"sim:///{n}") for n in names]),
        ),
        policy=BalancePolicy(
            api_version=API_VERSION,
            kind="BalancePolicy",
            metadata=Metadata(name="default"),
            spec=BalancePolicySpec.model_validate({"mode": "apply"}),
        ),
        rules=PlacementRules(
            api_version=API_VERSION,
            kind="PlacementRules",
            metadata=Metadata(name="week"),
            spec=PlacementRulesSpec(rules=[]),
        ),
        placement=Placement(
            api_version=API_VERSION,
            kind="Placement",
            metadata=Metadata(name="week"),
            spec=PlacementSpec(vms={}),
        ),
    )


def run(days: int, hosts: int, vms: int, step: float, seed: int) -> dict[str, object]:
    desired = desired_of(hosts)
    names = [h.name for h in desired.cluster.spec.hosts]
    load = trace(vms, days, step, seed)
    placement = {v.name: names[i % hosts] for i, v in enumerate(load.vms)}
    world = World(desired, load, {n: KIND for n in names}, placement)
    decider = RunDecider(desired, name="default")
    meter = Meter(limit=desired.policy.spec.host_limit / 100, idle_when_empty=True)
    interval = max(desired.policy.spec.interval, timedelta(seconds=step))
    began = time.process_time()
    figures = replay(world, decider, meter, interval=interval)
    seconds = time.process_time() - began
    return {
        "days": days,
        "hosts": hosts,
        "vms": vms,
        "rounds": figures.rounds,
        "migrations": figures.migrations,
        "slatah": round(figures.slatah, 6),
        "energy_kwh": round(figures.energy_kwh, 1),
        "timeline": len(figures.timeline),
        "seconds": round(seconds, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", default="1,7", help="periods to run, each in its own process")
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--vms", type=int, default=15000)
    parser.add_argument("--step", default="15m", help="the trace's step (rounds every 15m)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile the first period")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    step = parse_duration(args.step).total_seconds()
    periods = [int(d) for d in args.days.split(",")]
    if args.one or args.profile is not None:
        if args.profile is not None:
            import cProfile

            cProfile.runctx(
                "run(periods[0], args.hosts, args.vms, step, args.seed)",
                globals(),
                {"periods": periods, "args": args, "step": step},
                str(args.profile),
            )
            return
        print(json.dumps(run(periods[0], args.hosts, args.vms, step, args.seed)), flush=True)
        return
    for days in periods:
        command = [sys.executable, __file__, "--one", f"--days={days}", f"--hosts={args.hosts}"]
        command += [f"--vms={args.vms}", f"--step={args.step}", f"--seed={args.seed}"]
        answer = subprocess.run(command, capture_output=True, text=True, check=True, timeout=3600)
        row = json.loads(answer.stdout.strip().splitlines()[-1])
        if args.format == "json":
            print(json.dumps(row), flush=True)
        else:
            print(
                f"{row['days']} day(s), {row['hosts']} hosts, {row['vms']} VMs: "
                f"{row['rounds']} rounds, "
                f"{row['migrations']} migrations, SLATAH {100 * row['slatah']:.3f}%, "
                f"{row['energy_kwh']} kWh, {row['seconds']} s CPU, "
                f"peak RSS {row['peak_rss_mb']} MB, {row['timeline']} timeline points",
                flush=True,
            )


if __name__ == "__main__":
    main()
