"""The exact search around the heuristic plan (scopes too large for the whole model).

The whole model is made "too large" for every scope here (``EXACT_COLUMNS`` lowered), so the
search runs on the small cases of ``test_exact.cases`` and is compared with the heuristic alone.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.core import exact, exact_near
from reconciler.core.balance import spread_of
from reconciler.core.state import State, build
from reconciler.model.plan import Plan
from tests.core.builders import desired, host, host_state, snapshot, vm
from tests.core.test_exact import Case, _oracle, _steps_keep_rules, cases, run


def _searched(d: Case) -> Plan:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(exact, "EXACT_COLUMNS", 0)
        return run(*d)


def _heuristic(d: Case) -> Plan:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(exact, "EXACT_HOSTS", 0)
        mp.setattr(exact_near, "NEAR_HOSTS", 0)
        return run(*d)


def _moves(p: Plan) -> int:
    return len(p.moves) + len(p.deferred)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.randoms(use_true_random=False))
def test_the_search_never_adds_moves_and_every_step_keeps_the_rules(
    case: Case, rnd: random.Random
) -> None:
    searched, heuristic = _searched(case), _heuristic(case)
    d, s = case
    _steps_keep_rules(d, s, searched, rnd)
    assert _moves(searched) <= _moves(heuristic)
    assert searched.optimal is not True or _moves(searched) == 0
    for a, b in zip(searched.spreads, heuristic.spreads, strict=True):
        assert a.after <= max(b.after, d.policy.spec.threshold) + 1e-6, (a, b)
    assert _searched(case).plan_id == searched.plan_id


def _bigger_vms() -> Case:
    # Memory % of 64 GiB. hot: 8 x 4 GiB + 16 GiB = 75%; c1, c2: 2 GiB each (3.1%);
    # threshold 20. Greedy takes the 16 GiB VM first (the largest single gain), then needs
    # 4 GiB VMs; the search finds the plan of fewest moves among the hot host's VMs.
    d = desired(
        [host("hot"), host("c1"), host("c2")],
        basis="allocated",
        score={"cpu": 0, "memory": 1},
        threshold=20,
        batch=50,
    )
    vms = [vm(f"s{i}", "hot", memory_gib=4) for i in range(8)]
    vms += [vm("big", "hot", memory_gib=16), vm("x1", "c1", memory_gib=2)]
    vms += [vm("x2", "c2", memory_gib=2)]
    s = snapshot([host_state("hot"), host_state("c1"), host_state("c2")], vms)
    return d, s


def test_fewer_bigger_vms_replace_the_greedy_moves() -> None:
    searched, heuristic = _searched(_bigger_vms()), _heuristic(_bigger_vms())
    assert _moves(searched) <= _moves(heuristic)
    assert all(sp.after <= 20 + 1e-6 for sp in searched.spreads)
    assert searched.optimal is False


def test_every_solve_is_bounded_by_its_nodes_with_the_clock_far_above(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What a solve the clock stops has found depends on the machine's load, so the work of
    # every solve is bounded by nodes (deterministic) and the clock only as a safety net that a
    # machine ten times slower would not reach: the search passes its own limits.
    import scipy.optimize

    real = scipy.optimize.milp
    options: list[dict[str, float]] = []
    searched: list[dict[str, object]] = []

    def recorded(*args: object, **kwargs: object) -> object:
        given = kwargs.get("options")
        assert isinstance(given, dict)
        options.append(dict(given))
        return real(*args, **kwargs)

    real_solve = exact.solve

    def solve(*args: object, **kwargs: object) -> object:
        if kwargs.get("narrow") is not None:  # a sub-model of the search
            searched.append(dict(kwargs))
        return real_solve(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(scipy.optimize, "milp", recorded)
    monkeypatch.setattr(exact, "solve", solve)
    run(*_bigger_vms())  # the whole model, fewest moves then memory
    whole = len(options)
    _searched(_bigger_vms())
    assert whole >= 2
    assert len(options) > whole
    assert searched
    for k in searched:
        assert (k["nodes"], k["seconds"]) == (exact_near.NEAR_NODES, exact_near.NEAR_TIME_LIMIT)
    nodes = {exact.NODE_LIMIT, exact.MEMORY_NODE_LIMIT, exact_near.NEAR_NODES}
    for o in options:
        assert o["node_limit"] in nodes, o
        assert o["mip_rel_gap"] == exact.GAP, o
        assert o["time_limit"] >= 60.0, o
    assert options[0]["node_limit"] == exact.NODE_LIMIT
    assert options[whole]["node_limit"] == exact_near.NEAR_NODES


def _without_moved_pass(d: Case) -> Plan:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(exact, "EXACT_COLUMNS", 0)
        mp.setattr(exact_near, "MOVED_COLUMNS", 0)
        return run(*d)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.randoms(use_true_random=False))
def test_choosing_the_moves_again_never_adds_moves_breaks_a_rule_or_the_threshold(
    case: Case, rnd: random.Random
) -> None:
    searched, windows_only = _searched(case), _without_moved_pass(case)
    d, s = case
    _steps_keep_rules(d, s, searched, rnd)
    assert _moves(searched) <= _moves(windows_only)
    least, threshold = _oracle(d, s), d.policy.spec.threshold
    if least is not None and all(sp.after <= threshold + 1e-6 for sp in searched.spreads):
        assert _moves(searched) >= least  # no plan meeting every rule has fewer moves
    for a, b in zip(searched.spreads, windows_only.spreads, strict=True):
        assert a.after <= max(b.after, d.policy.spec.threshold) + 1e-6, (a, b)
    assert _searched(case).plan_id == searched.plan_id


def _with_a_spare_move() -> tuple[State, dict[str, tuple[int, ...]], dict[int, int], int]:
    """The state of ``_bigger_vms`` plus a small VM on c1, and a plan reaching the threshold
    that also moves that small VM to c2 for nothing."""
    d, s = _bigger_vms()
    s = s.model_copy(update={"vms": [*s.vms, vm("tiny", "c1", memory_gib=0.25)]})
    model, state = build(d, s)
    plan = _heuristic((d, s))
    incumbent = {model.vm_index[m.vm]: model.host_index[m.target] for m in plan.deferred}
    incumbent.update({model.vm_index[m.vm]: model.host_index[m.target] for m in plan.moves})
    tiny = model.vm_index["tiny"]
    assert tiny not in incumbent
    incumbent[tiny] = model.host_index["c2"]
    hosts_of = {a: tuple(h) for a, h in model.arches.items()}
    after = state.copy()
    for v, t in incumbent.items():
        after.move(v, t)
    assert all(spread_of(after, h) <= 20 for h in hosts_of.values())
    return state, hosts_of, incumbent, tiny


def test_the_moves_chosen_again_drop_a_move_whose_vm_can_stay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state, hosts_of, incumbent, tiny = _with_a_spare_move()
    monkeypatch.setattr(exact_near, "NEAR_SOLVES", 0)  # no window: only the moved VMs again

    def search() -> exact.Solution | None:
        target = dict.fromkeys(hosts_of, 20.0)
        return exact_near.search(state, hosts_of, incumbent, lambda v: True, (), {}, target)

    found = search()
    assert found is not None
    assert tiny not in found.target
    assert len(found.target) < len(incumbent)
    assert set(found.target) <= set(incumbent)  # only VMs the plan moved may move
    monkeypatch.setattr(exact_near, "MOVED_COLUMNS", 0)
    assert search() is None  # without the pass, nothing else finds it
