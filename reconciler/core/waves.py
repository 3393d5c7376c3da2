"""Waves: which planned moves may run at the same time.

Moves are taken in simulation order; each goes to the earliest wave that

- comes after every earlier move it depends on: a move leaving its target host (the room it
  needs may be freed by that move) or a move of a member of a required group rule it belongs
  to (the rule was checked in that order);
- keeps the wave within ``parallel.cluster`` migrations, within ``maxOutbound`` of its source
  and ``maxInbound`` of its target, and within ``maxConcurrent`` of every disruptionBudget
  that selects its VM.

Within a wave moves touch no shared capacity in a way their order matters: any interleaving
of one wave is as safe as the simulated order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from reconciler.core.state import Model
from reconciler.core.steps import Step


def assign_waves(steps: Sequence[Step], model: Model, parallel: int) -> list[int]:
    """The wave of each step, in the order given; the steps of one unit share a wave."""
    rules = model.rules
    cluster: Counter[int] = Counter()
    outbound: Counter[tuple[int, int]] = Counter()
    inbound: Counter[tuple[int, int]] = Counter()
    budget: Counter[tuple[int, int]] = Counter()
    last_leaving: dict[int, int] = {}
    last_in_group: dict[int, int] = {}
    skip: dict[int, int] = {}
    """A full wave -> a later wave to look at instead: a full wave takes no unit, and waiting
    past the full ones one by one made the assignment quadratic in the waves (a balance plan
    of thousands of moves at a parallel of a few)."""

    def open_from(w: int) -> int:
        """The first wave from ``w`` on that is not full."""
        passed = []
        while w in skip:
            passed.append(w)
            w = skip[w]
        for p in passed:
            skip[p] = w
        return w

    waves: list[int] = []
    i = 0
    while i < len(steps):
        j = i + 1
        if steps[i].unit is not None:
            while j < len(steps) and steps[j].unit == steps[i].unit:
                j += 1
        unit = steps[i:j]
        groups = {g for s in unit for g in rules.vm_groups[s.vm] if rules.groups[g].required}
        earliest = max(last_leaving.get(s.target, -1) + 1 for s in unit)
        for g in groups:
            earliest = max(earliest, last_in_group.get(g, -1) + 1)
        n_out, n_in, n_budget = _counts(unit, rules.vm_budgets)
        w = open_from(earliest)
        # A unit bigger than a wave allows (never planned) would still end: counts start at 0.
        while (cluster[w] and cluster[w] + len(unit) > parallel) or (
            cluster[w]
            and (
                any(outbound[w, h] + n > model.hosts[h].max_outbound for h, n in n_out.items())
                or any(inbound[w, h] + n > model.hosts[h].max_inbound for h, n in n_in.items())
                or any(
                    budget[w, b] + n > rules.budgets[b].max_concurrent for b, n in n_budget.items()
                )
            )
        ):
            w = open_from(w + 1)
        cluster[w] += len(unit)
        if cluster[w] >= parallel:
            skip[w] = w + 1
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


def _counts(
    unit: Sequence[Step], vm_budgets: Sequence[tuple[int, ...]]
) -> tuple[Mapping[int, int], Mapping[int, int], Mapping[int, int]]:
    """Moves of ``unit`` per source host, per target host and per disruption budget. Most
    units are one move (every balance move of a plan, thousands on a large cluster): theirs
    are counted without a ``Counter`` each (a budget selects a VM once)."""
    if len(unit) == 1:
        step = unit[0]
        return {step.source: 1}, {step.target: 1}, dict.fromkeys(vm_budgets[step.vm], 1)
    return (
        Counter(s.source for s in unit),
        Counter(s.target for s in unit),
        Counter(b for s in unit for b in vm_budgets[s.vm]),
    )
