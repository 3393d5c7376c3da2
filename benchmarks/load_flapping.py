"""A day of flapping load replayed as ``run`` would act: on the observation's instant sample
(the old basis) and on the load over a window, side by side.

The cluster: ``--hosts`` hosts of 16 CPUs, each with the same mix of guests, so their true load
is balanced, except the first, which carries two more steady guests: a real imbalance that
balance should fix once and for all. The guests' CPU second by second over the day:

* steady: a constant 1 core;
* bursty: 4 cores for 60 s every 5 minutes, at a phase of its own (0.8 core on average);
* flapping: switches between 0.2 and 2 cores at random, staying 2 to 12 minutes each time;
* the hot host's extra: 3 cores each, steady.

Every ``interval`` (15m) a round observes: the instant basis reads each guest's CPU over the
half second at the round's start, as the observer does; the window basis reads what ``run``'s
samples (every 30 s, cumulative CPU time) say over the last 10 minutes, through the same core
functions ``run`` uses (``load_samples.added``, ``load_view.from_readings``). Each side is then
replayed with ``core.backtest.replay`` under the same policy (apply mode, default limits,
CPU-only score): moves are applied at once and all succeed, the load travels with the guest.

Counted per side: moves in the day, moves per day, and moves that took a guest back to the
host its previous move left (``back``), plus the spread the last round saw on its own basis.
The old instant basis is replayed twice, without the balance backoff (as before it) and with
it.

    python benchmarks/load_flapping.py [--hosts 6] [--seed 1] [--hours 24]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import numpy as np

from reconciler.core import backoff, backtest, load_samples, load_view
from reconciler.core.load_samples import HostSample
from reconciler.model.base import API_VERSION, HostName, Metadata, VmName, VmUuid
from reconciler.model.cluster import Cluster, ClusterMetadata, ClusterSpec, Host
from reconciler.model.desired import DesiredState
from reconciler.model.load import LoadSpec
from reconciler.model.placement import Placement, PlacementSpec
from reconciler.model.policy import BalancePolicy, BalancePolicySpec
from reconciler.model.rules import PlacementRules, PlacementRulesSpec
from reconciler.model.snapshot import HostState, Snapshot, VmRunState, VmState

GIB = 1024**3
START = datetime(2025, 3, 3, tzinfo=UTC)
SAMPLE_EVERY = 30
INSTANT = 0.5
POLICY = {
    "mode": "apply",
    "interval": "15m",
    "score": {"cpu": 1, "memory": 0},
    "load": {"window": "10m", "sampleEvery": f"{SAMPLE_EVERY}s", "statistic": "mean"},
}


def guests(hosts: int) -> list[tuple[str, str, str]]:
    """(name, host, kind) of every guest."""
    out = []
    for h in range(hosts):
        host = f"kvm-{h:02d}"
        mix = ["steady"] * 4 + ["bursty"] * 3 + ["flapping"] * 2
        if h == 0:
            mix += ["hot"] * 2
        out += [(f"{host}-{kind}-{i}", host, kind) for i, kind in enumerate(mix)]
    return out


def cpu_per_second(kind: str, seconds: int, rng: np.random.Generator) -> np.ndarray:
    """A guest's CPU in cores for every second of the day."""
    if kind == "steady":
        return np.full(seconds, 1.0)
    if kind == "hot":
        return np.full(seconds, 3.0)
    if kind == "bursty":
        phase = int(rng.integers(0, 300))
        t = (np.arange(seconds) + phase) % 300
        return np.where(t < 60, 4.0, 0.0)
    out = np.empty(seconds)
    at, high = 0, bool(rng.integers(0, 2))
    while at < seconds:
        stay = int(rng.integers(120, 721))
        out[at : at + stay] = 2.0 if high else 0.2
        at, high = at + stay, not high
    return out


@contextlib.contextmanager
def backoff_as(on: bool) -> Iterator[None]:
    """Without the balance backoff (``on`` False), as before it: the VM's record tells the
    planner nothing beyond its cooldown."""
    if on:
        yield
        return
    kept = backoff.window
    backoff.window = lambda record, cooldown: None
    try:
        yield
    finally:
        backoff.window = kept


def cluster(hosts: int, cooldown: str) -> DesiredState:
    spec = BalancePolicySpec.model_validate({**POLICY, "cooldown": cooldown})
    return DesiredState(
        cluster=Cluster(
            api_version=API_VERSION,
            kind="Cluster",
            metadata=ClusterMetadata(name="bench"),
            spec=ClusterSpec(
                hosts=[
                    Host(name=f"kvm-{h:02d}", uri=f"qemu+ssh://kvm-{h:02d}/system")
                    for h in range(hosts)
                ]
            ),
        ),
        policy=BalancePolicy(
            api_version=API_VERSION, kind="BalancePolicy", metadata=Metadata(name="p"), spec=spec
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
            metadata=Metadata(name="bench"),
            spec=PlacementSpec(vms={}),
        ),
    )


def snapshot_at(at: datetime, hosts: int, vms: list[VmState]) -> Snapshot:
    states = [
        HostState(
            name=HostName(f"kvm-{h:02d}"),
            uri=f"qemu+ssh://kvm-{h:02d}/system",
            reachable=True,
            arch="x86_64",
            cpus=17,  # 16 usable after the default reserve of 1
            memory_total=256 * GIB,
        )
        for h in range(hosts)
    ]
    return Snapshot(cluster="bench", taken_at=at, hosts=states, vms=vms)


def recordings(hosts: int, seed: int, hours: int) -> tuple[list[Snapshot], list[Snapshot]]:
    """The day's snapshots (one per round) read on the instant sample and on the window."""
    rng = np.random.default_rng(seed)
    seconds = hours * 3600
    who = guests(hosts)
    cpu = {name: cpu_per_second(kind, seconds, rng) for name, _, kind in who}
    cumulative = {name: np.concatenate([[0.0], np.cumsum(c)]) for name, c in cpu.items()}
    spec = LoadSpec.model_validate(POLICY["load"])
    interval = 900
    store = None
    instant: list[Snapshot] = []
    window: list[Snapshot] = []
    for t in range(SAMPLE_EVERY, seconds, SAMPLE_EVERY):
        at = START + timedelta(seconds=t)
        by_host: dict[str, list[tuple[str, str, int, int]]] = {}
        for name, host, _ in who:
            by_host.setdefault(host, []).append(
                (name, f"uuid-{name}", 1, round(cumulative[name][t] * 1e9))
            )
        samples = [HostSample(h, at.timestamp(), tuple(v)) for h, v in sorted(by_host.items())]
        store = load_samples.added(store, "bench", spec, samples, at.timestamp())
        if t % interval:
            continue
        vms = [
            VmState(
                name=VmName(name),
                uuid=VmUuid(f"uuid-{name}"),
                host=HostName(host),
                state=VmRunState.RUNNING,
                vcpus=4,
                memory_max=8 * GIB,
                memory_current=8 * GIB,
                memory_used=4 * GIB,
                cpu_used=round(float(cpu[name][t : t + 1].mean()) * 1.0, 4),
                uptime=86400.0 + t,
            )
            for name, host, _ in who
        ]
        snap = snapshot_at(at, hosts, vms)
        instant.append(snap)
        window.append(load_view.from_readings(snap, spec, load_samples.readings(store), at))
    return instant, window


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--cooldown", default="6h", help="the policy's cooldown (default 6h)")
    args = parser.parse_args()
    began = time.perf_counter()
    instant, window = recordings(args.hosts, args.seed, args.hours)
    desired = cluster(args.hosts, args.cooldown)
    until = START + timedelta(hours=args.hours)
    rows = []
    sides = (
        ("instant, no backoff", instant, False),
        ("instant + backoff", instant, True),
        ("10m window + backoff", window, True),
    )
    for name, snaps, with_backoff in sides:
        with backoff_as(with_backoff):
            result = backtest.replay(desired, desired, snaps, since=START, until=until)
        t = result.base
        last = result.rows[-1].base if result.rows else None
        spread = last.spread.get("x86_64", 0.0) if last is not None else 0.0
        rows.append((name, t.rounds, t.moves, t.moves_per_day, t.moved_back, spread))
    print(
        f"{args.hosts} hosts x {len(guests(args.hosts))} guests, seed {args.seed}, "
        f"{args.hours} h, a round every 15m, cooldown {args.cooldown} "
        f"({time.perf_counter() - began:.1f} s)"
    )
    print(f"{'basis':<22} {'rounds':>6} {'moves':>6} {'per day':>8} {'back':>5} {'spread':>7}")
    for name, rounds, moves, per_day, back, spread in rows:
        print(f"{name:<22} {rounds:>6} {moves:>6} {per_day:>8g} {back:>5} {spread:>7.1f}")


if __name__ == "__main__":
    main()
