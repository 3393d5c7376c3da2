"""Keep the better of the heuristic plan and the exact joint plan, per small scope.

A scope is one architecture or several coupled by required anti-affinity over a topology key
(:func:`reconciler.core.exact.scopes`). For each scope :func:`reconciler.core.exact.applicable`
accepts, the exact plan of repair and balance together replaces the heuristic's moves of that
scope when it brings more of its architectures within the threshold, or as many at a lower
cost (moves plus preferred host rules left broken), or as many at the same cost moving less
memory, and when its moves can be ordered so every step is feasible; otherwise the heuristic
plan stays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from reconciler.core import exact, exact_near
from reconciler.core.balance import spread_of
from reconciler.core.feasibility import EPSILON
from reconciler.core.rules import REASONS, describe_kind, domain_of
from reconciler.core.state import State
from reconciler.core.steps import Step
from reconciler.core.units import fixed_reason
from reconciler.model.plan import Reason


@dataclass(frozen=True, slots=True)
class ArchGoal:
    arch: str
    hosts: tuple[int, ...]
    balancing: bool
    threshold: float


def improve(
    before: State,
    after: State,
    steps: list[Step],
    goals: Sequence[ArchGoal],
    balance_movable: Callable[[int], bool],
    drift_targets: Mapping[int, int],
) -> tuple[list[Step], bool | None]:
    """The steps with exact plans swapped in where better, and whether the plan is proven
    optimal (None: no scope was solved exactly). Nothing swapped in: the very list
    ``steps``, so the caller keeps the state those steps left (``after``)."""
    model = before.model
    largest = max(exact.EXACT_HOSTS, exact_near.NEAR_HOSTS)
    if all(len(g.hosts) > largest for g in goals):  # skip grouping on large clusters
        return steps, (False if steps else None)
    by_arch = {g.arch: g for g in goals}
    # A revert the heuristic left out (the VM moved for another reason first) to a host that
    # takes no VMs or is of another architecture binds nothing here.
    drift_targets = {
        v: t
        for v, t in drift_targets.items()
        if t in by_arch.get(model.arch_of(before.host_of[v]), _NO_GOAL).hosts
    }
    proven: list[bool] = []
    for scope in exact.scopes(before, list(by_arch)):
        mine_goals = [by_arch[a] for a in scope]
        hosts_of = {g.arch: g.hosts for g in mine_goals}
        mine = [s for s in steps if model.arch_of(s.source) in hosts_of]
        if not exact.applicable(before, hosts_of, exact_near.NEAR_HOSTS, exact_near.NEAR_VMS):
            if mine:
                proven.append(False)
            continue
        ends = {g.arch: spread_of(after, g.hosts) for g in mine_goals}
        reached = {g.arch for g in mine_goals if ends[g.arch] <= g.threshold + EPSILON}
        if not mine and all(g.arch in reached or not g.balancing for g in mine_goals):
            proven.append(True)
            continue
        needed = _mandatory_needed(before, hosts_of, drift_targets)
        must_be = {v: t for v, t in drift_targets.items() if v in needed}
        balancing = {g.arch for g in mine_goals if g.balancing}
        if not balancing and _determined(mine, needed, must_be):
            # nothing to choose (every VM that may move has the one host it must end on, and
            # the heuristic ends each there): the exact plan is this one, without the solver
            proven.append(True)
            continue

        def movable(v: int, needed: set[int] = needed, balancing: set[str] = balancing) -> bool:
            return v in needed or (
                model.arch_of(before.host_of[v]) in balancing and balance_movable(v)
            )

        # Each architecture within the threshold; failing that, where the heuristic ended.
        # An architecture not balancing may not end wider than the heuristic leaves it.
        first = {g.arch: _target(g, ends[g.arch], reached, strict=True) for g in mine_goals}
        second = {g.arch: _target(g, ends[g.arch], reached, strict=False) for g in mine_goals}
        found, target = None, first
        if exact.applicable(before, hosts_of):
            found = exact.solve(before, hosts_of, movable, must_be, first)
            if found is None and second != first:
                found = exact.solve(before, hosts_of, movable, must_be, second)
                target = second
        if found is None and mine:  # too large to solve whole: improve the heuristic's plan
            incumbent = {s.vm: s.target for s in mine}
            target = second
            found = exact_near.search(before, hosts_of, incumbent, movable, needed, must_be, target)
        if found is None:
            proven.append(False)
            continue
        reaches = sum(
            1 for g in mine_goals if g.balancing and target[g.arch] <= g.threshold + EPSILON
        )
        mine_reach = sum(1 for g in mine_goals if g.balancing and g.arch in reached)
        mine_cost = len(mine) + _preferred_broken(after, hosts_of)
        cost = len(found.target) + found.preferred
        # More architectures within the threshold first (what balancing is for), then fewer
        # moves, then fewer bytes to copy (memory plus local disks).
        mine_gib = sum(model.vms[s.vm].copy_bytes for s in mine)
        gib = sum(model.vms[v].copy_bytes for v in found.target)
        better = (-reaches, cost, gib) < (-mine_reach, mine_cost, mine_gib)
        # Proven against the heuristic's own spread only (the threshold was out of the
        # model's reach): not the fewest moves to the threshold, which moving VMs the model
        # holds (on a balanced architecture) or a swap no order allows may still reach.
        strict = reaches == len(balancing)
        if not better:
            proven.append(found.optimal and strict and cost == mine_cost and reaches >= mine_reach)
            continue
        ordered = exact.order(before, found.target, needed.__contains__)
        if ordered is None:
            proven.append(False)
            continue
        new = _steps(before, ordered, drift_targets, by_arch)
        steps = [s for s in steps if model.arch_of(s.source) not in hosts_of]
        # Mandatory steps of other scopes first, then this one's, then other balance.
        head = [s for s in steps if s.mandatory]
        steps = head + new + [s for s in steps if not s.mandatory]
        proven.append(found.optimal and strict)
    if not proven:
        return steps, None
    return steps, all(proven)


_NO_GOAL = ArchGoal("", (), False, 0.0)


def _target(goal: ArchGoal, end: float, reached: set[str], *, strict: bool) -> float:
    if not goal.balancing:
        return max(goal.threshold, end)
    if strict or goal.arch in reached:
        return goal.threshold
    return end


def _preferred_broken(state: State, hosts_of: Mapping[str, Sequence[int]]) -> int:
    model = state.model
    return sum(
        exact.preferred_broken(state, v.index, state.host_of[v.index])
        for v in model.vms
        if not v.shadow
        and state.host_of[v.index] >= 0
        and model.arch_of(state.host_of[v.index]) in hosts_of
    )


def _mandatory_needed(
    state: State, hosts_of: Mapping[str, Sequence[int]], drift_targets: Mapping[int, int]
) -> set[int]:
    """VMs of the scope a mandatory rule needs moved (a drift revert, a drain, a
    required host rule, a broken required antiAffinity or a host over hostLimit), whatever
    their cooldown: the reason their move gets."""
    model = state.model
    return {
        v.index
        for v in model.vms
        if not v.shadow
        and state.host_of[v.index] >= 0
        and model.arch_of(state.host_of[v.index]) in hosts_of
        and fixed_reason(state, v.index) is None
        and _why(state, v.index, drift_targets)[0] is not Reason.BALANCE
    }


def _determined(mine: Sequence[Step], needed: set[int], must_be: Mapping[int, int]) -> bool:
    """The steps move exactly the ``needed`` VMs, once each, every one to its ``must_be``."""
    ends = {s.vm: s.target for s in mine}
    return len(ends) == len(mine) == len(needed) and all(
        v in needed and must_be.get(v) == t for v, t in ends.items()
    )


def _steps(
    state: State,
    moves: list[tuple[int, int]],
    drift_targets: Mapping[int, int],
    goals: Mapping[str, ArchGoal],
) -> list[Step]:
    model = state.model
    work = state.copy()
    out: list[Step] = []
    n = len(moves)
    for k, (v, t) in enumerate(moves, 1):
        s = work.host_of[v]
        reason, rule, why = _why(state, v, drift_targets)
        goal = goals[model.arch_of(s)]
        if reason is Reason.BALANCE:
            spread = spread_of(work, goal.hosts)
            why = f"{goal.arch} score spread {spread:.1f} is over threshold {goal.threshold:g}"
        detail = (
            f"{why}; {model.vms[v].name} moves to {model.hosts[t].name} (step {k} of {n} of "
            "the fewest moves that meet every rule and the threshold together)."
        )
        out.append(Step(v, s, t, reason, rule, detail, reason is not Reason.BALANCE))
        work.move(v, t)
    return out


def _why(state: State, v: int, drift_targets: Mapping[int, int]) -> tuple[Reason, str | None, str]:
    model = state.model
    s = state.host_of[v]
    name, host = model.vms[v].name, model.hosts[s].name
    if v in drift_targets:
        return Reason.DRIFT, None, f"{name} runs on {host} but placement puts it elsewhere"
    if model.hosts[s].maintenance:
        return Reason.MAINTENANCE, None, f"{host} is in maintenance"
    for r in model.rules.host_rules[v]:
        if r.required and not r.permits(s):
            return REASONS[r.kind], r.name, f"{describe_kind(r.kind)} {r.name} keeps it off {host}"
    for gi in model.rules.vm_groups[v]:
        g = model.rules.groups[gi]
        if g.required and state.counts[gi].count(domain_of(g, s)) > 1:
            return REASONS[g.kind], g.name, f"anti-affinity {g.name}: {name} shares {host}"
    limit = model.weights.host_limit
    if state.cpu_pct(s) > limit + EPSILON or state.mem_pct(s) > limit + EPSILON:
        return Reason.HOST_LIMIT, None, f"{host} is over hostLimit {limit:g}%"
    return Reason.BALANCE, None, ""
