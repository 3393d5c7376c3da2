"""What a simulated round reuses from the last one gives what building it anew gives: the
sightings and hosts of the snapshot, each step's figures; and the timeline stays bounded."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.simulation.meter import Meter
from reconciler.core.simulation.replay import RunDecider, Timeline, replay
from reconciler.core.simulation.setup import shape_of, shaped
from reconciler.core.simulation.world import UPTIME, World
from reconciler.model.base import HostName, VmName
from reconciler.model.simulation import TimelinePoint
from reconciler.model.snapshot import HostState, Snapshot, VmRunState, VmState
from tests.core.test_simulation import SMALL, policy, trace


def built_anew(world: World, seconds: float) -> tuple[list[VmState], list[HostState]]:
    """Every sighting and host validated from the world's state, nothing reused."""
    used = [0] * len(world.hosts)
    vms = []
    for i, spec in enumerate(world.trace.vms):
        h = world.host_of[i]
        used[h] += spec.memory
        vms.append(
            VmState(
                name=VmName(spec.name),
                uuid=world.uuids[i],
                host=HostName(world.hosts[h]),
                state=VmRunState.RUNNING,
                vcpus=spec.vcpus,
                memory_max=spec.memory,
                memory_current=spec.memory,
                cpu_used=round(world.cores(i, max(0.0, seconds - world.trace.step)), 4),
                uptime=UPTIME + seconds,
                dirty_rate=int(spec.dirty) if spec.dirty else None,
                labels=dict(spec.labels),
                reconciler=world.records[i],
            )
        )
    hosts = [
        HostState(
            name=HostName(name),
            uri=f"sim:///{name}",
            reachable=True,
            arch=kind.arch,
            cpus=kind.cpus,
            memory_total=kind.memory,
            memory_free=max(0, kind.memory - used[h]),
        )
        for h, (name, kind) in enumerate(zip(world.hosts, world.kinds, strict=True))
    ]
    return vms, hosts


def same(a: Snapshot, vms: list[VmState], hosts: list[HostState]) -> None:
    assert a.hosts == hosts
    assert a.vms == vms
    for got, want in zip(a.vms, vms, strict=True):
        assert got.model_fields_set == want.model_fields_set
        assert got.model_dump_json() == want.model_dump_json()


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.lists(st.floats(0, 2), min_size=10, max_size=10), min_size=2, max_size=5),
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 4), st.integers(0, 2)), max_size=12),
)
def test_each_snapshot_is_the_one_built_anew_whatever_moved_or_was_recorded(
    rows: list[list[float]], events: list[tuple[int, int, int]]
) -> None:
    shape = shape_of("3xsmall", {"small": SMALL})
    desired, kinds = shaped(policy(basis="allocated"), shape)
    t = trace(rows)
    world = World(desired, t, kinds, {f"vm-{i}": "small-001" for i in range(len(rows))})
    for k, drawn, host in events:  # steps, each after a move or a record written
        now = t.start + timedelta(seconds=k * t.step)
        vm = drawn % len(rows)
        record = world.records[vm].model_copy(update={"last_moved_at": now})
        if host == 0:
            world.stamped([(world.snapshot(now).vms[vm], record)])
        else:
            world.moved(vm, host, record)
        vms, hosts = built_anew(world, k * t.step)
        same(world.snapshot(now), vms, hosts)
        assert list(world.demand(k * t.step)) == [t.at(i, k * t.step) for i in range(len(rows))]


def test_a_replay_moves_vms_and_its_last_snapshot_is_the_one_built_anew() -> None:
    rows = [[1.9] * 6] * 4 + [[0.1] * 6] * 2
    shape = shape_of("4xsmall", {"small": SMALL})
    desired, kinds = shaped(policy(threshold=5, holdRounds=1), shape)
    t = trace(rows)
    world = World(desired, t, kinds, {f"vm-{i}": "small-001" for i in range(len(rows))})
    figures = replay(world, RunDecider(desired), Meter(), interval=timedelta(minutes=5))
    assert figures.migrations > 0
    vms, hosts = built_anew(world, 6 * t.step)
    same(world.snapshot(t.start + timedelta(seconds=6 * t.step)), vms, hosts)


def point(k: int, hot: int, moved: int, spread: float | None) -> TimelinePoint:
    return TimelinePoint(at=300.0 * k, spread=spread, hot=hot, migrations=moved, powered=4)


@given(
    st.lists(
        st.tuples(st.integers(0, 9), st.integers(0, 5), st.none() | st.floats(0, 100)),
        max_size=200,
    ),
    st.integers(2, 40),
)
def test_the_timeline_keeps_at_most_its_limit_and_loses_no_peak_nor_migration(
    rounds: list[tuple[int, int, float | None]], limit: int
) -> None:
    timeline = Timeline(limit)
    points = [point(k, hot, moved, spread) for k, (hot, moved, spread) in enumerate(rounds)]
    for p in points:
        timeline.add(p)
    kept = timeline.all()
    assert len(kept) <= limit
    if len(points) < limit - limit % 2:
        assert kept == points  # one point a round while it fits
    assert sum(p.migrations for p in kept) == sum(p.migrations for p in points)
    assert max((p.hot for p in kept), default=0) == max((p.hot for p in points), default=0)
    spreads = [p.spread for p in points if p.spread is not None]
    kept_spreads = [p.spread for p in kept if p.spread is not None]
    assert max(kept_spreads, default=None) == max(spreads, default=None)
    width = timeline.per_point
    assert [p.at for p in kept] == [p.at for p in points[::width]]
