"""Units: VMs that must move together, and making room on a full host.

A *unit* is a VM plus the members of its required affinity groups that share its host (the
closure over those groups). Moving one member alone would break the affinity, so the unit
moves as a whole, in one wave; its required rules are checked before and after the unit, not
between its members. A unit must fit the limits of one wave (``parallel.cluster``, the batch,
``maxInbound`` of its target, ``maxOutbound`` of its sources and every disruptionBudget).

*Making room*: when a pin, a drift revert or a drain needs a host that is full now, another
VM may leave that host first (up to ``MAX_EVICTIONS`` of them, each a feasible move of its
own to another host), when that is the only way.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import ne

from reconciler.core.capacity import pct
from reconciler.core.feasibility import EPSILON, Refusal, check_move, preferred_delta
from reconciler.core.hugepages import refusal_text, used_after
from reconciler.core.rules import describe_kind
from reconciler.core.state import Model, State
from reconciler.model.plan import UnsatisfiableCode

MAX_EVICTIONS = 3
"""VMs that may leave a host to make room for one unit."""
ROOM_HOSTS = 8
"""Hosts tried for making room when a unit fits on none (most free memory first)."""
CAPACITY = frozenset({"memory", "hugepages", "vcpus", "hostLimit"})


@dataclass(frozen=True, slots=True)
class Limits:
    """What one wave allows: a unit bigger than this can never move at once."""

    max_unit: int


Code = UnsatisfiableCode


def fixed_reason(state: State, v: int) -> tuple[Code, str] | None:
    """Why the planner may not move VM ``v`` at all, or None when it may."""
    model = state.model
    vm = model.vms[v]
    if vm.in_flight:
        return Code.UNMIGRATABLE, f"{vm.name} is being migrated right now (seen on two hosts)"
    rule = model.rules.excluded.get(v)
    if rule is not None:
        return Code.EXCLUDED, f"{vm.name} is excluded by rule {rule}"
    if not vm.migratable:
        return Code.UNMIGRATABLE, vm.fixed or f"{vm.name} cannot be live-migrated"
    return None


def is_fixed(state: State, v: int) -> bool:
    """``fixed_reason(state, v) is not None``, without making its message."""
    model = state.model
    vm = model.vms[v]
    return vm.in_flight or v in model.rules.excluded or not vm.migratable


def candidate_hosts(state: State, v: int) -> list[int]:
    """Hosts that may take ``v`` by architecture, state and required allow-rules."""
    model = state.model
    s = state.host_of[v]
    hosts = model.arches.get(model.arch_of(s), ()) if s >= 0 else tuple(range(len(model.hosts)))
    allow = [r.hosts for r in model.rules.host_rules[v] if r.required and r.allow]
    if allow:
        smallest = min(allow, key=len)
        return [h for h in hosts if h in smallest]
    return list(hosts)


def bounded(state: State, unit: Sequence[int]) -> bool:
    """True when no preferred rule selects a VM of ``unit`` and none has a negative load: then
    every host ranks for it by its score after taking it, never below its score now."""
    model = state.model
    preferred = model.rules.preferred
    return all(
        m not in preferred and model.vms[m].cpu_load >= 0.0 and model.vms[m].mem_load >= 0.0
        for m in unit
    )


def lowest_first(state: State, hosts: Iterable[int]) -> Iterator[tuple[float, int]]:
    """(score now, host) of ``hosts``, lowest score first, as far as the caller reads.

    A host's score after taking VMs of loads not negative is never below its score now (the
    same operations on larger or equal loads: rounding keeps the order). So a search for the
    host that scores lowest after a move stops at the first host that scores more now than
    the best found scores after, instead of checking every host of a large cluster for
    every VM to place (a drain of 100 hosts of 5,000 places 2,500 VMs)."""
    names = state.model.hosts
    heap = [(state.score(t), names[t].name, t) for t in hosts]
    heapq.heapify(heap)
    while heap:
        now, _, t = heapq.heappop(heap)
        yield now, t


class Ranking:
    """Every host of ``state`` in order of its score now, kept as moves change the state.

    Each look compares every host's loads with those it last scored (two C-level passes over
    the lists, no Python frame per host) and scores again only the hosts whose loads differ:
    a drain of hundreds of hosts places thousands of VMs, each of which would otherwise score
    all hosts again. The order is exact, never stale: scores come from the loads as they are.
    """

    __slots__ = ("_cpu", "_mem", "_now", "_order", "floor", "state")

    def __init__(self, state: State) -> None:
        self.state = state
        n = len(state.model.hosts)
        self.floor = _score_floor(state.model)
        """(per CPU, per byte): the least a VM's load raises any host's score, or None."""
        self._cpu = list(state.cpu_load)
        self._mem = list(state.mem_load)
        self._now = [state.score(t) for t in range(n)]
        names = state.model.hosts
        self._order = sorted((self._now[t], names[t].name, t) for t in range(n))

    def lowest_first(self, hosts: Iterable[int]) -> Iterator[tuple[float, int]]:
        """(score now, host) of ``hosts``, lowest score first; a few of many hosts (a
        required allow-rule's) are ordered on their own."""
        wanted = set(hosts)
        if len(wanted) * 8 < len(self._order):
            yield from lowest_first(self.state, sorted(wanted))
            return
        self._refresh()
        for now, _, t in list(self._order):  # a copy: the caller may look again meanwhile
            if t in wanted:
                yield now, t

    def _refresh(self) -> None:
        state, cpu, mem = self.state, self._cpu, self._mem
        every = range(len(cpu))
        changed = set(compress(every, map(ne, state.cpu_load, cpu)))
        changed.update(compress(every, map(ne, state.mem_load, mem)))
        names, order, now = state.model.hosts, self._order, self._now
        for t in changed:
            del order[bisect_left(order, (now[t], names[t].name, t))]
            now[t] = state.score(t)
            insort(order, (now[t], names[t].name, t))
            cpu[t], mem[t] = state.cpu_load[t], state.mem_load[t]


def _score_floor(model: Model) -> tuple[float, float] | None:
    """Factors ``(a, b)`` such that taking a VM of loads ``(x, y)`` raises the score of every
    host of ``model`` that accepts VMs by at least ``a * x + b * y`` (the host of most
    capacity gains least; the others are refused whatever they score); None when a host
    without capacity or a negative weight makes no such bound."""
    hosts = [h for h in model.hosts if h.accepts]
    if not hosts:
        return None
    w = model.weights
    least_cpu = min(h.cpu_den for h in hosts)
    least_mem = min(h.usable_memory for h in hosts)
    if least_cpu <= 0 or least_mem <= 0 or w.cpu < 0 or w.memory < 0:
        return None
    most_cpu = max(h.cpu_den for h in hosts)
    most_mem = max(h.usable_memory for h in hosts)
    return w.cpu * 100.0 / most_cpu, w.memory * 100.0 / most_mem


FLOOR_SLACK = 1e-9
"""Relative room left for rounding when the floor ends a search: the score after taking a VM
is summed in floating point, so the bound is kept a little below its exact value."""


def _ranked(
    state: State, hosts: Iterable[int], ranking: Ranking | None
) -> Iterator[tuple[float, int]]:
    if ranking is not None and ranking.state is state:
        return ranking.lowest_first(hosts)
    return lowest_first(state, hosts)


def _lowest_feasible(
    state: State,
    unit: Sequence[int],
    hosts: Sequence[int],
    ranking: Ranking | None,
    refusal_of: Callable[[int], Refusal | None],
    key_of: Callable[[int], tuple[int, int, float, str]],
) -> int | None:
    """The host of ``hosts`` that ``refusal_of`` lets take ``unit`` (which :func:`bounded`
    holds for) with the least ``key_of``, or None when none does.

    Hosts come lowest score now first, and the search ends at the first that scores more
    now than the best found scores after (no host left can rank better). A host is checked
    only when it would rank better than the best so far, and one that cannot hold the
    memory of a single VM is passed over unchecked (``check_move`` refuses it).
    """
    if len(unit) == 1:
        return _lowest_feasible_vm(state, unit[0], hosts, ranking, refusal_of)
    best: tuple[int, int, float, str] | None = None
    best_host: int | None = None
    for now, t in _ranked(state, hosts, ranking):
        if best is not None and now > best[2]:
            break  # every host left scores more after taking ``unit`` than ``best`` does
        key = key_of(t)
        if best is not None and key >= best:
            continue
        if refusal_of(t) is None:
            best, best_host = key, t
    return best_host


def _lowest_feasible_vm(
    state: State,
    v: int,
    hosts: Sequence[int],
    ranking: Ranking | None,
    refusal_of: Callable[[int], Refusal | None],
) -> int | None:
    """:func:`_lowest_feasible` of one VM, its key's steps inline: the score after taking
    ``v`` as ``unit_key`` and ``State.score_with`` reckon it (the same operations), then the
    host's name. Hundreds of hosts of close scores are looked at for each VM of a drain."""
    model = state.model
    vm = model.vms[v]
    need, x, y = vm.memory, vm.cpu_load, vm.mem_load
    infos, memory, cpu_load, mem_load = model.hosts, state.memory, state.cpu_load, state.mem_load
    w_cpu, w_mem = model.weights.cpu, model.weights.memory
    # a host scoring ``now`` scores at least ``now + rise`` after taking ``v``: once that
    # passes the best found, no host left can rank better (with every host alike, the
    # search ends past the hosts tied with the first that takes ``v``)
    floor = ranking.floor if ranking is not None and ranking.state is state else None
    rise = floor[0] * x + floor[1] * y if floor is not None and x >= 0 and y >= 0 else 0.0
    best, best_name, best_host = 0.0, "", None
    for now, t in _ranked(state, hosts, ranking):
        if best_host is not None and now + rise - FLOOR_SLACK * (abs(now) + rise + 1) > best:
            break  # every host left scores more after taking ``v`` than ``best`` does
        info = infos[t]
        if need > info.usable_memory - memory[t]:
            continue  # ``check_move`` refuses it: no room for its memory
        after = w_cpu * pct(cpu_load[t] + x, info.cpu_den) + w_mem * pct(
            mem_load[t] + y, info.usable_memory
        )
        if best_host is not None and (after, info.name) >= (best, best_name):
            continue
        if refusal_of(t) is None:
            best, best_name, best_host = after, info.name, t
    return best_host


def best_target(
    state: State,
    v: int,
    hosts: Iterable[int],
    accept: Callable[[int], Refusal | None] | None = None,
    ranking: Ranking | None = None,
) -> tuple[int | None, list[Refusal]]:
    """The host that takes ``v`` with fewest preferred rules broken, then lowest score after.

    ``accept`` adds a test (e.g. "repairs this rule") after the feasibility checks. The
    refusals are those of every host when none takes ``v`` (none are gathered when one does).
    """
    best: tuple[int, int, float, str] | None = None
    best_host: int | None = None
    names = state.model.hosts
    if bounded(state, (v,)):
        hosts = list(hosts)

        def feasible(t: int) -> Refusal | None:
            refusal = check_move(state, v, t)
            return refusal if refusal is not None or accept is None else accept(t)

        found = _lowest_feasible_vm(state, v, hosts, ranking, feasible)
        if found is not None:
            return found, []
        # no host takes it: every host's reason, from the scan below
    refusals: list[Refusal] = []
    for t in hosts:
        refusal = check_move(state, v, t)
        if refusal is None and accept is not None:
            refusal = accept(t)
        if refusal is not None:
            refusals.append(refusal)
            continue
        breaks, repairs = preferred_delta(state, v, t)
        key = (breaks, -repairs, state.score_with(t, v, 1), names[t].name)
        if best is None or key < best:
            best, best_host = key, t
    return best_host, refusals


def unit_of(state: State, v: int) -> tuple[int, ...]:
    """``v`` and the members of its required affinity groups on its host, transitively."""
    model = state.model
    rules = model.rules
    if not rules.vm_groups[v]:
        return (v,)
    h = state.host_of[v]
    out = {v}
    todo = [v]
    while todo:
        x = todo.pop()
        for gi in rules.vm_groups[x]:
            g = rules.groups[gi]
            if g.kind != "affinity" or not g.required:
                continue
            for m in g.members:
                if m not in out and state.host_of[m] == h:
                    out.add(m)
                    todo.append(m)
    return tuple(sorted(out))


def check_unit(state: State, unit: Sequence[int], t: int, limits: Limits) -> Refusal | None:
    """None when every VM of ``unit`` may move to ``t`` at once, else why not."""
    if len(unit) == 1:
        return check_move(state, unit[0], t)
    model = state.model
    host = model.hosts[t]
    names = ", ".join(model.vms[m].name for m in unit)
    if len(unit) > limits.max_unit:
        return Refusal(
            "parallel",
            f"{names} must move together, {len(unit)} at once, and one wave allows "
            f"{limits.max_unit} (parallel.cluster and batch)",
        )
    if len(unit) > host.max_inbound:
        return Refusal("inbound", f"{host.name} takes {host.max_inbound} migrations at once")
    sources = Counter(state.host_of[m] for m in unit)
    for s, n in sources.items():
        if n > model.hosts[s].max_outbound:
            return Refusal(
                "outbound", f"{model.hosts[s].name} sends {model.hosts[s].max_outbound} at once"
            )
    budgets = Counter(b for m in unit for b in model.rules.vm_budgets[m])
    for b, n in budgets.items():
        if n > model.rules.budgets[b].max_concurrent:
            return Refusal("budget", f"disruptionBudget {model.rules.budgets[b].name} allows fewer")
    moving = [m for m in unit if state.host_of[m] != t]
    if not moving:
        return Refusal("current", f"they already run on {host.name}")
    inside = set(unit)
    for m in moving:  # a unit that leaves a partner behind would split it
        left = [x for x in unit_of(state, m) if x not in inside]
        if left:
            return Refusal(
                "unit",
                f"{model.vms[m].name} must move with {model.vms[left[0]].name}: a required "
                "affinity holds them together",
            )
    # Host checks of each member alone (state, architecture, host rules) ...
    for m in moving:
        refusal = check_move(state, m, t, alone=False)
        if refusal is not None and refusal.category not in CAPACITY and not _group(refusal):
            return refusal
    # ... then capacity and group rules for the whole unit.
    mem = sum(model.vms[m].memory for m in moving)
    vcpus = sum(model.vms[m].vcpus for m in moving)
    cpu = sum(model.vms[m].cpu_load for m in moving)
    mload = sum(model.vms[m].mem_load for m in moving)
    free = host.usable_memory - state.memory[t]
    if mem > free:
        return Refusal("memory", f"{host.name} has too little free memory for {names}")
    pages = unit_pages(state, moving, t)
    if pages is not None:
        return pages
    if state.vcpus[t] + vcpus > host.vcpu_capacity + EPSILON:
        return Refusal("vcpus", f"{host.name} has too few vCPUs for {names}")
    limit = model.weights.host_limit
    if (
        pct(state.cpu_load[t] + cpu, host.cpu_den) > limit + EPSILON
        or pct(state.mem_load[t] + mload, host.usable_memory) > limit + EPSILON
    ):
        return Refusal("hostLimit", f"{host.name} would go over hostLimit {limit:g}% with {names}")
    return _groups_after(state, moving, t)


def unit_pages(state: State, moving: Sequence[int], t: int) -> Refusal | None:
    """Why host ``t`` has too few huge pages for ``moving`` all at once, if it has."""
    room = state.model.hosts[t].page_room
    if room is None or state.pages is None:
        return None
    vms = state.model.vms
    adds = [(vms[m].page_kib, vms[m].pages) for m in moving if vms[m].pages]
    for kib, need in sorted(used_after({}, adds).items()):
        planned = state.pages[t].get(kib, 0) + need
        if planned > room.get(kib, 0):
            name = state.model.hosts[t].name
            return Refusal("hugepages", refusal_text(name, kib, room.get(kib, 0), planned))
    return None


def _group(refusal: Refusal) -> bool:
    return refusal.category.startswith("rule ") and "would be broken" in refusal.text


def _groups_after(state: State, moving: Sequence[int], t: int) -> Refusal | None:
    """The required group rule the whole move makes worse, if any (state left unchanged)."""
    model = state.model
    touched = sorted({gi for m in moving for gi in model.rules.vm_groups[m]})
    touched = [gi for gi in touched if model.rules.groups[gi].required]
    before = [state.counts[gi].measure() for gi in touched]
    back = [(m, state.host_of[m]) for m in moving]
    for m in moving:
        state.move(m, t)
    after = [state.counts[gi].measure() for gi in touched]
    for m, s in reversed(back):
        state.move(m, s)
    for gi, b, a in zip(touched, before, after, strict=True):
        if a > b:
            g = model.rules.groups[gi]
            return Refusal(
                f"rule {g.name}",
                f"{describe_kind(g.kind)} {g.name} would be broken on {model.hosts[t].name}",
            )
    return None


def unit_key(state: State, unit: Sequence[int], t: int) -> tuple[int, int, float, str]:
    """Rank of target ``t`` for ``unit``: preferred rules broken, repaired, score after."""
    model = state.model
    breaks = repairs = 0
    for m in unit:
        b, r = preferred_delta(state, m, t)
        breaks += b
        repairs += r
    host = model.hosts[t]
    cpu = state.cpu_load[t] + sum(model.vms[m].cpu_load for m in unit)
    mem = state.mem_load[t] + sum(model.vms[m].mem_load for m in unit)
    w = model.weights
    after = w.cpu * pct(cpu, host.cpu_den) + w.memory * pct(mem, host.usable_memory)
    return breaks, -repairs, after, host.name


def best_unit_target(
    state: State,
    unit: Sequence[int],
    hosts: Iterable[int],
    limits: Limits,
    ranking: Ranking | None = None,
) -> tuple[int | None, list[Refusal]]:
    """The host that takes ``unit`` first by :func:`unit_key`, and the refusals of every host
    when none does (none are gathered when one does)."""
    best: tuple[int, int, float, str] | None = None
    best_host: int | None = None
    if bounded(state, unit):
        hosts = list(hosts)
        found = _lowest_feasible(
            state,
            unit,
            hosts,
            ranking,
            lambda t: check_unit(state, unit, t, limits),
            lambda t: unit_key(state, unit, t),
        )
        if found is not None:
            return found, []
        # no host takes it: every host's reason, from the scan below
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


def room_for(
    state: State,
    unit: Sequence[int],
    t: int,
    limits: Limits,
    may_move: set[int],
    hosts_of: dict[int, list[int]],
    ranking: Ranking | None = None,
) -> list[tuple[int, int]] | None:
    """Moves of other VMs off ``t`` after which ``unit`` fits there, or None.

    ``may_move`` are the VMs on ``t`` that may leave it; ``hosts_of`` gives each one's candidate
    hosts. Fewest evictions first: one VM whose departure suffices (the smallest), else the
    biggest first, up to ``MAX_EVICTIONS``. ``state`` is left unchanged.
    """
    refusal = check_unit(state, unit, t, limits)
    if refusal is None or refusal.category not in CAPACITY:
        return None
    model = state.model
    others = sorted(
        (u for u in state.vms_on[t] if u in may_move and u not in unit),
        key=lambda u: (model.vms[u].memory, model.vms[u].name),
    )
    for u in others:  # one eviction, the smallest that makes room
        found = _try(state, unit, t, limits, [u], hosts_of, ranking)
        if found is not None:
            return found
    chosen: list[int] = []
    for u in reversed(others):  # then the biggest first
        if len(chosen) >= MAX_EVICTIONS:
            break
        chosen.append(u)
        found = _try(state, unit, t, limits, chosen, hosts_of, ranking)
        if found is not None:
            return found
    return None


def _try(
    state: State,
    unit: Sequence[int],
    t: int,
    limits: Limits,
    evict: list[int],
    hosts_of: dict[int, list[int]],
    ranking: Ranking | None,
) -> list[tuple[int, int]] | None:
    done: list[tuple[int, int, int]] = []
    ok = True
    for u in evict:
        best: tuple[int, int, float, str] | None = None
        target: int | None = None
        low = bounded(state, (u,))
        ranked = _ranked(state, hosts_of.get(u, ()), ranking) if low else _any_order(hosts_of, u)
        for now, h in ranked:
            if low and best is not None and now > best[2]:
                break  # every host left scores more after taking ``u`` than ``best`` does
            if h == t or check_move(state, u, h) is not None:
                continue
            key = unit_key(state, (u,), h)
            if best is None or key < best:
                best, target = key, h
        if target is None:
            ok = False
            break
        done.append((u, state.host_of[u], target))
        state.move(u, target)
    if ok:
        ok = check_unit(state, unit, t, limits) is None
    for u, s, _ in reversed(done):
        state.move(u, s)
    return [(u, h) for u, _, h in done] if ok else None


def _any_order(hosts_of: dict[int, list[int]], u: int) -> Iterator[tuple[float, int]]:
    """The candidate hosts of ``u`` as given, for a search that checks every one."""
    for h in hosts_of.get(u, ()):
        yield 0.0, h
