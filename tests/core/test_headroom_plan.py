"""The planner keeps N+k (``reserveHosts``): balance moves that would leave the VMs of some
``k`` hosts no room are held back and said so; mandatory moves go regardless, with the reason.
Properties over random clusters, and the examples that show each case."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.core import headroom
from reconciler.core.planner import plan
from reconciler.core.recovery import restart_plan
from reconciler.core.state import build
from reconciler.core.steps import Step
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.plan import Plan, Reason, UnsatisfiableCode
from reconciler.model.recovery import SavedVm
from reconciler.model.snapshot import Snapshot
from tests.core.builders import GIB, NOW, apply_moves, desired, host, host_state, snapshot, vm


def reserve_problem(d: DesiredState, snap: Snapshot) -> str | None:
    model, state = build(d, snap)
    spec = d.policy.spec
    k = spec.recovery.reserve_hosts
    return headroom.problem(headroom.bins(model, state, float(spec.host_limit)), k)


def after(snap: Snapshot, p: Plan) -> Snapshot:
    return apply_moves(snap, [*p.moves, *p.deferred])


@st.composite
def clusters(draw: st.DrawFn, *, drift: bool) -> tuple[DesiredState, Snapshot]:
    n = draw(st.integers(min_value=2, max_value=4))
    names = [f"h{i}" for i in range(n)]
    sizes = [draw(st.sampled_from([8, 16])) for _ in names]
    count = draw(st.integers(min_value=n, max_value=3 * n))
    vms = [
        vm(
            f"v{i}",
            draw(st.sampled_from(names)),
            memory_gib=draw(st.sampled_from([1, 2, 3, 4, 6])),
            vcpus=1,
        )
        for i in range(count)
    ]
    placement: dict[str, str] = {}
    if drift:
        for v in vms:
            if draw(st.booleans()):
                placement[v.name] = draw(st.sampled_from(names))
    d = desired(
        [host(h) for h in names],
        placement=placement,
        recovery={"reserveHosts": draw(st.sampled_from([1, 1, 2]))},
        threshold=draw(st.sampled_from([2, 5])),
        margin=0.5,
        basis="allocated",
        minUptime="0s",
    )
    hosts = [host_state(h, memory_gib=m) for h, m in zip(names, sizes, strict=True)]
    return d, snapshot(hosts, vms)


PROPERTY = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much]
)


def assert_kept_or_said(d: DesiredState, snap: Snapshot) -> None:
    """From a cluster that keeps the reserve, the plan keeps it, or it has mandatory moves and
    says that they broke it."""
    if reserve_problem(d, snap) is not None:
        return
    p = plan(d, snap, History(), now=NOW)
    if reserve_problem(d, after(snap, p)) is None:
        return
    mandatory = [m for m in [*p.moves, *p.deferred] if m.reason is not Reason.BALANCE]
    assert mandatory, f"balance alone broke the reserve: {p.moves}"
    said = [u.message for u in p.unsatisfiable if u.code is UnsatisfiableCode.HEADROOM]
    assert any("mandatory move(s) of" in m and "go regardless" in m for m in said), said


@PROPERTY
@given(clusters(drift=False))
def test_a_plan_from_a_cluster_that_keeps_the_reserve_keeps_it(
    case: tuple[DesiredState, Snapshot],
) -> None:
    assert_kept_or_said(*case)


@PROPERTY
@given(clusters(drift=True))
def test_only_mandatory_moves_break_the_reserve_and_the_plan_says_which(
    case: tuple[DesiredState, Snapshot],
) -> None:
    assert_kept_or_said(*case)


@settings(max_examples=200, deadline=None)
@given(clusters(drift=False), st.data())
def test_the_filter_keeps_the_reserve_over_any_moves_and_never_drops_a_mandatory_one(
    case: tuple[DesiredState, Snapshot], data: st.DataObject
) -> None:
    d, snap = case
    model, state = build(d, snap)
    k, limit = d.policy.spec.recovery.reserve_hosts, float(d.policy.spec.host_limit)
    if headroom.problem(headroom.bins(model, state, limit), k) is not None:
        return
    where = list(state.host_of)
    steps: list[Step] = []
    for _ in range(data.draw(st.integers(min_value=3, max_value=10))):
        v = data.draw(st.integers(min_value=0, max_value=len(model.vms) - 1))
        t = data.draw(st.integers(min_value=0, max_value=len(model.hosts) - 1))
        if where[v] == t:
            continue
        mandatory = data.draw(st.sampled_from([False] * 7 + [True]))
        reason = Reason.DRIFT if mandatory else Reason.BALANCE
        steps.append(Step(v, where[v], t, reason, None, "", mandatory))
        where[v] = t
    kept = headroom.keeping_reserve(state, steps, k, limit)
    chosen = {id(s) for s in kept.steps}
    assert [s for s in steps if id(s) in chosen] == kept.steps  # in order, nothing added
    assert [s for s in steps if s.mandatory] == [s for s in kept.steps if s.mandatory]
    assert len(kept.steps) + len(kept.held) == len(steps)
    end = state.copy()
    for s in kept.steps:  # a kept balance move never breaks a reserve that held before it
        held = headroom.problem(headroom.bins(model, end, limit), k) is None
        end.move(s.vm, s.target)
        if held and not s.mandatory:
            assert headroom.problem(headroom.bins(model, end, limit), k) is None
    if not any(s.mandatory for s in steps):
        assert headroom.problem(headroom.bins(model, end, limit), k) is None


def test_balance_that_would_break_the_reserve_is_held_back_and_said_so() -> None:
    # a (16 GiB) carries 11 GiB, b and c (8 GiB) 0 and 2. Balance moves v3 to b and v2 to c;
    # then, should a fail, its 6 GiB VM would fit neither on b (5 GiB left) nor on c (3.2).
    hosts = [host_state("a", memory_gib=16), host_state("b", memory_gib=8)]
    hosts.append(host_state("c", memory_gib=8))
    vms = [vm("v0", "a", memory_gib=6, vcpus=1), vm("v1", "c", memory_gib=2, vcpus=1)]
    vms += [vm("v2", "a", memory_gib=2, vcpus=1), vm("v3", "a", memory_gib=3, vcpus=1)]
    snap = snapshot(hosts, vms)
    hosts_abc = [host(h) for h in "abc"]
    loose_d = desired(hosts_abc, basis="allocated", threshold=5, minUptime="0s")
    loose = plan(loose_d, snap, History(), now=NOW)
    assert {(m.vm, m.target) for m in loose.moves} == {("v3", "b"), ("v2", "c")}
    tight = desired(
        hosts_abc, basis="allocated", threshold=5, minUptime="0s", recovery={"reserveHosts": 1}
    )
    assert reserve_problem(tight, snap) is None
    p = plan(tight, snap, History(), now=NOW)
    assert [(m.vm, m.target) for m in [*p.moves, *p.deferred]] == [("v2", "c")]
    assert reserve_problem(tight, after(snap, p)) is None
    (held,) = (u for u in p.unsatisfiable if u.code is UnsatisfiableCode.HEADROOM)
    assert held.vms == ["v3"]
    assert held.message.startswith("1 balance move(s) held back to keep reserveHosts")
    assert "moving v3 to b would break it: if a failed, v0 (6GiB)" in held.message


def test_a_mandatory_move_goes_even_when_it_breaks_the_reserve_with_the_reason() -> None:
    # three 16 GiB hosts; placement sends v0 (6 GiB) from b back to a, which leaves a with
    # 12 GiB: should b then fail, its 8 GiB VM would fit neither on a nor on c.
    d = desired(
        [host(h) for h in "abc"],
        placement={"v0": "a"},
        recovery={"reserveHosts": 1},
        threshold=50,
    )
    vms = [vm("v0", "b", memory_gib=6, vcpus=1), vm("v1", "c", memory_gib=8, vcpus=1)]
    vms += [vm("v2", "b", memory_gib=8, vcpus=1), vm("v3", "a", memory_gib=6, vcpus=1)]
    snap = snapshot([host_state(h, memory_gib=16) for h in "abc"], vms)
    assert reserve_problem(d, snap) is None
    p = plan(d, snap, History(), now=NOW)
    assert [(m.vm, m.target, m.reason) for m in p.moves] == [("v0", "a", Reason.DRIFT)]
    assert reserve_problem(d, after(snap, p)) is not None
    (said,) = (u for u in p.unsatisfiable if u.code is UnsatisfiableCode.HEADROOM)
    assert said.message == (
        "if b failed, v2 (8GiB) would fit on no other host (reserveHosts 1); it held before "
        "this plan's mandatory move(s) of v0, which go regardless"
    )


def test_the_reserve_is_spent_on_a_recovery_not_kept_from_it() -> None:
    # three 16 GiB hosts, a dead: its 8 GiB VM fits on b, after which b and c could no
    # longer hold each other's VMs. The reserve was kept for exactly this: it is restarted.
    d = desired([host(h) for h in "abc"], recovery={"reserveHosts": 1})
    hosts = [host_state("a", memory_gib=16, reachable=False)]
    hosts += [host_state(h, memory_gib=16) for h in "bc"]
    snap = snapshot(hosts, [vm("b0", "b", memory_gib=4), vm("c0", "c", memory_gib=8)])
    dead = SavedVm(
        name="a0", uuid="uuid-a0", host="a", running=True, vcpus=1, memory=8 * GIB,
        xml="<domain/>", seen_at=NOW,
    )  # fmt: skip
    (restart,) = restart_plan(d, snap, [dead], now=NOW)
    assert restart.target == "b", restart.why
    assert reserve_problem(d, snap) is None
