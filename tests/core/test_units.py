"""Unit tests of the planner's building blocks: selectors, counters, capacity, waves."""

from __future__ import annotations

import pytest

from reconciler.core.capacity import Weights, pct, score, spread, vm_loads
from reconciler.core.feasibility import check_move, preferred_delta
from reconciler.core.rules import DomainCounts
from reconciler.core.selectors import Index, Item, matches
from reconciler.core.state import build
from reconciler.core.steps import Step
from reconciler.core.waves import assign_waves
from reconciler.model.plan import Reason
from reconciler.model.policy import BalancePolicySpec
from reconciler.model.rules import Selector
from reconciler.model.snapshot import VmRunState
from tests.core.builders import GIB, desired, host, host_state, rule, snapshot, vm


@pytest.mark.parametrize(
    ("selector", "name", "labels", "expected"),
    [
        (Selector(names=["db-*"]), "db-1", {}, True),
        (Selector(names=["db-*"]), "DB-1", {}, False),
        (Selector(names=["db-?"]), "db-10", {}, False),
        (Selector(names=["a", "b"]), "b", {}, True),
        (Selector(labels={"app": "web"}), "x", {"app": "web", "t": "1"}, True),
        (Selector(labels={"app": "web"}), "x", {"app": "db"}, False),
        (Selector(names=["w*"], labels={"app": "web"}), "x", {"app": "web"}, False),
        (Selector(names=["w*"], labels={"app": "web"}), "w1", {"app": "web"}, True),
    ],
)
def test_selector_matches(
    selector: Selector, name: str, labels: dict[str, str], expected: bool
) -> None:
    assert matches(selector, name, labels) is expected
    index = Index([Item(0, name, labels), Item(1, "zzz-other", {})])
    assert (0 in index.select(selector)) is expected


def test_index_equals_scanning() -> None:
    items = [
        Item(i, f"{p}-{i}", {"app": p}) for i, p in enumerate(["db", "web", "db", "cache"] * 5)
    ]
    index = Index(items)
    for sel in [
        Selector(names=["db-*"]),
        Selector(names=["*-1?"]),
        Selector(names=["[dw]*"]),
        Selector(names=["web-1"], labels={"app": "web"}),
        Selector(labels={"app": "db"}),
        Selector(names=["*"]),
    ]:
        assert index.select(sel) == {i for i, n, lab in items if matches(sel, n, lab)}


def test_domain_counts_measures() -> None:
    anti = DomainCounts("antiAffinity", 1)
    for d in ["a", "a", "b", "a"]:
        anti.shift(d, 1)
    assert anti.measure() == 2
    anti.shift("a", -1)
    anti.shift("c", 1)
    assert anti.measure() == 1

    aff = DomainCounts("affinity", 1)
    for d in ["a", "b", "b"]:
        aff.shift(d, 1)
    assert aff.measure() == 1
    aff.shift("a", -1)
    aff.shift("b", 1)
    assert aff.measure() == 0

    spr = DomainCounts("spread", 1)
    for d in ["r1", "r2", "r3"]:
        spr.add_domain(d)
    for _ in range(3):
        spr.shift("r1", 1)
    assert spr.measure() == 2  # 3 - 0 - maxSkew 1
    before = spr.key()
    spr.shift("r1", -1)
    spr.shift("r2", 1)
    assert spr.key() < before
    spr.shift(None, 1)  # members on hosts outside the rule do not count
    assert spr.total == 3


def test_capacity_figures() -> None:
    w = Weights(0.5, 0.5, 90)
    assert pct(4, 16) == 25
    assert pct(0, 0) == 0
    assert pct(1, 0) > 100
    assert score(20, 40, w) == 30
    assert spread([10, 30, 20]) == 20
    assert spread([5]) == 0
    used = BalancePolicySpec()
    allocated = BalancePolicySpec.model_validate({"basis": "allocated"})
    v = vm("x", "a", vcpus=4, memory_gib=8, cpu_used=1.5)
    assert vm_loads(v, used) == (4, 8 * GIB, 1.5, float(8 * GIB))
    assert vm_loads(v, allocated) == (4, 8 * GIB, 4.0, float(8 * GIB))
    off = v.model_copy(update={"state": VmRunState.SHUTOFF})
    assert vm_loads(off, used) == (0, 0, 0.0, 0.0)
    unknown = v.model_copy(update={"cpu_used": None})
    assert vm_loads(unknown, used)[2] == 1.0  # vcpus / cpuOvercommit 4


def test_reserves_and_overcommit_limit_targets() -> None:
    d = desired([host("a"), host("b")], cpuOvercommit=1.0, hostLimit=100)
    s = snapshot(
        [host_state("a", cpus=4), host_state("b", cpus=4, memory_gib=8)],
        [vm("x", "a", vcpus=3, memory_gib=4), vm("y", "b", vcpus=2, memory_gib=2)],
    )
    model, state = build(d, s)
    x = model.vm_index["x"]
    refusal = check_move(state, x, model.host_index["b"])
    assert refusal is not None
    assert refusal.category == "vcpus"


def test_group_rule_check_blocks_breaking_a_satisfied_rule() -> None:
    d = desired(
        [host("a"), host("b"), host("c")],
        rules=[
            rule(name="apart", type="antiAffinity", vms={"names": ["db-*"]}),
            rule(
                name="soft-off-c",
                type="hostAntiAffinity",
                vms={"names": ["db-1"]},
                hosts={"names": ["c"]},
                enforcement="preferred",
            ),
        ],
    )
    s = snapshot(
        [host_state("a"), host_state("b"), host_state("c")], [vm("db-1", "a"), vm("db-2", "b")]
    )
    model, state = build(d, s)
    db1 = model.vm_index["db-1"]
    refusal = check_move(state, db1, model.host_index["b"])
    assert refusal is not None
    assert refusal.category == "rule apart"
    assert check_move(state, db1, model.host_index["c"]) is None
    assert preferred_delta(state, db1, model.host_index["c"]) == (1, 0)


def test_waves_respect_dependencies_and_limits() -> None:
    d = desired(
        [host("a", max_outbound=1), host("b"), host("c")],
        rules=[
            rule(name="budget", type="disruptionBudget", vms={"names": ["w*"]}, maxConcurrent=1)
        ],
    )
    s = snapshot(
        [host_state("a"), host_state("b"), host_state("c")],
        [vm("v1", "a"), vm("v2", "a"), vm("v3", "b"), vm("w1", "c"), vm("w2", "c")],
    )
    model, _ = build(d, s)
    a, b, c = (model.host_index[n] for n in "abc")
    ix = model.vm_index

    def st(name: str, src: int, dst: int) -> Step:
        return Step(ix[name], src, dst, Reason.BALANCE, None, "", False)

    steps = [
        st("v1", a, b),  # wave 0
        st("v2", a, c),  # a's maxOutbound 1 -> wave 1
        st("w1", c, b),  # wave 0
        st("w2", c, b),  # budget maxConcurrent 1 -> wave 1
        st("v3", b, a),  # its target a is left by v1 (0) and v2 (1) -> wave 2
    ]
    assert assign_waves(steps, model, parallel=8) == [0, 1, 0, 1, 2]
    assert assign_waves(steps, model, parallel=1) == [0, 1, 2, 3, 4]
