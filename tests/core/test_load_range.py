"""Garbage load is never a decision: a VM's CPU figure that is not a number, infinite, below
zero or above what its vCPUs can use is unknown, named in the plan, and never stops a
mandatory move, whichever source it came from (run's samples, Prometheus, a snapshot)."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.core.load_range import ceiling, in_range
from reconciler.core.load_samples import HostSample, added, readings
from reconciler.core.load_view import (
    from_points,
    from_readings,
    short_sample,
    unknown,
    windowed,
)
from reconciler.core.load_window import Figure
from reconciler.core.planner import plan
from reconciler.model.history import History
from reconciler.model.load import LoadSpec
from reconciler.model.plan import Plan, Reason
from reconciler.model.snapshot import Snapshot, VmState
from tests.core.builders import NOW, desired, host, host_state, snapshot, vm

SPEC = LoadSpec.model_validate({"window": "2m", "sampleEvery": "10s"})
POLICY: dict[str, Any] = {
    "score": {"cpu": 1, "memory": 0},
    "threshold": 20,
    "margin": 2,
    "cooldown": "0s",
}
ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True)


def fleet(maintenance: bool = False) -> tuple[list[Any], list[Any], list[VmState]]:
    """a (in maintenance or not) runs x (1 vCPU) and two more; b and c one each."""
    hosts = [host("a", maintenance=maintenance), host("b"), host("c")]
    states = [host_state(n, cpus=32) for n in ("a", "b", "c")]
    vms = [
        vm("x", "a", vcpus=1, cpu_used=0.5),
        vm("a1", "a", cpu_used=0.5),
        vm("a2", "a", cpu_used=0.5),
        vm("b0", "b", cpu_used=0.5),
        vm("c0", "c", cpu_used=0.5),
    ]
    return hosts, states, vms


def figures(x: float, rest: float = 0.5) -> dict[str, Figure]:
    return {n: Figure(x if n == "x" else rest, 1.0) for n in ("x", "a1", "a2", "b0", "c0")}


def with_cpu(vms: list[VmState], loads: dict[str, float]) -> list[VmState]:
    """The VMs with these ``cpu_used`` as a snapshot file or a reading may carry them (not
    validated: NaN and negative figures too)."""
    return [v.model_copy(update={"cpu_used": loads[v.name]}) if v.name in loads else v for v in vms]


def test_the_range() -> None:
    assert ceiling(1) == 4.0
    assert ceiling(8) == 18.0
    assert in_range(0.0, 1)
    assert in_range(4.0, 1)
    for bad in (-0.01, 4.01, math.nan, math.inf, -math.inf, 1e6, 1.7e308):
        assert not in_range(bad, 1), bad


def test_a_window_far_above_the_vcpus_is_unknown_named_and_moves_nothing() -> None:
    hosts, states, vms = fleet()
    d = desired(hosts, **POLICY)
    p = plan(d, windowed(snapshot(states, vms), SPEC, figures(1e6), NOW), History(), now=NOW)
    # taken as real, 1e6 cores on a moved a's other VMs away (HostLimit); now nothing moves
    assert not p.moves
    assert not p.deferred
    assert p.load is not None
    assert p.load.unknown_vms == ["x"]
    assert p.load.unknown_hosts == ["a"]
    assert list(p.load.out_of_range) == ["x"]
    assert p.load.out_of_range["x"] == (
        "1e+06 cores over the window, more than 1 vCPU can use, 4 at most"
    )
    assert {h.host: h.load_known for h in p.hosts}["a"] is False


def test_a_finite_huge_window_plans() -> None:
    hosts, states, vms = fleet()
    d = desired(hosts, **POLICY)
    # it overflowed in the spread: OverflowError in the balance search's bounds
    p = plan(d, windowed(snapshot(states, vms), SPEC, figures(1.7e308), NOW), History(), now=NOW)
    assert p.load is not None
    assert "x" in p.load.out_of_range
    assert not p.moves


def test_a_maintenance_drain_is_planned_over_garbage_load() -> None:
    hosts, states, vms = fleet(maintenance=True)
    d = desired(hosts, **POLICY)
    for x in (1e6, 1.7e308, math.inf, math.nan, -1.0):
        p = plan(d, windowed(snapshot(states, vms), SPEC, figures(x), NOW), History(), now=NOW)
        assert drained(p), (x, p.moves, p.unsatisfiable)
        # the same figure in the observation itself (a snapshot file, a reading)
        raw = snapshot(states, with_cpu(vms, {"x": x}))
        assert drained(plan(d, raw, History(), now=NOW)), x
        p = plan(d, short_sample(raw, SPEC, "short"), History(), now=NOW)
        assert drained(p), x
        assert p.load is not None
        assert "x" in p.load.out_of_range


def drained(p: Plan) -> bool:
    gone = {m.vm for m in p.moves + p.deferred if m.reason is Reason.MAINTENANCE}
    return gone == {"x", "a1", "a2"} and not p.unsatisfiable


def test_every_source_names_what_is_out_of_range() -> None:
    hosts, states, vms = fleet()
    snap = snapshot(states, vms)
    # Prometheus: a rate of a million cores
    points = {
        n: [(NOW.timestamp() - t, 1e6 if n == "x" else 0.5) for t in range(0, 121, 10)]
        for n in ("x", "a1", "a2", "b0", "c0")
    }
    out = from_points(snap, SPEC, points, NOW)
    assert set(unknown(out).out_of_range) == {"x"}
    assert unknown(out).vms == {"x"}
    # run's samples: a counter that leapt (a million seconds of CPU in ten)
    store = None
    for k in range(13):
        at = NOW.timestamp() - 120 + k * 10
        leap = 10**15 if k >= 6 else 0
        by_host: dict[str, list[tuple[str, str, int, int]]] = {}
        for v in vms:
            cpu_ns = k * 10 * 500_000_000 + (leap if v.name == "x" else 0)
            by_host.setdefault(v.host, []).append((v.name, f"uuid-{v.name}", 1, cpu_ns))
        taken = [HostSample(h, at, tuple(s)) for h, s in by_host.items()]
        store = added(store, "test", SPEC, taken, at)
    assert store is not None
    out = from_readings(snap, SPEC, readings(store), NOW)
    assert set(unknown(out).out_of_range) == {"x"}
    assert {str(v.name): v.cpu_used for v in out.vms}["a1"] == 0.5
    # the observation's own short sample, and a snapshot read back as it was saved
    bad = snapshot(states, with_cpu(vms, {"x": 40.0}))
    assert set(unknown(short_sample(bad, SPEC, "short")).out_of_range) == {"x"}
    saved = Snapshot.model_validate_json(windowed(bad, SPEC, {}, NOW).model_dump_json())
    assert set(unknown(saved).out_of_range) == {"x"}
    assert unknown(saved).vms == {"x", "a1", "a2", "b0", "c0"}  # no window at all
    # a snapshot whose view does not say so (written by hand, or by an older version)
    unsaid = windowed(snapshot(states, vms), SPEC, figures(0.5), NOW)
    unsaid = unsaid.model_copy(update={"vms": with_cpu(list(unsaid.vms), {"x": 40.0})})
    assert set(unknown(unsaid).out_of_range) == {"x"}
    assert unknown(unsaid).vms == {"x"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    window=st.dictionaries(st.sampled_from(["x", "a1", "a2", "b0", "c0"]), ANY_FLOAT),
    now=st.dictionaries(st.sampled_from(["x", "a1", "a2", "b0", "c0"]), ANY_FLOAT),
    maintenance=st.booleans(),
    view=st.sampled_from(["window", "sample", "none"]),
)
def test_plan_never_raises_and_drains_whatever_the_load(
    window: dict[str, float], now: dict[str, float], maintenance: bool, view: str
) -> None:
    hosts, states, vms = fleet(maintenance=maintenance)
    d = desired(hosts, **POLICY)
    snap = snapshot(states, with_cpu(vms, now))
    if view == "window":
        snap = windowed(snap, SPEC, {n: Figure(v, 1.0) for n, v in window.items()}, NOW)
    elif view == "sample":
        snap = short_sample(snap, SPEC, "short")
    p = plan(d, snap, History(), now=NOW)
    if maintenance:
        assert drained(p), (p.moves, p.unsatisfiable)
    for h in p.hosts:
        for figure in (h.cpu_before, h.cpu_after):
            assert figure is None or math.isfinite(figure)
    if view != "none":
        assert p.load is not None
        named = set(p.load.out_of_range)
        bad_window = {n for n, v in window.items() if not in_range(v, 1 if n == "x" else 2)}
        bad_now = {n for n, v in now.items() if not in_range(v, 1 if n == "x" else 2)}
        assert named == (bad_window | bad_now if view == "window" else bad_now)
