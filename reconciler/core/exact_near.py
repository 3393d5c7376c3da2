"""Large-neighbourhood search with the exact model, for scopes too large to solve whole.

A mid-size scope (24 hosts x 10 VMs: about 1,500 (class, host) variables) is over
``EXACT_COLUMNS``; HiGHS does not prove such a model within the planner's limits. The
heuristic's plan is the incumbent instead, and small parts of it are solved again exactly:

- per architecture, the hosts scoring above the mean are *hot* (and every host a move of the
  incumbent leaves), the others *cold*;
- a neighbourhood is ``NEAR_SOURCES`` hot hosts next to each other in score order: the VMs
  that start there are free (each may stay, or end on a cold host scoring lower than its own
  one, or where the incumbent put it; one a mandatory rule needs moved on any host its rules
  allow), every other VM stays where the incumbent puts it;
- the sub-model keeps every rule of the whole one (capacity, hostLimit, each required
  antiAffinity over all members, each architecture's spread target over all its hosts), so
  the incumbent's own moves are one of its solutions; a solution with fewer moves replaces
  them when the whole plan can still be ordered step by step.

The neighbourhoods are visited hottest first, again while a pass improves, within
``NEAR_SOLVES`` solves of at most ``NEAR_COLUMNS`` variables and ``NEAR_NODES`` nodes each.
Then the plan's moves are chosen again together: every VM the plan moves is free (it may stay
home, keep its target or end on any host scoring lower than its own), every other VM stays
where the plan puts it. This drops a move whose VM can stay, makes two moves one, and lets the
moved VMs trade targets across sources no window holds together. It runs again while it
improves, within ``MOVED_COLUMNS`` variables over its solves, and ends at a sub-model proven
optimal.
No clock decides anything (a solve the clock stops is dropped, as for the whole model), so the
plan depends on its inputs only. The result is a local optimum, not a proven one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from reconciler.core import exact
from reconciler.core.state import State

NEAR_HOSTS = 64
"""Largest scope searched, in hosts (a 1,000-host cluster is not)."""
NEAR_VMS = 1_000
"""...and in VMs."""
NEAR_SOURCES = 3
"""Hot hosts freed together."""
NEAR_COLUMNS = 1_200
"""Largest sub-model solved, in (class, host) variables (they solve at the root node)."""
NEAR_NODES = 10
"""Branch-and-bound nodes per sub-model: the deterministic bound of its work. Most of the
benchmarks' sub-models are solved at the root node (0.02-0.8 s of CPU); the few that branch
find the same plans at 10 nodes as at 200 or unbounded, where they took up to 250 nodes and
6.4 s. HiGHS's root work (cuts, heuristics) is not bounded by nodes: up to about 4 s of CPU."""
NEAR_TIME_LIMIT = 60.0
"""Seconds per sub-model: only a safety net, above what the slowest root takes on a machine
ten times slower (a cut-off solve is dropped, and the plan would then depend on the load)."""
NEAR_SOLVES = 16
"""Sub-models solved per scope at most: the work budget."""
MOVED_COLUMNS = 1_200
"""Variables of the sub-models of the moved VMs, summed over their solves: their work budget
(one model of all the moves of a 40-host plan has 300-1,100)."""


def search(
    before: State,
    hosts_of: Mapping[str, Sequence[int]],
    incumbent: Mapping[int, int],
    movable: Callable[[int], bool],
    needed: Collection[int],
    must_be: Mapping[int, int],
    target: Mapping[str, float],
) -> exact.Solution | None:
    """A final placement with fewer moves than ``incumbent`` (VM -> host, for the VMs it
    moves, whose final state meets every rule and ``target``), or None."""
    score = {h: before.score(h) for hosts in hosts_of.values() for h in hosts}
    hot: set[int] = {before.host_of[v] for v in incumbent}
    for hosts in hosts_of.values():
        mean = sum(score[h] for h in hosts) / len(hosts)
        hot.update(h for h in hosts if score[h] > mean)
    hot &= score.keys()
    ranked = sorted(hot, key=lambda h: (-score[h], h))
    windows = [
        set(ranked[i : i + NEAR_SOURCES]) for i in range(max(1, len(ranked) - NEAR_SOURCES + 1))
    ]
    best = dict(incumbent)

    def better(free: set[int], columns: int) -> tuple[dict[int, int] | None, exact.Solution | None]:
        """A placement cheaper than ``best`` where only the ``free`` VMs are placed again
        (None when the sub-model finds none), and the sub-model's solution."""
        found = _solve_part(before, hosts_of, best, free, score, needed, must_be, target, columns)
        if found is None:
            return None, None
        trial = {v: t for v, t in best.items() if v not in free}
        trial.update(found.target)
        if _cost(before, hosts_of, trial) >= _cost(before, hosts_of, best):
            return None, found
        if exact.order(before, trial, needed.__contains__) is None:
            return None, found
        return trial, found

    solves = 0
    improved = True
    while improved and solves < NEAR_SOLVES:
        improved = False
        for sources in windows:
            if solves >= NEAR_SOLVES:
                break
            solves += 1
            free = {v for h in sources for v in before.vms_on[h] if movable(v)}
            trial, _ = better(free, NEAR_COLUMNS)
            if trial is not None:
                best, improved = trial, True
    # Then the moves chosen again together, within MOVED_COLUMNS variables over the solves.
    # A sub-model proven optimal ends it: the next one's choices are a subset of its own.
    budget = MOVED_COLUMNS
    while budget > 0:
        trial, found = better({v for v in best if movable(v)}, budget)
        if trial is not None:
            best = trial
        if trial is None or found is None or found.optimal:
            break
        budget -= found.columns
    if best == incumbent:
        return None
    return exact.Solution(best, False, _cost(before, hosts_of, best) - len(best))


def _cost(before: State, hosts_of: Mapping[str, Sequence[int]], final: Mapping[int, int]) -> int:
    """Moves plus preferred host rules broken by the scope's VMs, in the final placement."""
    model = before.model
    broken = 0
    for vm in model.vms:
        s = before.host_of[vm.index]
        if not vm.shadow and s >= 0 and model.arch_of(s) in hosts_of:
            broken += exact.preferred_broken(before, vm.index, final.get(vm.index, s))
    return len(final) + broken


def _solve_part(
    before: State,
    hosts_of: Mapping[str, Sequence[int]],
    best: Mapping[int, int],
    free: set[int],
    score: Mapping[int, float],
    needed: Collection[int],
    must_be: Mapping[int, int],
    target: Mapping[str, float],
    columns: int,
) -> exact.Solution | None:
    """The fewest moves of the ``free`` VMs, every other VM where ``best`` puts it, in a model
    of at most ``columns`` variables."""
    work = before.copy()
    for v, t in best.items():
        if v not in free:
            work.move(v, t)

    def narrow(v: int, allowed: list[int]) -> list[int]:
        if v in needed:
            return allowed
        s = before.host_of[v]
        return [h for h in allowed if h == s or h == best.get(v) or score[h] < score[s]]

    return exact.solve(
        work,
        hosts_of,
        free.__contains__,
        must_be,
        target,
        narrow=narrow,
        memory=False,
        columns=columns,
        seconds=NEAR_TIME_LIMIT,
        nodes=NEAR_NODES,
    )
