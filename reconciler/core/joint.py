"""Keep the better of the heuristic plan and the exact joint plan, per small architecture.

For each architecture :func:`reconciler.core.exact.applicable` accepts, the exact plan of
repair and balance together replaces the heuristic's moves of that architecture when it needs
fewer moves (or as many, and reaches the threshold where the heuristic does not), and its
moves can be ordered so every step is feasible; otherwise the heuristic plan stays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from reconciler.core import exact
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
    optimal (None: no architecture was solved exactly)."""
    model = before.model
    proven: list[bool] = []
    for goal in goals:
        if not exact.applicable(before, goal.arch, goal.hosts):
            if any(model.arch_of(s.source) == goal.arch for s in steps):
                proven.append(False)
            continue
        mine = [s for s in steps if model.arch_of(s.source) == goal.arch]
        end = spread_of(after, goal.hosts)
        reached = end <= goal.threshold + EPSILON
        if not mine and (reached or not goal.balancing):
            proven.append(True)
            continue
        needed = _mandatory_needed(before, goal, drift_targets)
        must_be = {v: t for v, t in drift_targets.items() if v in needed}

        def movable(v: int, needed: set[int] = needed, goal: ArchGoal = goal) -> bool:
            return v in needed or (goal.balancing and balance_movable(v))

        targets = [goal.threshold] if reached or not goal.balancing else [goal.threshold, end]
        if not goal.balancing:
            targets = [max(goal.threshold, end)]
        found = None
        for target in targets:
            found = exact.solve(before, goal.arch, goal.hosts, movable, must_be, target)
            if found is not None:
                break
        if found is None:
            proven.append(False)
            continue
        reaches = target <= goal.threshold + EPSILON
        mine_cost = len(mine) + _preferred_broken(after, goal.arch)
        cost = len(found.target) + found.preferred
        better = cost < mine_cost or (cost == mine_cost and reaches and not reached)
        if not better:
            proven.append(found.optimal and cost == mine_cost)
            continue
        ordered = exact.order(before, found.target, needed.__contains__)
        if ordered is None:
            proven.append(False)
            continue
        new = _steps(before, ordered, drift_targets, goal)
        steps = [s for s in steps if model.arch_of(s.source) != goal.arch]
        # Mandatory steps of other architectures first, then this one's, then other balance.
        first = [s for s in steps if s.mandatory]
        steps = first + new + [s for s in steps if not s.mandatory]
        proven.append(found.optimal)
    if not proven:
        return steps, None
    return steps, all(proven)


def _preferred_broken(state: State, arch: str) -> int:
    model = state.model
    return sum(
        exact.preferred_broken(state, v.index, state.host_of[v.index])
        for v in model.vms
        if not v.shadow
        and state.host_of[v.index] >= 0
        and model.arch_of(state.host_of[v.index]) == arch
    )


def _mandatory_needed(state: State, goal: ArchGoal, drift_targets: Mapping[int, int]) -> set[int]:
    """VMs of the architecture a mandatory rule needs moved (a drift revert, a drain, a
    required host rule, a broken required antiAffinity or a host over hostLimit), whatever
    their cooldown: the reason their move gets."""
    model = state.model
    return {
        v.index
        for v in model.vms
        if not v.shadow
        and state.host_of[v.index] >= 0
        and model.arch_of(state.host_of[v.index]) == goal.arch
        and fixed_reason(state, v.index) is None
        and _why(state, v.index, drift_targets)[0] is not Reason.BALANCE
    }


def _steps(
    state: State, moves: list[tuple[int, int]], drift_targets: Mapping[int, int], goal: ArchGoal
) -> list[Step]:
    model = state.model
    work = state.copy()
    out: list[Step] = []
    n = len(moves)
    for k, (v, t) in enumerate(moves, 1):
        s = work.host_of[v]
        reason, rule, why = _why(state, v, drift_targets)
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
