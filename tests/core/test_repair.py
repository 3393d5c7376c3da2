"""The heuristic repair of a broken antiAffinity or spread: which member moves, and where.

The exact joint plan is switched off here (``EXACT_HOSTS = 0``, as on a cluster too large for
it), so these pin down the heuristic itself. Scores are memory % of 64 GiB hosts (basis
allocated, CPU weight 0).
"""

from __future__ import annotations

import random

import pytest

from reconciler.core import exact
from reconciler.core.planner import plan
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.plan import Plan, Reason, UnsatisfiableCode
from reconciler.model.snapshot import Snapshot
from tests.core import test_properties as props
from tests.core.builders import NOW, desired, host, host_state, rule, snapshot, vm
from tests.core.test_exact import _coupled, _oracle, _steps_keep_rules

DB = {"app": "db"}
APART = rule(name="db-apart", type="antiAffinity", vms={"labels": DB}, enforcement="required")


@pytest.fixture(autouse=True)
def _heuristic_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exact, "EXACT_HOSTS", 0)


def _run(d: DesiredState, s: Snapshot) -> Plan:
    return plan(d, s, History(), now=NOW)


def _moves(p: Plan) -> list[tuple[str, str, str, str]]:
    return [(m.vm, m.source, m.target, str(m.reason)) for m in p.moves + p.deferred]


def test_the_big_member_leaves_the_hot_host_and_one_move_repairs_and_balances() -> None:
    # a: db-big 16 + db-small 4 + f 12 = 50%, b: 4 = 6.25%, c: 8 = 12.5%; threshold 20.
    # db-big to b: 25 / 31.25 / 12.5, within the threshold in one move. The smallest member
    # to the emptiest host (b) left a at 43.75% and took a balance move more (f to b).
    d = desired(
        [host("a"), host("b"), host("c")],
        rules=[APART],
        basis="allocated",
        score={"cpu": 0, "memory": 1},
        threshold=20,
    )
    s = snapshot(
        [host_state("a"), host_state("b"), host_state("c")],
        [
            vm("db-big", "a", memory_gib=16, labels=DB),
            vm("db-small", "a", memory_gib=4, labels=DB),
            vm("f", "a", memory_gib=12),
            vm("g", "b", memory_gib=4),
            vm("h", "c", memory_gib=8),
        ],
    )
    p = _run(d, s)
    assert _moves(p) == [("db-big", "a", "b", "AntiAffinity")]
    assert all(sp.after <= 20 for sp in p.spreads)
    assert p.optimal is False  # the heuristic's plan, not an exact one


def test_the_issues_coupled_racks_take_the_optimums_two_moves_without_the_exact_plan() -> None:
    # tests/core/test_exact.py's two-architecture rack case: xb (16 GiB) rather than xs (4)
    # leaves rack r1, so x86_64 needs no balance move after the repair: 2 moves, the optimum.
    d, s = _coupled()
    p = _run(d, s)
    moves = p.moves + p.deferred
    assert sorted((m.vm, m.target) for m in moves) == [("g", "b2"), ("xb", "a2")]
    assert len(moves) == _oracle(d, s) == 2
    assert all(sp.after <= 20 for sp in p.spreads)
    _steps_keep_rules(d, s, p, random.Random(1))


def test_a_member_on_a_host_below_the_mean_gives_its_smallest_member() -> None:
    # a 75% (hot, no member), b: m-big 8 + m-small 2 + o 8 = 28.1%, c empty, d 25%: mean
    # 32%. Moving m-big to c would even b and c out more, but b is below the mean: its load
    # is not what needs to move, and c's room is what a's VMs need. m-small goes.
    d = desired(
        [host("a"), host("b"), host("c"), host("d")],
        rules=[APART],
        basis="allocated",
        score={"cpu": 0, "memory": 1},
        threshold=100,
    )
    s = snapshot(
        [host_state(h) for h in "abcd"],
        [
            vm("hot", "a", memory_gib=48),
            vm("m-big", "b", memory_gib=8, labels=DB),
            vm("m-small", "b", memory_gib=2, labels=DB),
            vm("o", "b", memory_gib=8),
            vm("w", "d", memory_gib=16),
        ],
    )
    assert _moves(_run(d, s)) == [("m-small", "b", "c", "AntiAffinity")]


def test_preferred_rules_rank_before_balance() -> None:
    # As in the first case, but db-big prefers host a: moving it would break that preference,
    # so db-small moves although db-big would balance better.
    prefer = rule(
        name="db-big-on-a",
        type="hostAffinity",
        vms={"names": ["db-big"]},
        hosts={"names": ["a"]},
        enforcement="preferred",
    )
    d = desired(
        [host("a"), host("b"), host("c")],
        rules=[APART, prefer],
        basis="allocated",
        score={"cpu": 0, "memory": 1},
        threshold=100,
    )
    s = snapshot(
        [host_state("a"), host_state("b"), host_state("c")],
        [
            vm("db-big", "a", memory_gib=16, labels=DB),
            vm("db-small", "a", memory_gib=4, labels=DB),
            vm("f", "a", memory_gib=12),
            vm("g", "b", memory_gib=4),
            vm("h", "c", memory_gib=8),
        ],
    )
    assert _moves(_run(d, s)) == [("db-small", "a", "b", "AntiAffinity")]


def test_alike_members_move_by_name_whatever_their_order() -> None:
    # Two alike members on the hot host: the same move (the lower name) in every order.
    d = desired(
        [host("a"), host("b")], rules=[APART], basis="allocated", score={"cpu": 0, "memory": 1}
    )
    vms = [
        vm("db-2", "a", memory_gib=8, labels=DB),
        vm("db-1", "a", memory_gib=8, labels=DB),
        vm("x", "a", memory_gib=8),
    ]
    hosts = [host_state("a"), host_state("b")]
    first = _run(d, snapshot(hosts, vms))
    again = _run(d, snapshot(hosts[::-1], vms[::-1]))
    assert _moves(first)[0] == ("db-1", "a", "b", "AntiAffinity")
    assert first.plan_id == again.plan_id


def test_no_target_on_a_free_rack_says_so() -> None:
    # Both aarch64 hosts sit in rack r2, where the two members already share: no move can
    # repair the rule, and the reason names the racks, not unknown hosts.
    d = desired(
        [
            host("x1", labels={"rack": "r1"}),
            host("y1", labels={"rack": "r2"}),
            host("y2", labels={"rack": "r2"}),
        ],
        rules=[
            rule(
                name="db-apart",
                type="antiAffinity",
                vms={"labels": DB},
                topologyKey="rack",
                enforcement="required",
            )
        ],
    )
    s = snapshot(
        [host_state("x1"), host_state("y1", arch="aarch64"), host_state("y2", arch="aarch64")],
        [vm("m1", "y1", labels=DB), vm("m2", "y2", labels=DB)],
    )
    p = _run(d, s)
    assert not [m for m in p.moves + p.deferred if m.reason is Reason.ANTI_AFFINITY]
    [problem] = [u for u in p.unsatisfiable if u.rule == "db-apart"]
    assert problem.code is UnsatisfiableCode.NO_FEASIBLE_HOST
    assert "every aarch64 host they may use is on a rack holding a member" in problem.message


def test_the_heuristic_alone_keeps_the_plan_properties() -> None:
    # The properties of tests/core/test_properties.py on random clusters (most with broken
    # groups), here with every repair and balance move the heuristic's: moves in any order
    # within a wave never worsen a required rule, and shuffled inputs give the same plan.
    props.test_moves_in_any_order_within_a_wave_keep_capacity_and_never_worsen_a_required_rule()
    props.test_shuffled_inputs_give_the_same_plan()
