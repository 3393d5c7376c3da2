"""The planner on the load over a window: the window decides, unknown load holds balance where
it is unknown (never zero), mandatory moves never wait, and a VM's balance backoff keeps it
from going back to the host it left (doubling each time it does)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core import backoff
from reconciler.core.load_view import short_sample, windowed
from reconciler.core.load_window import Figure
from reconciler.core.planner import plan
from reconciler.model.cluster import Host
from reconciler.model.history import History
from reconciler.model.load import LoadSpec
from reconciler.model.plan import Reason
from reconciler.model.snapshot import HostState, ReconcilerState, Snapshot, VmState
from tests.core.builders import NOW, desired, host, host_state, rule, snapshot, vm

SPEC = LoadSpec()
POLICY: dict[str, Any] = {
    "score": {"cpu": 1, "memory": 0},
    "threshold": 20,
    "margin": 2,
    "cooldown": "1h",
}


def cluster() -> tuple[list[Host], list[HostState]]:
    hosts = [host(n) for n in ("a", "b", "c")]
    states = [host_state(n, cpus=4) for n in ("a", "b", "c")]
    return hosts, states


def hot_a(now: float = 0.1) -> list[VmState]:
    """Three VMs on a, each seen at ``now`` cores in the short sample; b and c idle."""
    return [vm(f"a{i}", "a", cpu_used=now) for i in range(3)] + [
        vm("b0", "b", cpu_used=0.0),
        vm("c0", "c", cpu_used=0.0),
    ]


def with_window(snap: Snapshot, window: Mapping[str, float | None]) -> Snapshot:
    figures = {
        name: Figure(value, 1.0 if value is not None else 0.1) for name, value in window.items()
    }
    return windowed(snap, SPEC, figures, NOW)


STEADY = {"a0": 0.8, "a1": 0.8, "a2": 0.8, "b0": 0.0, "c0": 0.0}


def test_the_window_decides_not_the_short_sample() -> None:
    hosts, states = cluster()
    d = desired(hosts, **POLICY)
    # the short sample caught a quiet moment: a looks idle, yet over the window it is hot
    quiet = snapshot(states, hot_a(now=0.05))
    assert not plan(d, quiet, History(), now=NOW).moves
    p = plan(d, with_window(quiet, STEADY), History(), now=NOW)
    assert p.moves
    assert all(m.source == "a" and m.reason is Reason.BALANCE for m in p.moves)
    loads = {h.host: h for h in p.hosts}
    assert loads["a"].cpu_before == 60.0  # 2.4 cores of 4, over the window
    assert loads["a"].cpu_now == 3.75  # 0.15 cores in the short sample
    assert p.load is not None
    assert p.load.basis == "window"
    assert not p.load.unknown_vms
    # a spike in the short sample on a host idle over the window moves nothing
    spiky = snapshot(states, hot_a(now=1.0))
    calm = dict.fromkeys(STEADY, 0.05)
    assert plan(d, spiky, History(), now=NOW).moves
    assert not plan(d, with_window(spiky, calm), History(), now=NOW).moves


def test_a_host_of_unknown_load_takes_no_balance_move() -> None:
    hosts, states = cluster()
    d = desired(hosts, **POLICY)
    snap = snapshot(states, hot_a(now=0.8))
    unknown = with_window(snap, {**STEADY, "a2": None})
    p = plan(d, unknown, History(), now=NOW)
    assert not p.moves
    assert not p.deferred
    assert p.load is not None
    assert p.load.unknown_vms == ["a2"]
    assert p.load.unknown_hosts == ["a"]
    assert {h.host: h.load_known for h in p.hosts} == {"a": False, "b": True, "c": True}
    # the spread balance decides on is that of the hosts whose load is known
    assert p.spreads[0].before == 0.0
    # a VM missing from the window altogether is unknown too, not idle
    missing = with_window(snap, {k: v for k, v in STEADY.items() if k != "b0"})
    p = plan(d, missing, History(), now=NOW)
    assert p.load is not None
    assert p.load.unknown_hosts == ["b"]
    assert all(m.target != "b" and m.source != "b" for m in p.moves + p.deferred)


def test_every_load_unknown_when_the_source_failed_still_moves_what_must_move() -> None:
    hosts, states = cluster()
    pin = rule(name="a1-on-c", type="pin", vms={"names": ["a1"]}, hosts={"names": ["c"]})
    d = desired(hosts, rules=[pin], **POLICY)
    snap = snapshot(states, hot_a(now=0.8))
    failed = windowed(snap, SPEC, {}, NOW, problem="Prometheus did not answer")
    p = plan(d, failed, History(), now=NOW)
    assert [(m.vm, m.target, m.reason) for m in p.moves] == [("a1", "c", Reason.PIN)]
    assert p.load is not None
    assert p.load.problem == "Prometheus did not answer"
    assert p.load.unknown_hosts == ["a", "b", "c"]


def test_a_held_short_sample_makes_no_balance_move_but_mandatory_ones() -> None:
    hosts, states = cluster()
    pin = rule(name="a1-on-c", type="pin", vms={"names": ["a1"]}, hosts={"names": ["c"]})
    d = desired(hosts, rules=[pin], **POLICY)
    snap = snapshot(states, hot_a(now=0.8))
    shown = plan(d, short_sample(snap, SPEC, "a short sample"), History(), now=NOW)
    assert any(m.reason is Reason.BALANCE for m in shown.moves + shown.deferred)
    assert shown.load is not None
    assert shown.load.note == "a short sample"
    held = plan(d, short_sample(snap, SPEC, "a short sample", hold="no"), History(), now=NOW)
    assert [(m.vm, m.reason) for m in held.moves + held.deferred] == [("a1", Reason.PIN)]
    assert held.load is not None
    assert held.load.hold == "no"


def moved(v: VmState, *, at_ago: timedelta, left: str, doublings: int = 0) -> VmState:
    record = ReconcilerState(
        last_moved_at=NOW - at_ago,
        last_moved_from=left,
        last_moved_to=v.host,
        last_reason=Reason.BALANCE.value,
        backoff=doublings,
        moves=1,
    )
    return v.model_copy(update={"reconciler": record})


def hot_b_with_a_vm_from_a() -> tuple[list[VmState], dict[str, float | None]]:
    """b is hot with two alike VMs, b0 first by name; b0 came from a for balance."""
    vms = [
        vm("b0", "b", cpu_used=1.2),
        vm("b1", "b", cpu_used=1.2),
        vm("a0", "a", cpu_used=0.0),
        vm("c0", "c", cpu_used=1.0),
    ]
    return vms, {"b0": 1.2, "b1": 1.2, "a0": 0.0, "c0": 1.0}


def test_backoff_keeps_a_vm_from_going_back_and_doubles() -> None:
    hosts, states = cluster()
    d = desired(hosts, **POLICY)
    vms, window = hot_b_with_a_vm_from_a()
    base = plan(d, with_window(snapshot(states, vms), window), History(), now=NOW)
    assert [(m.vm, m.target) for m in base.moves] == [("b0", "a")]

    def planned(ago: timedelta, doublings: int = 0) -> list[tuple[str, str]]:
        seen = [
            moved(v, at_ago=ago, left="a", doublings=doublings) if v.name == "b0" else v
            for v in vms
        ]
        p = plan(d, with_window(snapshot(states, seen), window), History(), now=NOW)
        return [(m.vm, m.target) for m in p.moves + p.deferred]

    # within the backoff (1h): not at all; within twice it: not back to a, the plan moves b1
    assert ("b0", "a") not in planned(timedelta(minutes=30))
    assert ("b0", "a") not in planned(timedelta(minutes=90))
    assert planned(timedelta(minutes=90)) == [("b1", "a")]
    assert planned(timedelta(minutes=150)) == [("b0", "a")]
    # once doubled (it went back once already), twice as long for each
    assert ("b0", "a") not in planned(timedelta(minutes=150), doublings=1)
    assert planned(timedelta(minutes=250), doublings=1) == [("b0", "a")]
    # the plan shows the backoff
    seen = [moved(v, at_ago=timedelta(minutes=90), left="a") if v.name == "b0" else v for v in vms]
    p = plan(d, with_window(snapshot(states, seen), window), History(), now=NOW)
    assert [(b.vm, b.left, b.until, b.back_until) for b in p.backoff] == [
        ("b0", "a", NOW - timedelta(minutes=30), NOW + timedelta(minutes=30))
    ]


def test_mandatory_moves_do_not_wait_for_the_backoff() -> None:
    hosts, states = cluster()
    pin = rule(name="b0-on-a", type="pin", vms={"names": ["b0"]}, hosts={"names": ["a"]})
    d = desired(hosts, rules=[pin], **POLICY)
    vms, window = hot_b_with_a_vm_from_a()
    seen = [moved(v, at_ago=timedelta(minutes=1), left="a") if v.name == "b0" else v for v in vms]
    p = plan(d, with_window(snapshot(states, seen), window), History(), now=NOW)
    assert ("b0", "a", Reason.PIN) in [(m.vm, m.target, m.reason) for m in p.moves]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=12), st.integers(1, 24 * 60))
def test_backoff_doubles_on_each_move_back_and_starts_again_elsewhere(
    back: list[bool], cooldown_minutes: int
) -> None:
    """A VM bounced between two hosts waits twice as long to go back after each return; a
    balance move to a third host, or a move for another reason, starts at the cooldown."""
    cooldown = timedelta(minutes=cooldown_minutes)
    record = ReconcilerState()
    here, there, t = "a", "b", NOW
    expected = 0
    record = backoff.recorded(
        record, reason="Balance", source=here, target=there, at=t, plan_id=None
    )
    here, there = there, here
    for i, goes_back in enumerate(back):
        w = backoff.window(record, cooldown)
        assert w is not None
        assert w.until - w.moved_at == cooldown * 2**expected
        assert w.back_until - w.moved_at == 2 * (w.until - w.moved_at)
        t = w.back_until
        target = there if goes_back else f"x{i}"  # a host it never ran on
        record = backoff.recorded(
            record, reason="Balance", source=here, target=target, at=t, plan_id=None
        )
        expected = min(expected + 1, backoff.MAX_DOUBLINGS) if goes_back else 0
        assert record.backoff == expected
        here, there = target, here
    other = backoff.recorded(record, reason="Drift", source=here, target=there, at=t, plan_id=None)
    assert other.backoff == 0
    assert backoff.window(other, cooldown) is None


def test_pressure_adds_to_a_host_and_stays_with_it() -> None:
    hosts, states = cluster()
    d = desired(hosts, **POLICY)
    vms = [vm("a0", "a", cpu_used=0.4), vm("a1", "a", cpu_used=0.4), vm("b0", "b", cpu_used=0.4)]
    window = {"a0": 0.4, "a1": 0.4, "b0": 0.4}
    snap = snapshot(states, vms)
    figures = {n: Figure(v, 1.0) for n, v in window.items()}
    calm = {h: Figure(0.0, 1.0) for h in ("a", "b", "c")}
    assert not plan(d, windowed(snap, SPEC, figures, NOW, pressure=calm), History(), now=NOW).moves
    # b waits for a CPU 40% of the time: its score goes up by 40 points, and a VM leaves it
    pressed = {**calm, "b": Figure(0.4, 1.0)}
    p = plan(d, windowed(snap, SPEC, figures, NOW, pressure=pressed), History(), now=NOW)
    loads = {h.host: h for h in p.hosts}
    assert loads["b"].cpu_before == 50.0  # 10% from its VM, 40 points of pressure
    assert [(m.vm, m.source, m.target) for m in p.moves] == [("b0", "b", "c")]
    assert loads["b"].cpu_after == 40.0
    # a host whose pressure is unknown takes no part in balance
    unknown = {h: f for h, f in pressed.items() if h != "b"}
    p = plan(d, windowed(snap, SPEC, figures, NOW, pressure=unknown), History(), now=NOW)
    assert p.load is not None
    assert p.load.unknown_hosts == ["b"]
    assert not p.moves
