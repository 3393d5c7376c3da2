"""The simulator's own promises: watts from a power curve, overload and migration losses
metered over time, and a replay that decides as ``run`` does, the same way every time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.simulation.meter import Meter
from reconciler.core.simulation.moves import Flight
from reconciler.core.simulation.power import watts
from reconciler.core.simulation.setup import shape_of, shaped, simulated
from reconciler.core.simulation.trace import Trace, TraceVm
from reconciler.model.base import HostName, VmName
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Move, Reason
from reconciler.model.simulation import NAMED_KINDS, HostKind, PowerCurve, SimulationReport
from tests.core.builders import GIB, desired, host

G5 = NAMED_KINDS["G5"]
START = datetime(2026, 1, 5, tzinfo=UTC)
SMALL = HostKind(name="small", cpus=4, memory=16 * GIB, power=PowerCurve(idle=100, peak=200))

curves = st.lists(st.floats(0, 1000), min_size=11, max_size=11).map(sorted)


@given(curves, st.floats(0, 1), st.floats(0, 1))
def test_watts_grow_with_load_and_meet_the_curve_at_its_points(
    curve: list[float], a: float, b: float
) -> None:
    low, high = sorted((a, b))
    assert watts(curve, low) <= watts(curve, high) + 1e-9
    for i in range(11):
        assert abs(watts(curve, i / 10) - curve[i]) < 1e-6


def test_the_g4_curve_is_cloudsims() -> None:
    g4 = NAMED_KINDS["G4"].power.curve()
    assert watts(g4, 0.0) == 86
    assert watts(g4, 1.0) == 117
    assert abs(watts(g4, 0.25) - (92.6 + 96) / 2) < 1e-9


def move(vm: str, source: str, target: str) -> Move:
    return Move(
        vm=VmName(vm),
        source=HostName(source),
        target=HostName(target),
        memory=GIB,
        vcpus=1,
        reason=Reason.BALANCE,
        detail="test",
        wave=0,
    )


def test_a_host_over_its_capacity_half_the_time_has_a_slatah_of_a_half() -> None:
    meter = Meter()
    curve = SMALL.power.curve()
    # host 0: demand 5 of 4 for 100 s, then 2 of 4 for 100 s; host 1 empty
    meter.interval(0, 100, [3.0, 2.0], [0, 0], [4.0, 4.0], [curve, curve], [])
    meter.interval(100, 200, [1.0, 1.0], [0, 0], [4.0, 4.0], [curve, curve], [])
    assert meter.slatah == 0.5
    assert meter.active_seconds == 200  # the empty host is not active
    assert meter.pdm == 0.0
    assert abs(meter.joules - (200 * 100 + 150 * 100)) < 1e-6  # 100% then 50% load


def test_a_moving_vm_loses_a_tenth_of_its_demand_and_counts_on_both_hosts() -> None:
    meter = Meter(on_target=1.0, loss=0.1)
    curve = SMALL.power.curve()
    flight = Flight(move("a", "h0", "h1"), start=10, end=30, aborted=False)
    meter.interval(0, 100, [4.0, 1.0], [0, 1], [4.0, 4.0], [curve, curve], [(flight, 0, 0, 1)])
    assert abs(meter.lost - 0.1 * 4.0 * 20) < 1e-9
    assert meter.requested == 500.0
    # h0 at 100% until the VM arrives (30 s); h1 at 125% while it moves (20 s), 125% after
    assert meter.overloaded_seconds == 30 + 90


def trace(rows: list[list[float]], step: float = 300.0) -> Trace:
    return Trace(
        source="test",
        start=START,
        step=step,
        vms=tuple(TraceVm(name=f"vm-{i}", vcpus=2, memory=2 * GIB) for i in range(len(rows))),
        demand=tuple(tuple(r) for r in rows),
    )


def policy(**spec: object) -> DesiredState:
    base = {
        "mode": "apply",
        "interval": "5m",
        "load": {"window": "10m", "sampleEvery": "30s"},
        "cooldown": "10m",
        "minUptime": "0s",
        **spec,
    }
    return desired([host("seed")], **base)  # type: ignore[arg-type]


def run(
    rows: list[list[float]], *specs: dict[str, object], piled: bool = False
) -> SimulationReport:
    """``rows`` on four small hosts under each policy of ``specs``; ``piled``: every VM starts
    on the first host."""
    shape = shape_of("4xsmall", {"small": SMALL})
    policies = [(f"p{i}", shaped(policy(**s), shape)[0]) for i, s in enumerate(specs)]
    kinds = shaped(policy(), shape)[1]
    where = {f"vm-{i}": "small-001" for i in range(len(rows))} if piled else None
    return simulated("test", policies, trace(rows), kinds, where=where)


HOT_THEN_COLD = [[1.9] * 24, [1.9] * 24, [1.9] * 24, [1.9] * 24, [0.1] * 24, [0.1] * 24]


def test_a_policy_that_never_balances_moves_nothing_and_loses_nothing() -> None:
    report = run(HOT_THEN_COLD, {"threshold": 100})
    (figures,) = report.policies
    assert figures.migrations == 0
    assert figures.pdm == 0.0


def test_a_lower_threshold_buys_balance_with_migrations() -> None:
    report = run(HOT_THEN_COLD, {"threshold": 100}, {"threshold": 5, "holdRounds": 1}, piled=True)
    lazy, eager = report.policies  # the lazy one moves only what hostLimit makes it move
    assert eager.migrations > lazy.migrations
    assert eager.pdm > lazy.pdm
    assert eager.spread_mean < lazy.spread_mean


@settings(max_examples=15, deadline=None)
@given(st.lists(st.floats(0, 2), min_size=2, max_size=6))
def test_constant_load_makes_no_balance_move_after_the_first_round(levels: list[float]) -> None:
    rows = [[level] * 12 for level in levels]
    report = run(rows, {"threshold": 5, "holdRounds": 1})
    (figures,) = report.policies
    assert all(t.migrations == 0 for t in figures.timeline[2:]), figures.timeline


@settings(max_examples=10, deadline=None)
@given(st.lists(st.lists(st.floats(0, 2), min_size=8, max_size=8), min_size=2, max_size=6))
def test_the_same_inputs_give_the_same_report_byte_for_byte(rows: list[list[float]]) -> None:
    a = run(rows, {"threshold": 5, "holdRounds": 1})
    b = run(rows, {"threshold": 5, "holdRounds": 1})
    assert a.model_dump_json() == b.model_dump_json()


@settings(max_examples=10, deadline=None)
@given(st.lists(st.floats(0, 2), min_size=2, max_size=5), st.floats(1.01, 3))
def test_energy_grows_with_load(levels: list[float], factor: float) -> None:
    rows = [[level] * 6 for level in levels]
    more = [[level * factor] * 6 for level in levels]
    low = run(rows, {"threshold": 100}).policies[0]
    high = run(more, {"threshold": 100}).policies[0]
    assert high.energy_kwh >= low.energy_kwh - 1e-9


def test_a_shape_names_known_kinds_and_counts() -> None:
    assert [(n, k.name) for n, k in shape_of("400xG4, 400xG5", {})] == [(400, "G4"), (400, "G5")]
    for bad, said in (("400G4", "e.g. 400xG4"), ("0xG4", "a count of"), ("4xG9", "no host kind")):
        with pytest.raises(ValueError, match=said):
            shape_of(bad, {})


def test_moves_take_the_time_their_memory_takes_over_the_bandwidth() -> None:
    from reconciler.core.simulation.moves import duration

    d = policy()
    seconds, completes = duration(d, move("a", "h0", "h1"), 0.0)
    assert completes
    assert abs(seconds - 1.0) < 0.01  # 1 GiB at the assumed 1 GiB/s link
    busy, converges = duration(d, move("a", "h0", "h1"), 4.0 * GIB)
    assert not converges  # writes faster than the link carries: aborted
    assert busy > seconds
    assert timedelta(seconds=busy) < timedelta(hours=1)


@given(st.lists(st.floats(0, 4), min_size=12, max_size=12), st.sampled_from([2, 3, 4, 6]))
def test_a_trace_at_a_coarser_step_keeps_its_mean_and_a_finer_one_its_figures(
    row: list[float], k: int
) -> None:
    from reconciler.core.simulation.trace import resampled

    t = trace([row])
    coarse = resampled(t, 300.0 * k)
    assert coarse.steps == 12 // k
    assert abs(sum(coarse.demand[0]) * k - sum(row)) < 1e-6
    fine = resampled(t, 300.0 / k)
    assert fine.steps == 12 * k
    assert all(fine.at(0, s * 300.0) == row[s] for s in range(12))
    with pytest.raises(ValueError, match="whole number"):
        resampled(t, 450.0)


def test_each_move_is_listed_with_its_vm_hosts_and_time_in_the_order_they_began() -> None:
    report = run(HOT_THEN_COLD, {"threshold": 5, "holdRounds": 1}, piled=True)
    (figures,) = report.policies
    assert figures.migrations > 0
    assert len([m for m in figures.moves if not m.aborted]) == figures.migrations
    assert [m.at for m in figures.moves] == sorted(m.at for m in figures.moves)
    started = sum(t.migrations for t in figures.timeline)
    assert len(figures.moves) == started
    for m in figures.moves:
        assert m.source != m.target
        assert m.reason in {"Balance", "HostLimit"}
        assert m.seconds > 0
    # where each VM ends is where its last listed move took it
    where: dict[str, str] = {}
    for m in figures.moves:
        if not m.aborted:
            assert where.get(m.vm, m.source) == m.source, f"{m.vm} left a host it was not on"
            where[m.vm] = m.target


def test_a_round_counts_as_unknown_load_exactly_when_a_running_vm_has_no_known_window() -> None:
    """Garbage figures (50 cores of a 2-vCPU VM) and a row that ends early make rounds of
    unknown load; each round's flag is what the window view of its snapshot says."""
    from reconciler.core import load_view
    from reconciler.core.simulation.meter import Meter
    from reconciler.core.simulation.replay import Decision, RunDecider, replay
    from reconciler.core.simulation.world import World

    rows = [[0.5] * 12, [0.4] * 3 + [50.0] * 2 + [0.4] * 7, [0.3] * 5]
    shape = shape_of("4xsmall", {"small": SMALL})
    desired_state, kinds = shaped(policy(threshold=5, holdRounds=1), shape)
    where = {f"vm-{i}": "small-001" for i in range(len(rows))}
    flags: list[tuple[bool, bool]] = []

    class Checked(RunDecider):
        def decide(self, world: World, now: datetime) -> Decision:
            decision = super().decide(world, now)
            flags.append((decision.unknown, bool(load_view.unknown(decision.snapshot).vms)))
            return decision

    world = World(desired_state, trace(rows), kinds, where)
    figures = replay(world, Checked(desired_state), Meter(), interval=timedelta(minutes=5))
    assert all(a == b for a, b in flags), flags
    assert 2 <= figures.unknown_rounds < len(flags)  # the first (no window yet) and the garbage
    assert figures.unknown_rounds == sum(a for a, _ in flags)
