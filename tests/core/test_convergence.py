"""Busy guests in the plan: the forecast of a live move from the guest's dirty rate, and what
the planner does with it (``reconciler.core.convergence``, ``reconciler.core.planner``)."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.core import convergence
from reconciler.core.convergence import DOWNTIME, MIB, Allowed, forecast, postcopy, precopy
from reconciler.core.planner import plan
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.plan import Assist, Reason
from reconciler.model.snapshot import MigrationClass, Snapshot, VmState
from tests.core.builders import GIB, NOW, desired, host, host_state, snapshot, vm
from tests.core.strategies import Case, cases

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

sizes = st.integers(1, 64).map(lambda n: n * 64 * MIB)
rates = st.integers(0, 2048).map(lambda n: n * MIB // 4)
links = st.integers(1, 2048).map(lambda n: n * MIB // 4)


def allow(
    bandwidth: int = 32 * MIB,
    *,
    auto: bool = False,
    post: bool = False,
    limit: float = 800.0,
    stall: float = 150.0,
) -> Allowed:
    return Allowed(bandwidth, auto, post, limit, stall)


# --- the forecast -----------------------------------------------------------------------------


@given(sizes, st.integers(0, 4 * GIB), links)
@SETTINGS
def test_an_idle_guest_converges_in_one_pass_of_memory_and_disks(
    memory: int, disk: int, bandwidth: int
) -> None:
    run = precopy(memory, disk, 0, bandwidth)
    assert run.converges
    assert run.passes == 1
    assert run.bytes == memory + disk
    assert math.isclose(run.seconds, (memory + disk) / bandwidth)


@given(sizes, links, st.floats(1.0, 8.0))
@SETTINGS
def test_a_guest_writing_as_fast_as_the_link_never_converges_without_help(
    memory: int, bandwidth: int, factor: float
) -> None:
    dirty = bandwidth * factor
    run = precopy(memory, 0, dirty, bandwidth, stall=150, limit=1e9)
    # what the first pass leaves is more than the downtime carries unless memory is tiny
    if min(memory, dirty * memory / bandwidth) > bandwidth * DOWNTIME:
        assert not run.converges


@given(sizes, rates, rates, links)
@SETTINGS
def test_writing_faster_never_makes_a_move_cheaper(
    memory: int, slow: int, fast: int, bandwidth: int
) -> None:
    slow, fast = sorted((slow, fast))
    a = precopy(memory, 0, slow, bandwidth)
    b = precopy(memory, 0, fast, bandwidth)
    if b.converges:
        assert a.converges
        assert a.bytes <= b.bytes
        assert a.seconds <= b.seconds + 1e-9


@given(sizes, rates, links, links)
@SETTINGS
def test_more_bandwidth_never_turns_a_converging_move_into_a_stall(
    memory: int, dirty: int, low: int, high: int
) -> None:
    low, high = sorted((low, high))
    if precopy(memory, 0, dirty, low, stall=150, limit=800).converges:
        assert precopy(memory, 0, dirty, high, stall=150, limit=800).converges


@given(sizes, st.integers(0, 4 * GIB), rates, links)
@SETTINGS
def test_post_copy_always_ends_within_one_pass_and_all_memory_again(
    memory: int, disk: int, dirty: int, bandwidth: int
) -> None:
    run = postcopy(memory, disk, dirty, bandwidth)
    assert run.converges
    assert memory + disk <= run.bytes <= 2 * memory + disk


@given(sizes, rates, links, st.booleans(), st.booleans())
@SETTINGS
def test_the_help_is_the_least_the_policy_allows_that_converges(
    memory: int, dirty: int, bandwidth: int, auto: bool, post: bool
) -> None:
    allowed = allow(bandwidth, auto=auto, post=post)
    out = forecast(memory, 0, dirty, allowed)
    plain = precopy(memory, 0, dirty, bandwidth, stall=allowed.stall, limit=allowed.time_limit)
    if plain.converges:
        assert out.assist is Assist.NONE
        assert out.converges
        assert out.risk is None
    elif out.assist is Assist.AUTO_CONVERGE:
        assert auto
        assert out.risk is not None
        assert "slowed down" in out.risk
    elif out.assist is Assist.POST_COPY:
        assert post
        assert out.risk is not None
        assert "paused until the post-copy is resumed" in out.risk
    else:
        assert not post
        assert not out.converges
        assert out.risk is not None
        assert "allow autoConverge or postCopy, or raise the bandwidth" in out.risk
    assert out.converges == (out.assist is not Assist.NONE or plain.converges)


def test_the_lab_guest_at_4_mib_s() -> None:
    """A 128 MiB guest writing 20 MiB/s at 4 MiB/s: pre-copy stalls, post-copy ends in about
    a minute, and auto-converge throttles it down to what fits."""
    memory, dirty = 128 * MIB, 20 * MIB
    plain = forecast(memory, 0, dirty, allow(4 * MIB, stall=20))
    assert not plain.converges
    assert plain.risk is not None
    assert "writes 20 MiB/s, too fast for 4 MiB/s" in plain.risk
    assert "progressTimeout (20s)" in plain.risk
    post = forecast(memory, 0, dirty, allow(4 * MIB, post=True, stall=20))
    assert post.assist is Assist.POST_COPY
    assert post.seconds == 64.0
    auto = forecast(memory, 0, dirty, allow(4 * MIB, auto=True, post=True, stall=400))
    assert auto.assist is Assist.AUTO_CONVERGE


def test_without_a_bandwidth_the_link_is_assumed() -> None:
    out = forecast(4 * GIB, 0, 100 * MIB, allow(0))
    assert out.bandwidth_assumed
    assert out.bandwidth == convergence.ASSUMED_LINK
    assert out.converges


def test_the_bandwidth_is_the_targets_the_clusters_or_for_copies_their_own() -> None:
    hosts = [host("h0"), host("h1")]
    d = with_bandwidth(desired(hosts), 16)
    assert convergence.allowed(d, hosts[0], vm_class("shared"), GIB).bandwidth == 16 * MIB
    own = hosts[1].model_copy(
        update={"migration": hosts[1].migration.model_copy(update={"bandwidth": 8})}
    )
    assert convergence.allowed(d, own, vm_class("shared"), GIB).bandwidth == 8 * MIB
    spec = d.cluster.spec.model_copy(update={"hosts": [hosts[0], own]})
    d2 = d.model_copy(update={"cluster": d.cluster.model_copy(update={"spec": spec})})
    assert convergence.allowed(d2, None, vm_class("shared"), GIB).bandwidth == 8 * MIB
    unlimited = with_bandwidth(desired(hosts), 0)
    assert convergence.allowed(unlimited, None, vm_class("shared"), GIB).bandwidth == 0
    copying = with_policy(d, {"copy": {"bandwidth": 64, "postCopy": True}})
    copy = convergence.allowed(copying, hosts[0], vm_class("copy"), 3 * GIB + 1)
    assert (copy.bandwidth, copy.post_copy, copy.time_limit) == (64 * MIB, True, 800 * 4)


def vm_class(name: str) -> MigrationClass:
    return MigrationClass(name)


def with_bandwidth(d: DesiredState, mib: int) -> DesiredState:
    defaults = d.cluster.spec.defaults
    migration = defaults.migration.model_copy(update={"bandwidth": mib})
    spec = d.cluster.spec.model_copy(
        update={"defaults": defaults.model_copy(update={"migration": migration})}
    )
    return d.model_copy(update={"cluster": d.cluster.model_copy(update={"spec": spec})})


def with_policy(d: DesiredState, migration: dict[str, object]) -> DesiredState:
    tuning = d.policy.spec.migration.model_validate(
        {**d.policy.spec.migration.model_dump(by_alias=True), **migration}
    )
    spec = d.policy.spec.model_copy(update={"migration": tuning})
    return d.model_copy(update={"policy": d.policy.model_copy(update={"spec": spec})})


# --- the planner --------------------------------------------------------------------------------


def busy(v: VmState, mib_per_second: int) -> VmState:
    return v.model_copy(update={"dirty_rate": mib_per_second * MIB})


def two_hosts(*vms: VmState) -> Snapshot:
    return snapshot([host_state("h0"), host_state("h1")], list(vms))


def test_of_two_guests_that_fix_the_imbalance_the_one_that_converges_moves() -> None:
    d = with_bandwidth(desired([host("h0"), host("h1")], threshold=10), 4)
    base = [vm("a", "h0", cpu_used=4.0), vm("b", "h0", cpu_used=4.0), vm("c", "h0")]
    for writer, idle in (("a", "b"), ("b", "a")):
        vms = [busy(v, 20) if v.name == writer else busy(v, 0) for v in base]
        p = plan(d, two_hosts(*vms), History(), now=NOW)
        moved = [m.vm for m in p.moves]
        assert idle in moved
        assert writer not in moved
        (move,) = (m for m in p.moves if m.vm == idle)
        assert move.convergence is not None
        assert move.convergence.converges
        assert move.convergence.assist is Assist.NONE


def test_a_guest_that_only_converges_with_help_moves_when_no_other_does_and_says_so() -> None:
    d = with_policy(
        with_bandwidth(desired([host("h0"), host("h1")], threshold=10), 4), {"postCopy": True}
    )
    both = [busy(vm(name, "h0", cpu_used=4.0), 20) for name in ("a", "b")]
    p = plan(d, two_hosts(*both), History(), now=NOW)
    (move,) = p.moves
    assert move.reason is Reason.BALANCE
    assert move.convergence is not None
    assert move.convergence.assist is Assist.POST_COPY
    assert move.convergence.risk is not None


def test_a_guest_that_would_not_converge_is_not_moved_for_balance() -> None:
    d = with_bandwidth(desired([host("h0"), host("h1")], threshold=10), 4)
    p = plan(d, two_hosts(busy(vm("a", "h0", cpu_used=4.0), 20), vm("c", "h0")), History(), now=NOW)
    assert "a" not in [m.vm for m in p.moves + p.deferred]


def test_a_drain_moves_a_guest_that_would_not_converge_and_names_the_risk() -> None:
    hosts = [host("h0", maintenance=True), host("h1")]
    d = with_bandwidth(desired(hosts), 16)
    guest = busy(vm("a", "h0", memory_gib=0.125), 20)
    p = plan(d, two_hosts(guest), History(), now=NOW)
    (move,) = p.moves
    assert move.reason is Reason.MAINTENANCE
    assert move.convergence is not None
    assert not move.convergence.converges
    assert move.convergence.risk is not None
    assert "expected to be aborted" in move.convergence.risk
    helped = plan(
        with_policy(d, {"autoConverge": True}),
        two_hosts(guest),
        History(),
        now=NOW,
    )
    assert helped.moves[0].convergence is not None
    assert helped.moves[0].convergence.assist is Assist.AUTO_CONVERGE


@st.composite
def busy_cases(draw: st.DrawFn) -> Case:
    d, snap, history = draw(cases())
    rates = [draw(st.sampled_from([None, 0, 1, 8, 64, 512])) for _ in snap.vms]
    vms = [
        v.model_copy(update={"dirty_rate": None if r is None else r * MIB})
        for v, r in zip(snap.vms, rates, strict=True)
    ]
    d = with_bandwidth(d, draw(st.sampled_from([0, 4, 64])))
    d = with_policy(d, {"autoConverge": draw(st.booleans()), "postCopy": draw(st.booleans())})
    return d, snap.model_copy(update={"vms": vms}), history


@given(busy_cases())
@SETTINGS
def test_no_balance_move_is_planned_that_is_predicted_not_to_converge(case: Case) -> None:
    d, snap, history = case
    p = plan(d, snap, history, now=NOW)
    for m in p.moves + p.deferred:
        if m.reason is Reason.BALANCE and m.convergence is not None:
            assert m.convergence.converges, m


@given(cases())
@SETTINGS
def test_guests_measured_idle_are_planned_as_guests_not_measured(case: Case) -> None:
    d, snap, history = case
    idle = snap.model_copy(
        update={"vms": [v.model_copy(update={"dirty_rate": 0}) for v in snap.vms]}
    )
    a, b = plan(d, snap, history, now=NOW), plan(d, idle, history, now=NOW)
    assert [(m.vm, m.target) for m in a.moves] == [(m.vm, m.target) for m in b.moves]
    assert a.plan_id == b.plan_id
