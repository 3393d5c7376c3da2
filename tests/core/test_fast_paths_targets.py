"""The searches for a VM's or a unit's best host, visiting hosts lowest score first and stopping
where no host left can rank better, choose what a check of every host chooses.

Checked on random clusters against the plain scans they replaced: the host found, and every
host's refusal (in the order of the hosts given) when none takes the VM or the unit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.feasibility import Refusal, check_move, preferred_delta
from reconciler.core.state import State, build
from reconciler.core.units import (
    Limits,
    Ranking,
    best_target,
    best_unit_target,
    candidate_hosts,
    check_unit,
    lowest_first,
    room_for,
    unit_key,
    unit_of,
)
from tests.core.builders import desired, host, host_state, snapshot, vm
from tests.core.strategies import Case, cases
from tests.core.test_fast_paths import SETTINGS


def _target_plainly(
    state: State, v: int, hosts: Sequence[int], accept: Callable[[int], Refusal | None] | None
) -> tuple[int | None, list[Refusal]]:
    best: tuple[int, int, float, str] | None = None
    best_host: int | None = None
    refusals: list[Refusal] = []
    for t in hosts:
        refusal = check_move(state, v, t)
        if refusal is None and accept is not None:
            refusal = accept(t)
        if refusal is not None:
            refusals.append(refusal)
            continue
        breaks, repairs = preferred_delta(state, v, t)
        key = (breaks, -repairs, state.score_with(t, v, 1), state.model.hosts[t].name)
        if best is None or key < best:
            best, best_host = key, t
    return best_host, refusals


def _unit_target_plainly(
    state: State, unit: Sequence[int], hosts: Sequence[int], limits: Limits
) -> tuple[int | None, list[Refusal]]:
    best: tuple[int, int, float, str] | None = None
    best_host: int | None = None
    refusals: list[Refusal] = []
    for t in hosts:
        refusal = check_unit(state, unit, t, limits)
        if refusal is not None:
            refusals.append(refusal)
            continue
        key = unit_key(state, unit, t)
        if best is None or key < best:
            best, best_host = key, t
    return best_host, refusals


def _placed(case: Case) -> tuple[State, list[int]]:
    desired, snap, _ = case
    _, state = build(desired, snap)
    return state, [v for v in range(len(state.host_of)) if state.host_of[v] >= 0]


@SETTINGS
@given(cases(), st.data())
def test_the_best_host_of_a_vm_is_the_one_a_check_of_every_host_finds(
    case: Case, data: st.DataObject
) -> None:
    state, placed = _placed(case)
    refused = data.draw(st.frozensets(st.integers(0, 7)))

    def accept(t: int) -> Refusal | None:
        return Refusal("test", f"host {t} refused") if t in refused else None

    for v in placed:
        hosts = candidate_hosts(state, v)
        for extra in (None, accept):
            found = best_target(state, v, hosts, extra)
            plain = _target_plainly(state, v, hosts, extra)
            assert found[0] == plain[0]
            if found[0] is None:
                assert found[1] == plain[1]


@SETTINGS
@given(cases(), st.integers(1, 4))
def test_the_best_host_of_a_unit_is_the_one_a_check_of_every_host_finds(
    case: Case, max_unit: int
) -> None:
    state, placed = _placed(case)
    limits = Limits(max_unit)
    for v in placed:
        unit = unit_of(state, v)
        hosts = candidate_hosts(state, v)
        found = best_unit_target(state, unit, hosts, limits)
        plain = _unit_target_plainly(state, unit, hosts, limits)
        assert found[0] == plain[0]
        if found[0] is None:
            assert found[1] == plain[1]


@settings(SETTINGS, max_examples=60)
@given(cases())
def test_room_made_on_a_full_host_sends_each_vm_where_a_check_of_every_host_would(
    case: Case,
) -> None:
    """Each VM that leaves goes to the host a plain scan ranks first in the state as it is
    by then (the earlier ones moved); every VM is left where it was."""
    state, placed = _placed(case)
    limits = Limits(4)
    for v in placed:
        unit = unit_of(state, v)
        for t in candidate_hosts(state, v):
            may = {u for u in state.vms_on[t] if unit_of(state, u) == (u,)}
            hosts_of = {u: candidate_hosts(state, u) for u in may}
            before = list(state.host_of)
            found = room_for(state, unit, t, limits, may, hosts_of)
            assert state.host_of == before  # (totals back within rounding: moved back)
            if found is None:
                continue
            trial = state.copy()
            for u, h in found:
                others = [x for x in hosts_of[u] if x != t]
                ranked = sorted(
                    (unit_key(trial, (u,), x), x) for x in others if check_move(trial, u, x) is None
                )
                assert h == ranked[0][1]
                trial.move(u, h)


@SETTINGS
@given(cases())
def test_hosts_come_lowest_score_first_each_at_its_score_now(case: Case) -> None:
    state, _ = _placed(case)
    hosts = list(range(len(state.model.hosts)))
    seen = list(lowest_first(state, hosts))
    assert sorted(t for _, t in seen) == hosts
    assert [now for now, _ in seen] == sorted(now for now, _ in seen)
    assert all(now == state.score(t) for now, t in seen)


@settings(SETTINGS, max_examples=400)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 64), st.floats(0, 8), st.sampled_from([(8, 32), (16, 64), (64, 256)])
        ),
        min_size=3,
        max_size=12,
    ),
    st.floats(0, 8),
    st.integers(1, 16),
)
def test_among_many_hosts_of_close_scores_the_best_is_the_one_a_check_of_every_host_finds(
    loads: list[tuple[int, float, tuple[int, int]]], cpu: float, memory_gib: int
) -> None:
    """Hosts of several sizes whose scores lie closer together than one VM weighs on the
    smallest: the search must look past the first host that takes the VM, up to where no host
    left can rank better (a bigger host scoring more now may score less after)."""
    names = [f"h{i:02d}" for i in range(len(loads) + 1)]
    guests = [
        vm(f"g{i}", names[i], vcpus=8, memory_gib=gib / 8, cpu_used=used)
        for i, (gib, used, _) in enumerate(loads)
    ]
    sizes = [size for *_, size in loads] + [(16, 64)]
    mover = vm("mover", names[-1], vcpus=8, memory_gib=memory_gib, cpu_used=cpu)
    d = desired([host(n) for n in names], score={"cpu": 1.0, "memory": 1.0})
    seen = [host_state(n, cpus=c, memory_gib=m) for n, (c, m) in zip(names, sizes, strict=True)]
    _, state = build(d, snapshot(seen, [*guests, mover]))
    v = state.model.vm_index["mover"]
    hosts = candidate_hosts(state, v)
    assert best_target(state, v, hosts)[0] == _target_plainly(state, v, hosts, None)[0]
    limits = Limits(1)
    found = best_unit_target(state, (v,), hosts, limits)
    assert found[0] == _unit_target_plainly(state, (v,), hosts, limits)[0]


@SETTINGS
@given(cases(), st.data())
def test_a_ranking_kept_across_moves_orders_hosts_as_one_made_now(
    case: Case, data: st.DataObject
) -> None:
    """A ranking made before some moves (and taken back, as probes do) gives the order and
    scores of one made after them, and the searches using it choose what plain scans do."""
    state, placed = _placed(case)
    ranking = Ranking(state)
    hosts = list(range(len(state.model.hosts)))
    for _ in range(data.draw(st.integers(0, 4))):
        if not placed:
            break
        v = data.draw(st.sampled_from(placed))
        t = data.draw(st.sampled_from(hosts))
        back = data.draw(st.booleans())
        s = state.host_of[v]
        state.move(v, t)
        if back:
            state.move(v, s)
        assert list(ranking.lowest_first(hosts)) == list(lowest_first(state, hosts))
    for v in placed:
        candidates = candidate_hosts(state, v)
        found = best_target(state, v, candidates, ranking=ranking)
        assert found[0] == _target_plainly(state, v, candidates, None)[0]
        unit = unit_of(state, v)
        found = best_unit_target(state, unit, candidates, Limits(4), ranking)
        assert found[0] == _unit_target_plainly(state, unit, candidates, Limits(4))[0]


@SETTINGS
@given(st.data())
def test_with_hosts_alike_the_search_ends_past_the_ties_and_still_finds_the_plain_choice(
    data: st.DataObject,
) -> None:
    """Hosts of one size and VMs of a few loads: many hosts tie on their score, before and
    after taking a VM; the ranking's floor ends the search early and the name breaks ties."""
    n = data.draw(st.integers(2, 12))
    cpus, memory = data.draw(st.sampled_from([(8, 32), (32, 256)]))
    names = [f"h{k:02d}" for k in range(n)]
    loads = data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=1, max_size=30))
    vms = [
        vm(f"vm{i}", names[data.draw(st.integers(0, n - 1))], vcpus=2, memory_gib=2, cpu_used=x)
        for i, x in enumerate(loads)
    ]
    basis = data.draw(st.sampled_from(["used", "allocated"]))
    snap = snapshot([host_state(h, cpus=cpus, memory_gib=memory) for h in names], vms)
    _, state = build(desired([host(h) for h in names], basis=basis), snap)
    ranking = Ranking(state)
    assert ranking.floor is not None
    for v in range(len(loads)):
        candidates = candidate_hosts(state, v)
        found = best_target(state, v, candidates, ranking=ranking)
        assert found[0] == _target_plainly(state, v, candidates, None)[0]
