"""Replay PlanetLab days with the set-up of CloudSim 3.0.3's PlanetLab power examples.

The set-up (CloudSim's ``examples/power/Constants.java``, ``Helper.java``,
``PowerDatacenter.java``), which produced the published tables of Beloglazov & Buyya:

- 800 hosts, every second one an HP ProLiant ML110 G4 (2 CPUs of 1860 MIPS, 4 GiB), the others
  G5 (2 x 2660 MIPS, 4 GiB), with their SPECpower curves; an empty host draws nothing (asleep);
- one VM per trace file, one CPU each, of four types in blocks of ceil(n / 4) VMs in turn:
  2500, 2000, 1000, 500 MIPS with 870, 1740, 1740, 613 MB; demand = the trace's share of its
  MIPS; the VMs start where CloudSim's initial allocation puts them (:meth:`ThrMmt.initial`:
  spread out, a 2500 or 2000 MIPS VM on a G5 only, as its CPUs must be as fast as it);
- 300 s rounds for 24 h; a migration takes RAM / 62.5 MB/s (half of 1 Gbit/s), during which
  the VM gets 90% of its demand (PDM) and its target reserves 10% of it;
- SLATAH pooled over hosts, PDM pooled over VMs, SLAV = SLATAH x PDM, ESV = energy x SLAV.

Policies, side by side: ``none`` (no migration), ``thr-mmt-0.8`` (the literature's simplest
heuristic, :mod:`thr_mmt`, as CloudSim runs it: a reference written here, not part of the
product), ``lr-mmt-1.2`` (the literature's best-known one, local regression, :mod:`lr_mmt`,
likewise), ``balance`` (the product's default balance policy, decided each round by
``core.next_actions`` as ``run`` decides; a required rule keeps the fast VMs on G5 hosts). The
power policy joins once the product has one.

Accounting (``--accounting``): ``cloudsim`` (the default) counts as CloudSim 3.0.3's published
runs count, artefacts included (:class:`CloudSimMeter`: VMs it takes for finished leave for
good, a host receiving a VM counts as at 100% meanwhile, ...), so that the figures of
``thr-mmt-0.8`` can be set beside the published ones; ``simulator`` is the simulator's own:
every VM runs all day, a host is overloaded when its load reaches its capacity, the policy
decides from the start on each step's load. ``benchmarks/README.md`` says what each changes.

Run: ``.venv/bin/python benchmarks/simulate_planetlab.py ../shared/traces/planetlab/20110303
[--policies none,thr-mmt-0.8,balance] [--accounting cloudsim|simulator]
[--order sorted|listdir] [--format json] [--steps N]``. With ``--format json``, one JSON
object per line, per day and policy: ``day, policy, accounting, vms, hosts, energy_kwh,
migrations, slatah, pdm, slav, esv, seconds``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lr_mmt import LrMmt
from thr_mmt import MIPS_LABEL, ThrMmt, finish_times

from reconciler.adapters.traces import read_planetlab
from reconciler.core.simulation.meter import Meter
from reconciler.core.simulation.moves import Flight
from reconciler.core.simulation.replay import Decider, Decision, RunDecider, replay
from reconciler.core.simulation.trace import Trace, TraceVm
from reconciler.core.simulation.world import World
from reconciler.model.base import API_VERSION, Metadata
from reconciler.model.cluster import (
    Cluster,
    ClusterMetadata,
    ClusterSpec,
    Defaults,
    Host,
    Migration,
    Reserve,
)
from reconciler.model.desired import DesiredState
from reconciler.model.placement import Placement, PlacementSpec
from reconciler.model.policy import BalancePolicy, BalancePolicySpec
from reconciler.model.rules import (
    HostAffinityRule,
    PlacementRules,
    PlacementRulesSpec,
    Rule,
)
from reconciler.model.simulation import NAMED_KINDS, HostKind
from reconciler.model.snapshot import Snapshot
from reconciler.model.status import MoveResult

MIB = 1024**2
VM_MIPS = (2500, 2000, 1000, 500)
VM_RAM_MB = (870, 1740, 1740, 613)
HOSTS = 800
BANDWIDTH_MIB = 60
"""The cluster's migration bandwidth (whole MiB/s)."""
MIGRATION_MB_S = 62.5
"""CloudSim's migration speed: RAM (MB) / (1 Gbit/s / 2 / 8000) seconds."""


def memory_of(ram_mb: int) -> int:
    """A VM's memory in bytes: what moves at :data:`BANDWIDTH_MIB` in CloudSim's time,
    ``ram_mb`` / 62.5 s (870 MB: 875.8 MB; RAM bounds nothing else after the start)."""
    return round(ram_mb / MIGRATION_MB_S * BANDWIDTH_MIB * MIB)


INTERVAL = timedelta(seconds=300)
POWER_POLICY = {
    "mode": "apply",
    "band": {"low": 45, "high": 81},
    "powerOffAfter": "10m",
    "powerOnAfter": "5m",
    "minSpareHosts": 1,
}
"""The product's power policy as the benchmark plays it (docs/power.md): DPM's band, a
host emptied after two rounds of low demand."""


def kinds(memory_gib: float | None = None) -> dict[str, HostKind]:
    """The 800 hosts, half G4 and half G5; ``memory_gib``: each with that much memory instead
    of the kinds' 4 GiB."""
    out = {f"h{i:03d}": NAMED_KINDS["G4" if i % 2 == 0 else "G5"] for i in range(HOSTS)}
    if memory_gib is None:
        return out
    memory = round(memory_gib * 1024**3)
    return {name: kind.model_copy(update={"memory": memory}) for name, kind in out.items()}


def vm_type(index: int, count: int) -> int:
    """CloudSim's ``Helper.createVmList``: blocks of ceil(count / 4) VMs, one per type."""
    return min(3, index // -(-count // 4))


def trace_of(day: Path, order: str = "sorted") -> Trace:
    """The day's VMs, numbered by file name (``sorted``) or in the order the folder lists
    them (``listdir``: as CloudSim's ``File.listFiles`` numbers them on this file system);
    the number decides a VM's type and its turn in the initial allocation."""
    files = sorted(p.name for p in day.iterdir() if p.is_file() and not p.name.startswith("."))
    listed = [n for n in os.listdir(day) if n in set(files)] if order == "listdir" else files
    number = {name: i for i, name in enumerate(listed)}
    count = len(files)

    def vm(i: int, name: str) -> TraceVm:
        t = vm_type(number[name], count)
        fast = (("speed", "fast"),) if VM_MIPS[t] > NAMED_KINDS["G4"].speed else ()
        labels = (*fast, (MIPS_LABEL, str(VM_MIPS[t])))
        return TraceVm(name=name, vcpus=1, memory=memory_of(VM_RAM_MB[t]), labels=labels)

    trace = read_planetlab(day, vm, lambda i: VM_MIPS[vm_type(number[files[i]], count)])
    if listed == files:
        return trace
    at = [files.index(name) for name in listed]
    return replace(
        trace,
        vms=tuple(trace.vms[i] for i in at),
        demand=tuple(trace.demand[i] for i in at),
    )


@dataclass
class CloudSimMeter(Meter):
    """The meter, accounting as CloudSim 3.0.3's PlanetLab runs account (``--accounting
    cloudsim``), so that their published figures can be met:

    - from its first update (one interval in: ``start``), not from the trace's start, until
      the moves of its last update (``last``) end;
    - a VM CloudSim takes for finished (``finished``, :func:`thr_mmt.finish_times`) is gone
      from then on: no load, and no host kept on for it;
    - a host receiving a VM counts as at 100% until the VM has arrived: CloudSim compares the
      MIPS its VMs request (the arriving VM's in full) with those allocated (10% of the
      arriving VM's: what its target reserves). A VM it has not taken for finished requests
      more than 0 at its updates (read 0.1 s into a step, towards the next figure), so every
      arrival counts;
    - a VM leaving an oversubscribed host loses, to the migration, all it lacks: the 10% and
      its share of the shortfall (CloudSim scales every VM of the host down, floors each to
      whole MIPS, and charges what a migrating VM lacks to the migration).
    """

    finished: Sequence[float] = ()
    start: float = 300.0
    last: float = math.inf
    """When its last update runs: from then on, only until the last move of that round ends
    (CloudSim's last state; the simulation stops at 24 h, before another update)."""
    detours: Mapping[tuple[float, int], int] = field(default_factory=dict)
    """(start, VM) -> a host that reserves room for the VM during its move though it lands
    elsewhere (:attr:`ThrMmt.detours`): it counts as receiving it."""
    _arriving: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    _detoured: dict[int, list[tuple[float, float, int]]] = field(default_factory=dict)
    _leaving: dict[int, list[tuple[float, float, float]]] = field(default_factory=dict)

    def interval(
        self,
        t0: float,
        t1: float,
        demand: Sequence[float],
        host_of: Sequence[int],
        capacity: Sequence[float],
        curves: Sequence[Sequence[float]],
        flights: Sequence[tuple[Flight, int, int, int]],
        asleep: Collection[int] = (),
    ) -> None:
        t0 = max(t0, self.start)
        if t0 >= self.last:
            t1 = min(t1, max((f.end for f, *_ in flights if f.start >= t0), default=t0))
        if t1 <= t0:
            return
        alive = [vm for vm in range(len(demand)) if self.finished[vm] > t0]
        number = {vm: i for i, vm in enumerate(alive)}
        self._arriving = {}
        self._detoured = {}
        self._leaving = {}
        for f, vm, src, dst in flights:
            s, e = max(t0, f.start), min(t1, f.end)
            if e > s and vm in number:
                self._arriving.setdefault(dst, []).append((s, e))
                self._leaving.setdefault(src, []).append((s, e, demand[vm]))
                detour = self.detours.get((f.start, vm))
                if detour is not None:  # as on its target: it arrives, then goes on
                    self._arriving.setdefault(detour, []).append((s, e))
                    share = self.on_target * demand[vm]
                    self._detoured.setdefault(detour, []).extend([(s, share, 1), (e, -share, -1)])
        super().interval(
            t0,
            t1,
            [demand[vm] for vm in alive],
            [host_of[vm] for vm in alive],
            capacity,
            curves,
            [(f, number[vm], src, dst) for f, vm, src, dst in flights if vm in number],
            asleep,
        )

    def _host(
        self,
        h: int,
        t0: float,
        t1: float,
        demand: float,
        vms: int,
        capacity: float,
        curve: Sequence[float],
        events: list[tuple[float, float, int]],
    ) -> None:
        windows = self._arriving.get(h, [])
        leaving = self._leaving.get(h, [])
        if not windows and not leaving:
            super()._host(h, t0, t1, demand, vms, capacity, curve, events)
            return
        edges = [(t, 0.0, 0) for w in [*windows, *leaving] for t in w[:2]]
        events = events + edges + self._detoured.get(h, [])
        at = t0
        for when, change, arriving in [*sorted(events), (t1, 0.0, 0)]:
            if when > at:
                counted = self.overloaded_seconds
                self._segment(h, when - at, demand, vms, capacity, curve)
                inflow = any(s <= at < e for s, e in windows)
                if inflow and vms > 0 and self.overloaded_seconds == counted:
                    self.overloaded_seconds += when - at
                if demand > capacity:  # what an oversubscribed source denies a leaving VM
                    scale = capacity / demand
                    for s, e, d in leaving:
                        if s <= at < e:
                            gets = math.floor((1 - self.loss) * d * scale)
                            self.lost += (d - gets - self.loss * d) * (when - at)
                at = when
            demand += change
            vms += arriving


def desired_of(host_kinds: dict[str, HostKind], policy: dict[str, object]) -> DesiredState:
    hosts = [
        Host(name=name, uri=f"sim:///{name}", labels={"kind": kind.name})
        for name, kind in host_kinds.items()
    ]
    defaults = Defaults(
        reserve=Reserve(memory=0, cpus=0),
        migration=Migration(bandwidth=BANDWIDTH_MIB, max_outbound=64, max_inbound=64),
    )
    spec = BalancePolicySpec.model_validate(
        {
            "mode": "apply",
            "interval": "5m",
            "cpuOvercommit": 16,
            "parallel": {"cluster": 256},
            "batch": 1000,
            **policy,
        }
    )
    rules: list[Rule] = [
        HostAffinityRule.model_validate(
            {
                "name": "fast-vms-on-g5",
                "type": "hostAffinity",
                "vms": {"labels": {"speed": "fast"}},
                "hosts": {"labels": {"kind": "G5"}},
            }
        )
    ]
    return DesiredState(
        cluster=Cluster(
            api_version=API_VERSION,
            kind="Cluster",
            metadata=ClusterMetadata(name="planetlab"),
            spec=ClusterSpec(hosts=hosts, defaults=defaults),
        ),
        policy=BalancePolicy(
            api_version=API_VERSION,
            kind="BalancePolicy",
            metadata=Metadata(name="planetlab"),
            spec=spec,
        ),
        rules=PlacementRules(
            api_version=API_VERSION,
            kind="PlacementRules",
            metadata=Metadata(name="planetlab"),
            spec=PlacementRulesSpec(rules=rules),
        ),
        placement=Placement(
            api_version=API_VERSION,
            kind="Placement",
            metadata=Metadata(name="planetlab"),
            spec=PlacementSpec(vms={}),
        ),
    )


class NoMoves:
    """Never migrates."""

    name = "none"
    admitted = False

    def __init__(self, desired: DesiredState) -> None:
        self.desired = desired

    def decide(self, world: World, now: datetime) -> Decision:
        snapshot = Snapshot(
            cluster=world.desired.cluster.metadata.name, taken_at=now, hosts=[], vms=[]
        )
        return Decision([], self.desired, snapshot)

    def after(self, results: list[MoveResult], now: datetime) -> None:
        return None


def first_placement(trace: Trace, host_kinds: dict[str, HostKind]) -> dict[str, str]:
    """CloudSim's initial allocation (:meth:`ThrMmt.initial`): each VM in turn, asking its
    full MIPS, on the host whose power grows least; the VMs start spread out."""
    return ThrMmt.initial(trace, host_kinds)


def run_day(
    day: Path,
    policies: list[str],
    steps: int | None,
    accounting: str,
    order: str,
    host_memory: float | None = None,
) -> list[dict[str, object]]:
    trace = trace_of(day, order)
    host_kinds = kinds()
    placement = first_placement(trace, host_kinds)
    roomy = kinds(host_memory)  # the product's policies' hosts (the same start placement)
    cloudsim = accounting == "cloudsim"
    finished = finish_times(trace) if cloudsim else None
    out = []
    for name in policies:
        desired = desired_of(host_kinds, {"basis": "used"})
        decider: Decider
        if name == "none":
            decider = NoMoves(desired)
        elif name.startswith("thr-mmt-"):
            threshold = float(name.removeprefix("thr-mmt-"))
            if cloudsim:
                decider = ThrMmt(desired, threshold, finished=finished)
            else:
                decider = ThrMmt(desired, threshold, first=0.0, lag=0.0)
        elif name.startswith("lr-mmt-"):
            safety = float(name.removeprefix("lr-mmt-"))
            if cloudsim:
                decider = LrMmt(desired, safety, finished=finished)
            else:
                decider = LrMmt(desired, safety, first=0.0, lag=0.0)
        elif name == "balance":
            desired = desired_of(roomy, {"basis": "used"})
            decider = RunDecider(desired, name="balance")
        elif name == "power":
            desired = desired_of(roomy, {"basis": "used", "power": POWER_POLICY})
            decider = RunDecider(desired, name="power")
        else:
            raise SystemExit(f"unknown policy {name}")
        product = name in ("balance", "power")
        world = World(desired, trace, roomy if product else host_kinds, placement)
        meter = Meter(on_target=0.1, loss=0.1)
        if cloudsim:
            detours = decider.detours if isinstance(decider, ThrMmt) else {}
            meter = CloudSimMeter(
                on_target=0.1,
                loss=0.1,
                finished=finished or [],
                detours=detours,
                last=(min(steps or trace.steps, trace.steps) - 1) * trace.step,
            )
        began = time.perf_counter()
        figures = replay(world, decider, meter, interval=INTERVAL, steps=steps)
        seconds = time.perf_counter() - began
        # CloudSim counts a VM it sends twice in one round twice (see thr_mmt's doc).
        doubled = decider.doubled if cloudsim and isinstance(decider, ThrMmt) else 0
        out.append(
            {
                "day": day.name,
                "policy": name,
                "accounting": accounting,
                "vms": len(trace.vms),
                "hosts": HOSTS,
                "energy_kwh": round(figures.energy_kwh, 2),
                "migrations": figures.migrations + doubled,
                "slatah": round(figures.slatah, 5),
                "pdm": round(figures.pdm, 6),
                "slav": figures.slav,
                "esv": figures.esv,
                "seconds": round(seconds, 1),
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("days", nargs="+", type=Path)
    parser.add_argument("--policies", default="none,thr-mmt-0.8,balance")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument("--steps", type=int, default=None, help="steps of each day (288)")
    parser.add_argument(
        "--accounting",
        choices=["cloudsim", "simulator"],
        default="cloudsim",
        help="cloudsim: as CloudSim 3.0.3's published runs (VMs it takes for finished leave, "
        "a host receiving a VM counts as at 100%%, from its first update); simulator: the "
        "simulator's own (every VM runs all day, overload is load at capacity)",
    )
    parser.add_argument(
        "--host-memory",
        type=float,
        default=None,
        metavar="GIB",
        help="hosts of this much memory for the product's policies (balance, power), from the "
        "same start: a what-if where memory does not bind, as CloudSim's PlanetLab VMs ask for "
        "none once started (the reference policies keep the kinds' 4 GiB)",
    )
    parser.add_argument(
        "--order",
        choices=["sorted", "listdir"],
        default="sorted",
        help="how the VMs are numbered: by file name, or as the folder lists them",
    )
    args = parser.parse_args()
    policies = args.policies.split(",")
    for day in args.days:
        rows = run_day(day, policies, args.steps, args.accounting, args.order, args.host_memory)
        for row in rows:
            if args.format == "json":
                print(json.dumps(row), flush=True)
            else:
                print(
                    f"{row['day']} {row['accounting']:<9} {row['policy']:<12} "
                    f"energy {row['energy_kwh']:>8} kWh  "
                    f"migrations {row['migrations']:>6}  SLATAH {100 * row['slatah']:.2f}%  "  # type: ignore[operator]
                    f"PDM {100 * row['pdm']:.3f}%  SLAV {row['slav']:.2e}  "  # type: ignore[operator]
                    f"ESV {row['esv']:.2e}  ({row['seconds']} s)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
