"""Balance moves within one CPU architecture: lower the score spread with few, small moves.

Greedy: at each step, among moves from the most loaded hosts to the least loaded ones, take
the feasible move with the best spread reduction per cost (cost = 1 per migration + memory
moved / 32GiB + 1 per preferred rule broken - 0.5 per preferred rule repaired), ties broken
by smaller memory, then VM name, then host name. Stop when the spread is within the
threshold, when no move lowers it by at least ``margin``, or after ``max_moves``.
Every step lowers the spread strictly, so a VM never moves back and forth within a plan,
and a plan made on the predicted end state finds nothing to do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reconciler.core.feasibility import EPSILON, check_move, preferred_delta
from reconciler.core.state import State
from reconciler.core.steps import Step
from reconciler.model.plan import Reason

SOURCES = 3
"""Most loaded hosts whose VMs are considered first."""
TARGETS = 8
"""Least loaded hosts considered first as targets."""
WIDE_SOURCES = 32
"""Hosts considered (as sources and targets) when the narrow search finds nothing."""
GIB_PER_COST = 32 * 1024**3


@dataclass(frozen=True, slots=True)
class BalanceSettings:
    threshold: float
    margin: float
    max_moves: int


def spread_of(state: State, hosts: Sequence[int]) -> float:
    scores = [state.score(h) for h in hosts]
    return max(scores) - min(scores) if len(scores) > 1 else 0.0


def plan_balance(
    state: State,
    arch: str,
    hosts: Sequence[int],
    eligible: Callable[[int], bool],
    settings: BalanceSettings,
) -> list[Step]:
    """Balance moves over ``hosts`` (one architecture), applied to ``state`` in order."""
    model = state.model
    steps: list[Step] = []
    if len(hosts) < 2:
        return steps
    scores = {h: state.score(h) for h in hosts}
    moved: set[int] = set()
    need = max(settings.margin, EPSILON)
    for _ in range(settings.max_moves):
        order = sorted(hosts, key=lambda h: (scores[h], model.hosts[h].name))
        spread = scores[order[-1]] - scores[order[0]]
        if spread <= settings.threshold + EPSILON:
            break
        found = None
        for n_src, n_tgt in ((SOURCES, TARGETS), (WIDE_SOURCES, len(order))):
            found = _best_move(state, order, scores, spread, need, eligible, moved, n_src, n_tgt)
            if found is not None:
                break
        if found is None:
            break
        v, t, new_spread = found
        s = state.host_of[v]
        vm = model.vms[v]
        detail = (
            f"{arch} score spread {spread:.1f} is over threshold {settings.threshold:g}: "
            f"{model.hosts[s].name} scores {scores[s]:.1f} and {model.hosts[t].name} "
            f"{scores[t]:.1f}; moving {vm.name} lowers the spread to {new_spread:.1f}."
        )
        steps.append(Step(v, s, t, Reason.BALANCE, None, detail, False))
        state.move(v, t)
        moved.add(v)
        scores[s] = state.score(s)
        scores[t] = state.score(t)
    return steps


def _best_move(
    state: State,
    order: list[int],
    scores: dict[int, float],
    spread: float,
    need: float,
    eligible: Callable[[int], bool],
    moved: set[int],
    n_src: int,
    n_tgt: int,
) -> tuple[int, int, float] | None:
    model = state.model
    sources = order[::-1][:n_src]
    targets = order[:n_tgt]
    top = order[::-1][:3]
    bottom = order[:3]
    best_key: tuple[float, int, str, str] | None = None
    best: tuple[int, int, float] | None = None
    for s in sources:
        for v in sorted(state.vms_on[s]):
            if v in moved or not eligible(v):
                continue
            vm = model.vms[v]
            s_after = state.score_with(s, v, -1)
            base_cost = 1.0 + vm.memory / GIB_PER_COST
            for t in targets:
                if t == s:
                    continue
                hi = next(scores[h] for h in top if h not in (s, t)) if len(order) > 2 else None
                lo = next(scores[h] for h in bottom if h not in (s, t)) if len(order) > 2 else None
                t_after = state.score_with(t, v, 1)
                new_hi = max(s_after, t_after) if hi is None else max(hi, s_after, t_after)
                new_lo = min(s_after, t_after) if lo is None else min(lo, s_after, t_after)
                new_spread = new_hi - new_lo
                reduction = spread - new_spread
                if reduction < need - EPSILON:
                    continue
                key = (-reduction / base_cost, vm.memory, vm.name, model.hosts[t].name)
                if best_key is not None and key >= best_key:
                    continue
                if check_move(state, v, t) is not None:
                    continue
                breaks, repairs = preferred_delta(state, v, t)
                cost = max(0.25, base_cost + breaks - 0.5 * repairs)
                key = (-reduction / cost, vm.memory, vm.name, model.hosts[t].name)
                if best_key is None or key < best_key:
                    best_key, best = key, (v, t, new_spread)
    return best
