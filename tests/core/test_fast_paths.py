"""The planner's fast paths choose what their straightforward forms choose.

Each shortcut a large cluster needs (label sets built for the keys rules ask about, waves that
skip the full ones, VMs sorted by name alone, the model's VMs made under one policy, the greedy
search's source scores without each VM worked out inline with its VMs in any order, its
per-target figures, the VMs too small for any target and those that cannot rank before the
best move found, at cost 1 or at their own, and feasibility asked of the winner first) is
checked here against the plain form it replaced, on random inputs.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from operator import attrgetter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.core.balance import (
    GAIN_STEP,
    SLACK,
    Target,
    _Board,
    _rank_bounds,
    _Search,
    _too_small,
)
from reconciler.core.capacity import SATURATED, VmInfo, vm_loads
from reconciler.core.feasibility import EPSILON, check_move, preferred_delta
from reconciler.core.hugepages import need_of
from reconciler.core.movable import copy_bytes, why_fixed
from reconciler.core.selectors import Index, Item, matches
from reconciler.core.state import Model, State, _in_order, build, vm_info
from reconciler.core.steps import Step
from reconciler.core.units import fixed_reason, is_fixed
from reconciler.core.waves import assign_waves
from reconciler.model.plan import Reason
from reconciler.model.policy import BalancePolicySpec, Basis
from reconciler.model.rules import Rule, Selector
from reconciler.model.snapshot import MigrationClass, VmDisk, VmRunState, VmState
from tests.core.builders import desired, host, host_state, rule, snapshot, vm
from tests.core.strategies import Case, cases

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NAMES = ["a1", "a2", "ab", "b1", "b10", "c"]
KEYS = ["app", "tier", "zone"]
VALUES = ["x", "y"]

labels_st = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)
names_st = st.lists(
    st.sampled_from([*NAMES, "a*", "b?", "*1", "[ab]*", "zz"]), min_size=1, max_size=3
)
selectors_st = st.one_of(
    st.builds(Selector, names=names_st),
    st.builds(Selector, labels=labels_st.filter(bool)),
    st.builds(Selector, names=names_st, labels=labels_st.filter(bool)),
)


@SETTINGS
@given(
    st.lists(st.tuples(st.sampled_from(NAMES), labels_st), max_size=12),
    st.sets(st.sampled_from(KEYS)),
    st.lists(selectors_st, min_size=1, max_size=5),
)
def test_an_index_selects_what_filtering_every_item_selects(
    items: list[tuple[str, dict[str, str]]], keys: set[str], selectors: list[Selector]
) -> None:
    indexed = [Item(i, name, labels) for i, (name, labels) in enumerate(items)]
    index = Index(indexed, keys)
    for selector in selectors:  # in turn: keys not given up front are indexed when asked
        expected = {i for i, name, labels in indexed if matches(selector, name, labels)}
        assert index.select(selector) == expected


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(["h0", "h1", "h2"]))))
def test_sightings_in_name_then_host_order_as_a_sort_by_both(
    pairs: list[tuple[str, str]],
) -> None:
    seen = [vm(n, h) for n, h in pairs]
    twice: set[str] = set()
    assert _in_order(seen, twice) == sorted(seen, key=attrgetter("name", "host"))
    assert twice == {n for n, c in Counter(n for n, _ in pairs).items() if c > 1}


def _scanned_waves(steps: Sequence[Step], model: Model, parallel: int) -> list[int]:
    """Waves found by looking at every wave from the earliest one on."""
    rules = model.rules
    cluster: Counter[int] = Counter()
    outbound: Counter[tuple[int, int]] = Counter()
    inbound: Counter[tuple[int, int]] = Counter()
    budget: Counter[tuple[int, int]] = Counter()
    last_leaving: dict[int, int] = {}
    last_in_group: dict[int, int] = {}
    waves: list[int] = []
    i = 0
    while i < len(steps):
        j = i + 1
        if steps[i].unit is not None:
            while j < len(steps) and steps[j].unit == steps[i].unit:
                j += 1
        unit = steps[i:j]
        groups = {g for s in unit for g in rules.vm_groups[s.vm] if rules.groups[g].required}
        w = max(last_leaving.get(s.target, -1) + 1 for s in unit)
        for g in groups:
            w = max(w, last_in_group.get(g, -1) + 1)
        n_out = Counter(s.source for s in unit)
        n_in = Counter(s.target for s in unit)
        n_budget = Counter(b for s in unit for b in rules.vm_budgets[s.vm])

        while cluster[w] and not (
            cluster[w] + len(unit) <= parallel
            and all(outbound[w, h] + n <= model.hosts[h].max_outbound for h, n in n_out.items())
            and all(inbound[w, h] + n <= model.hosts[h].max_inbound for h, n in n_in.items())
            and all(
                budget[w, b] + n <= rules.budgets[b].max_concurrent for b, n in n_budget.items()
            )
        ):
            w += 1
        cluster[w] += len(unit)
        for h, n in n_out.items():
            outbound[w, h] += n
        for h, n in n_in.items():
            inbound[w, h] += n
        for b, n in n_budget.items():
            budget[w, b] += n
        for s in unit:
            last_leaving[s.source] = max(last_leaving.get(s.source, -1), w)
            waves.append(w)
        for g in groups:
            last_in_group[g] = max(last_in_group.get(g, -1), w)
        i = j
    return waves


@SETTINGS
@given(cases(), st.data(), st.integers(1, 4))
def test_waves_skipping_full_ones_are_the_waves_of_a_scan(
    case: Case, data: st.DataObject, parallel: int
) -> None:
    desired, snap, _ = case
    model, state = build(desired, snap)
    placed = [v for v in range(len(model.vms)) if state.host_of[v] >= 0]
    if not placed or len(model.hosts) < 2:
        return
    n = data.draw(st.integers(1, 30))
    steps = []
    for k in range(n):
        v = data.draw(st.sampled_from(placed))
        source = state.host_of[v]
        target = data.draw(st.sampled_from([h for h in range(len(model.hosts)) if h != source]))
        unit = data.draw(st.sampled_from([None, None, k // 3]))
        steps.append(Step(v, source, target, Reason.BALANCE, None, "", False, unit))
    assert assign_waves(steps, model, parallel) == _scanned_waves(steps, model, parallel)


@SETTINGS
@given(cases())
def test_is_fixed_says_what_fixed_reason_says(case: Case) -> None:
    desired, snap, _ = case
    model, state = build(desired, snap)
    for v in range(len(model.vms)):
        assert is_fixed(state, v) is (fixed_reason(state, v) is not None)


def _searched_plainly(
    search: _Search, n_src: int, n_tgt: int, first_source: bool
) -> tuple[int, int, float] | None:
    """The greedy search's best move, every figure worked out where it is used."""
    state, order = search.state, search.order
    model = state.model
    w = model.weights
    sources = order[::-1][:n_src]
    targets = order[:n_tgt]
    top = [e[2] for e in order[::-1][:3]]
    bottom = [e[2] for e in order[:3]]
    mean, scores = search.mean, search.scores
    best_key = None
    best: tuple[int, int, float] | None = None
    for s_score, _, s in sources:
        if first_source and best is not None:
            break
        hi_rest = [x for x in top if x != s]
        lo_rest = [x for x in bottom if x != s]
        for v in sorted(state.vms_on[s]):
            if v in search.moved or not search.eligible(v):
                continue
            vm = model.vms[v]
            s_after = state.score_with(s, v, -1)
            for t_score, t_name, t in targets:
                if t_score >= s_score - search.need:
                    break
                host = model.hosts[t]
                if host.cpu_den > 0 and host.usable_memory > 0:
                    t_after = (
                        w.cpu * 100.0 * (state.cpu_load[t] + vm.cpu_load) / host.cpu_den
                        + w.memory * 100.0 * (state.mem_load[t] + vm.mem_load) / host.usable_memory
                    )
                else:
                    t_after = SATURATED
                if (s_score - t_score) - abs(s_after - t_after) < search.need - EPSILON:
                    continue
                hi, lo = max(s_after, t_after), min(s_after, t_after)
                for x in hi_rest:
                    if x != t:
                        hi = max(hi, scores[x])
                        break
                for x in lo_rest:
                    if x != t:
                        lo = min(lo, scores[x])
                        break
                new_spread = hi - lo
                gain = search.spread - new_spread
                dev = (
                    (s_score - mean) ** 2
                    + (t_score - mean) ** 2
                    - (s_after - mean) ** 2
                    - (t_after - mean) ** 2
                )
                if gain < -EPSILON or dev <= EPSILON or new_spread > search.ceiling + EPSILON:
                    continue
                if check_move(state, v, t) is not None:
                    continue
                breaks, repairs = preferred_delta(state, v, t)
                cost = max(0.25, 1.0 + breaks - 0.5 * repairs) if breaks or repairs else 1.0
                reaches = new_spread <= search.threshold + EPSILON
                key = search._key(reaches, gain, dev, cost, vm.copy_bytes, vm.name, t_name)
                if best_key is None or key < best_key:
                    best_key, best = key, (v, t, new_spread)
    return best


@SETTINGS
@given(cases(), st.data())
def test_the_greedy_search_finds_the_move_a_plain_search_finds(
    case: Case, data: st.DataObject
) -> None:
    desired, snap, _ = case
    model, state = build(desired, snap)
    for hosts in model.arches.values():
        if len(hosts) < 2:
            continue
        board = _Board(state, hosts)
        eligible: Callable[[int], bool] = lambda v: not is_fixed(state, v)  # noqa: E731
        moved: set[int] = set()
        for _ in range(data.draw(st.integers(1, 4))):
            spread = board.spread()
            need = data.draw(st.sampled_from([EPSILON, 2.0, 10.0]))
            threshold = data.draw(st.sampled_from([0.0, 5.0, 20.0]))
            search = board.search(spread, need, eligible, moved, threshold)
            for n_src, n_tgt, first in [(1, 4, False), (16, 16, True), (2, 3, False)]:
                found = search.run(n_src, n_tgt, first)
                assert found == _searched_plainly(search, n_src, n_tgt, first)
            if found is None:
                break
            v, t, _ = found
            board.move(v, t)  # both hosts' figures change
            moved.add(v)


@SETTINGS
@given(st.lists(st.integers(1, 24), min_size=2, max_size=6), st.integers(1, 4))
def test_a_search_whose_best_move_is_refused_finds_the_best_feasible_one(
    sizes: list[int], cool: int
) -> None:
    """The search asks feasibility of its winner alone first; when a required rule refuses
    that move, it finds what the plain search finds, checking every move as it goes."""
    names = ["h1", *(f"c{i}" for i in range(cool))]
    vms = [vm(f"v{i}", "h1", memory_gib=g, cpu_used=0.1) for i, g in enumerate(sizes)]
    states = [host_state(h) for h in names]

    def search_of(rules: list[Rule]) -> tuple[State, _Search]:
        model, state = build(
            desired([host(h) for h in names], rules=rules, threshold=1), snapshot(states, vms)
        )
        board = _Board(state, model.arches["x86_64"])
        return state, board.search(board.spread(), EPSILON, lambda v: True, set(), 1.0)

    state, search = search_of([])
    winner = search._ranked(16, 16, False, checked=False)
    assert winner is not None
    assert check_move(state, winner[0], winner[1]) is None
    keep = rule(
        name="keep",
        type="hostAntiAffinity",
        vms={"names": [state.model.vms[winner[0]].name]},
        hosts={"names": [state.model.hosts[winner[1]].name]},
    )
    state, search = search_of([keep])
    # the rule changes no score: the same winner ranks first, and it is refused now
    assert search._ranked(16, 16, False, checked=False) == winner
    assert check_move(state, winner[0], winner[1]) is not None
    for n_src, n_tgt, first in [(1, 4, False), (16, 16, True), (1, 1, False)]:
        found = search.run(n_src, n_tgt, first)
        assert found == _searched_plainly(search, n_src, n_tgt, first)
        assert found != winner


@SETTINGS
@given(
    st.lists(st.tuples(st.integers(1, 24), st.booleans()), min_size=2, max_size=6),
    st.lists(st.tuples(st.integers(1, 12), st.booleans()), max_size=2),
    st.sampled_from(["preferred", "required"]),
    st.sampled_from([0.5, 2.0]),
)
def test_moves_that_break_or_repair_preferred_rules_rank_at_their_own_cost(
    hot: list[tuple[int, bool]], cool: list[tuple[int, bool]], enforcement: str, need: float
) -> None:
    """A move that repairs a preferred rule costs less than 1 and one that breaks it more:
    the greedy search ranks both as the plain search does, at their own cost (VMs of one hot
    host, some of them in a rule that wants them apart)."""
    x = {"app": "x"}
    vms = [
        vm(f"v{i}", "h1", memory_gib=g, cpu_used=0.1, labels=x if on else None)
        for i, (g, on) in enumerate(hot)
    ]
    vms += [
        vm(f"w{i}", f"h{i + 2}", memory_gib=g, cpu_used=0.1, labels=x if on else None)
        for i, (g, on) in enumerate(cool)
    ]
    apart = rule(name="apart", type="antiAffinity", vms={"labels": x}, enforcement=enforcement)
    d = desired([host("h1"), host("h2"), host("h3")], rules=[apart], threshold=1)
    model, state = build(d, snapshot([host_state(h) for h in ("h1", "h2", "h3")], vms))
    board = _Board(state, model.arches["x86_64"])
    eligible: Callable[[int], bool] = lambda v: True  # noqa: E731
    moved: set[int] = set()
    for _ in range(3):
        search = board.search(board.spread(), need, eligible, moved, 1.0)
        found = search.run(1, 4)
        assert found == _searched_plainly(search, 1, 4, False)
        assert search.run(16, 16, True) == _searched_plainly(search, 16, 16, True)
        if found is None:
            break
        board.move(found[0], found[1])
        moved.add(found[0])


def _vm_info_plainly(
    vm: VmState, spec: BalancePolicySpec, index: int, in_flight: bool, shadow: bool
) -> VmInfo:
    """One VM's view made field by field from ``capacity``, ``movable`` and ``hugepages``."""
    vcpus, memory, cpu, mem = vm_loads(vm, spec)
    fixed = why_fixed(vm, spec)
    page_kib, pages = need_of(vm) or (0, 0)
    return VmInfo(
        index=index,
        name=vm.name,
        labels=vm.labels,
        vcpus=vcpus,
        memory=memory,
        cpu_load=cpu,
        mem_load=mem,
        in_flight=in_flight,
        migratable=fixed is None,
        shadow=shadow,
        fixed=fixed or "",
        copy_bytes=copy_bytes(vm, memory),
        migration_class=vm.migration_class,
        disks=tuple(d.target for d in vm.disks if not d.shared),
        disk_bytes=vm.disk_bytes,
        refused_by=tuple(sorted(vm.refused_by.items())),
        page_kib=page_kib,
        pages=pages,
        dirty_rate=vm.dirty_rate if memory else None,
    )


sightings_changes = st.fixed_dictionaries(
    {
        "state": st.sampled_from(list(VmRunState)),
        "cpu_used": st.one_of(st.none(), st.floats(0, 8)),
        "memory_used": st.one_of(st.none(), st.integers(0, 2**34)),
        "migration_class": st.sampled_from(list(MigrationClass)),
        "migratable": st.booleans(),
        "disks": st.lists(
            st.builds(
                VmDisk,
                target=st.sampled_from(["vda", "vdb"]),
                source=st.just("/d"),
                shared=st.booleans(),
            ),
            max_size=2,
        ),
        "disk_bytes": st.integers(0, 2**36),
        "refused_by": st.dictionaries(st.sampled_from(["h0", "h1"]), st.just("cpu"), max_size=2),
        "dirty_rate": st.one_of(st.none(), st.integers(0, 2**30)),
        "hugepage_kib": st.sampled_from([None, 2048]),
        "hugepages": st.integers(0, 4),
    }
)


@SETTINGS
@given(cases(), st.data(), st.sampled_from(list(Basis)), st.booleans(), st.booleans())
def test_a_vm_made_under_one_policy_is_the_vm_made_field_by_field(
    case: Case, data: st.DataObject, basis: Basis, in_flight: bool, shadow: bool
) -> None:
    spec = case[0].policy.spec.model_copy(update={"basis": basis})
    for i, observed in enumerate(case[1].vms):
        seen = observed.model_copy(update=data.draw(sightings_changes))
        made = vm_info(seen, spec, i, in_flight=in_flight, shadow=shadow)
        assert made == _vm_info_plainly(seen, spec, i, in_flight, shadow)


@SETTINGS
@given(cases(), st.sampled_from([EPSILON, 0.5, 2.0, 10.0, 25.0]), st.integers(1, 4))
def test_a_vm_too_small_for_every_target_narrows_no_gap_by_the_margin(
    case: Case, need: float, n_tgt: int
) -> None:
    desired, snap, _ = case
    model, state = build(desired, snap)
    w_cpu, w_mem = model.weights.cpu * 100.0, model.weights.memory * 100.0
    for hosts in model.arches.values():
        board = _Board(state, hosts)
        for s_score, _, s in board.order[::-1][:3]:
            rest: list[Target] = []
            for t_score, t_name, t in board.order[:n_tgt]:
                if t == s or t_score >= s_score - need:
                    continue
                h = model.hosts[t]
                loaded = h.cpu_den > 0 and h.usable_memory > 0
                cpu, mem, gap = state.cpu_load[t], state.mem_load[t], s_score - t_score
                rest.append((t_name, t, loaded, cpu, h.cpu_den, mem, h.usable_memory, gap, 0, 0, 0))
            if not rest:
                continue
            k_cpu, k_mem, small = _too_small(rest, w_cpu, w_mem, s_score, need - EPSILON)
            for v in sorted(state.vms_on[s]):
                vm = model.vms[v]
                s_after = state.score_with(s, v, -1)
                if s_score - s_after + vm.cpu_load * k_cpu + vm.mem_load * k_mem >= small:
                    continue
                for _, _, _, cpu, den, mem, usable, gap, *_ in rest:  # as the search works out
                    t_after = (
                        w_cpu * (cpu + vm.cpu_load) / den + w_mem * (mem + vm.mem_load) / usable
                    )
                    assert gap - abs(s_after - t_after) < need - EPSILON


@SETTINGS
@given(cases(), st.sampled_from([EPSILON, 2.0, 10.0]), st.sampled_from([0.0, 5.0, 20.0]))
def test_no_move_ranks_better_than_its_sources_bounds_say(
    case: Case, need: float, threshold: float
) -> None:
    desired, snap, _ = case
    model, state = build(desired, snap)
    w_cpu, w_mem = model.weights.cpu * 100.0, model.weights.memory * 100.0
    within = threshold + EPSILON
    for hosts in model.arches.values():
        board = _Board(state, hosts)
        spread, mean = board.spread(), board.total / len(board.order)
        top = [e[2] for e in board.order[::-1][:3]]
        bottom = [e[2] for e in board.order[:3]]
        for s_score, _, s in board.order[::-1][:3]:
            rest: list[Target] = []
            t_scores: list[float] = []
            for t_score, t_name, t in board.order[:4]:
                if t == s or t_score >= s_score - need:
                    continue
                h = model.hosts[t]
                loaded = h.cpu_den > 0 and h.usable_memory > 0
                hi_x = next((board.scores[x] for x in top if x not in (s, t)), -math.inf)
                lo_x = next((board.scores[x] for x in bottom if x not in (s, t)), math.inf)
                cpu, mem = state.cpu_load[t], state.mem_load[t]
                rest.append(
                    (t_name, t, loaded, cpu, h.cpu_den, mem, h.usable_memory, 0, 0, hi_x, lo_x)
                )
                t_scores.append(t_score)
            bounds = _rank_bounds(rest, t_scores, w_cpu, w_mem, spread, mean, within)
            if bounds is None:
                continue
            least, reach, a, b, slack = bounds
            for v in sorted(state.vms_on[s]):
                vm = model.vms[v]
                if vm.cpu_load < 0 or vm.mem_load < 0:
                    continue
                s_after = state.score_with(s, v, -1)
                most = (s_score - mean) ** 2 - (s_after - mean) ** 2
                most += vm.cpu_load * a + vm.mem_load * b
                for (_, _, _, cpu, den, mem, usable, *_, hi_x, lo_x), t_score in zip(
                    rest, t_scores, strict=True
                ):  # every figure as the plain search works it out
                    t_after = (
                        w_cpu * (cpu + vm.cpu_load) / den + w_mem * (mem + vm.mem_load) / usable
                    )
                    new_spread = max(s_after, t_after, hi_x) - min(s_after, t_after, lo_x)
                    assert reach or new_spread > within
                    assert -round((spread - new_spread) / GAIN_STEP) >= least
                    dev = (
                        (s_score - mean) ** 2
                        + (t_score - mean) ** 2
                        - (s_after - mean) ** 2
                        - (t_after - mean) ** 2
                    )
                    assert dev <= most + slack + SLACK * abs(most)
