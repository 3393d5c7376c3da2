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
from collections.abc import Sequence

from reconciler.core.state import Model
from reconciler.core.steps import Step


def assign_waves(steps: Sequence[Step], model: Model, parallel: int) -> list[int]:
    """The wave of each step, in the order given."""
    rules = model.rules
    cluster: Counter[int] = Counter()
    outbound: Counter[tuple[int, int]] = Counter()
    inbound: Counter[tuple[int, int]] = Counter()
    budget: Counter[tuple[int, int]] = Counter()
    last_leaving: dict[int, int] = {}
    last_in_group: dict[int, int] = {}
    waves: list[int] = []
    for step in steps:
        groups = [g for g in rules.vm_groups[step.vm] if rules.groups[g].required]
        earliest = last_leaving.get(step.target, -1) + 1
        for g in groups:
            earliest = max(earliest, last_in_group.get(g, -1) + 1)
        src, dst = model.hosts[step.source], model.hosts[step.target]
        budgets = rules.vm_budgets[step.vm]
        w = earliest
        while (
            cluster[w] >= parallel
            or outbound[w, step.source] >= src.max_outbound
            or inbound[w, step.target] >= dst.max_inbound
            or any(budget[w, b] >= rules.budgets[b].max_concurrent for b in budgets)
        ):
            w += 1
        cluster[w] += 1
        outbound[w, step.source] += 1
        inbound[w, step.target] += 1
        for b in budgets:
            budget[w, b] += 1
        last_leaving[step.source] = max(last_leaving.get(step.source, -1), w)
        for g in groups:
            last_in_group[g] = max(last_in_group.get(g, -1), w)
        waves.append(w)
    return waves
