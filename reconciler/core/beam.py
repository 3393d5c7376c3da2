"""A bounded beam search over balance moves, for small architectures where greedy gets stuck.

The greedy search in ``balance`` takes the best move at each step; an early move it takes can
leave a spread that no later move or pair lowers, while another first move would have led
under the threshold. On a small architecture (at most ``BEAM_HOSTS`` hosts and ``BEAM_VMS``
movable VMs) whose greedy result ends over the threshold, this search keeps the ``WIDTH`` best
partial plans at each depth instead of one:

- a step moves a VM not yet moved in the plan from a host to a less loaded one of the
  architecture; it must be feasible (``check_move``: capacity, hostLimit, required rules) in
  the state the steps before it leave and must break no preferred rule;
- partial plans are ranked by the spread they leave, then the sum of squared score
  deviations, then memory moved, then the VM and host names of their steps (so the result
  does not depend on input order); two plans ending with the same moves are one;
- at the first depth where a plan reaches the threshold, the reaching plan with the least
  memory moved (then names) is the result; none within ``depth`` steps gives ``None``.

A step may raise the spread for a moment (the first half of a swap), but every step is
feasible in order, and the result is only used when it reaches the threshold, so planning
again on its end state finds nothing to balance.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from reconciler.core.feasibility import EPSILON, check_move, preferred_delta
from reconciler.core.state import State

BEAM_HOSTS = 16
BEAM_VMS = 300
"""Largest architecture (hosts, movable VMs) searched."""
WIDTH = 8
"""Partial plans kept at each depth."""

Path = tuple[tuple[int, int], ...]
"""Steps so far: (VM, target) in order."""


def small_enough(state: State, hosts: Sequence[int], eligible: Callable[[int], bool]) -> bool:
    if len(hosts) > BEAM_HOSTS:
        return False
    return sum(1 for h in hosts for v in state.vms_on[h] if eligible(v)) <= BEAM_VMS


def beam_search(
    state: State,
    hosts: Sequence[int],
    eligible: Callable[[int], bool],
    threshold: float,
    depth: int,
) -> Path | None:
    """The fewest feasible steps (at most ``depth``) found that bring the spread over
    ``hosts`` within ``threshold``; ``state`` is left unchanged."""
    model = state.model
    names = [model.vms[v].name for v in range(len(model.vms))]
    host_names = {h: model.hosts[h].name for h in hosts}
    nodes: list[tuple[Path, State, int]] = [((), state, 0)]
    for _ in range(depth):
        # (reaches, spread, deviation, memory, step names, path, state, VM, target)
        children: list[tuple[int, float, float, int, tuple[str, ...], Path, State, int, int]] = []
        for path, st, memory in nodes:
            moved = {v for v, _ in path}
            scores = {h: st.score(h) for h in hosts}
            order = sorted(hosts, key=lambda h: (scores[h], host_names[h]))
            mean = sum(scores.values()) / len(hosts)
            base_dev = sum((x - mean) ** 2 for x in scores.values())
            for s in hosts:
                for v in sorted(st.vms_on[s]):
                    if v in moved or not eligible(v):
                        continue
                    s_after = st.score_with(s, v, -1)
                    for t in hosts:
                        if t == s or scores[t] >= scores[s]:
                            continue
                        t_after = st.score_with(t, v, 1)
                        hi, lo = max(s_after, t_after), min(s_after, t_after)
                        for x in reversed(order):
                            if x not in (s, t):
                                hi = max(hi, scores[x])
                                break
                        for x in order:
                            if x not in (s, t):
                                lo = min(lo, scores[x])
                                break
                        spread = hi - lo
                        dev = (
                            base_dev
                            - (scores[s] - mean) ** 2
                            - (scores[t] - mean) ** 2
                            + (s_after - mean) ** 2
                            + (t_after - mean) ** 2
                        )
                        mem = memory + model.vms[v].memory
                        reaches = spread <= threshold + EPSILON
                        steps = tuple(f"{names[a]}>{host_names[b]}" for a, b in path)
                        children.append(
                            (
                                0 if reaches else 1,
                                0.0 if reaches else spread,
                                0.0 if reaches else dev,
                                mem,
                                (*steps, f"{names[v]}>{host_names[t]}"),
                                path,
                                st,
                                v,
                                t,
                            )
                        )
        children.sort(key=lambda c: c[:5])
        kept: list[tuple[Path, State, int]] = []
        seen: set[frozenset[tuple[int, int]]] = set()
        for rank, _, _, mem, _, path, st, v, t in children:
            new = (*path, (v, t))
            final = frozenset({*((a, b) for a, b in path), (v, t)})
            if final in seen:
                continue
            if check_move(st, v, t) is not None or preferred_delta(st, v, t)[0] > 0:
                continue
            if rank == 0:
                return new
            seen.add(final)
            after = st.copy()
            after.move(v, t)
            kept.append((new, after, mem))
            if len(kept) >= WIDTH:
                break
        if not kept:
            return None
        nodes = kept
    return None
