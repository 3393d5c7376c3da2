"""Balance moves within one CPU architecture: lower the score spread with few, small moves.

The spread is max minus min host score. A balance move takes a VM from a more loaded host to
a less loaded one and must

- narrow the gap between its source and target scores by at least ``margin`` points,
- leave the architecture's spread no higher than before, and
- be feasible (capacity, hostLimit, required rules) in the state left by the moves before it.

On a small cluster every such move lowers the spread itself; on a large one, where many hosts
sit near the maximum, one move cannot lower the spread alone, so moves that even out the
hottest and coolest hosts are taken until the spread drops. Greedy, fewest migrations first
and then fewest bytes copied: at each step, among moves from the most loaded hosts to the
least loaded ones, a move that alone brings the spread within the threshold wins (the one with
the lowest cost, then the fewest bytes to copy); otherwise the largest spread reduction per
cost, counted in steps of ``GAIN_STEP`` points, then the largest reduction of squared score
deviations per cost, then fewer bytes to copy (guest memory plus local disk allocation), VM
name and host name (cost = 1 per migration + 1 per preferred rule broken - 0.5 per preferred
rule repaired). Bytes only break ties between moves of similar effect: a small VM that closes
less of the gap would take more migrations. Stop when the spread is within the threshold,
when no move qualifies, or after ``max_moves``. A VM moves at most once per plan.

When no single move qualifies (every VM on the hot host overshoots or does not fit, or the
coolest hosts are too close for one move to raise the minimum), a bounded pair search tries
two moves: one between the ``PAIR_FIRST_HOT`` most and ``PAIR_FIRST_COOL`` least loaded
hosts (either way), then the best single move in the state it leaves, e.g. a big VM out of
the hot host and a smaller one back. A pair must lower the spread by ``margin`` or bring it
within the threshold; both moves are checked in their order, so each intermediate state is
feasible. At most ``MAX_PAIR_SEARCHES`` pair searches run per architecture.

On a small architecture (see ``beam``) where this greedy search ends over the threshold, a
bounded beam search looks for other moves, no more of them, that reach the threshold; its
result replaces the greedy one only then.

Each single move strictly lowers the sum of squared score deviations of its two hosts and
each pair lowers the spread, so the search ends, a VM never moves back within a plan, and
planning again on the predicted end state (moved VMs in cooldown) finds nothing to do.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reconciler.core.beam import Path, beam_search, small_enough
from reconciler.core.capacity import SATURATED, spread
from reconciler.core.feasibility import EPSILON, check_move, preferred_delta
from reconciler.core.state import State
from reconciler.core.steps import Step
from reconciler.model.plan import Reason

SOURCES = 1
"""Most loaded hosts whose VMs are considered first."""
TARGETS = 4
"""Least loaded hosts considered first as targets."""
WIDE = 16
"""Sources and targets considered when the narrow search finds nothing."""
PAIR_FIRST_HOT = 1
PAIR_FIRST_COOL = 3
"""Most and least loaded hosts between which the first move of a pair is tried."""
PAIR_HOT = 2
PAIR_COOL = 4
"""Sources and targets of the second move of a pair (see ``_pair``)."""
MAX_PAIR_SEARCHES = 4
"""Pair searches per architecture and plan (each about 0.06 s at 1,000 hosts)."""
GAIN_STEP = 2.0
"""Spread reductions this close (points) count as equal, so the smaller VM wins."""

RankKey = tuple[int, float, float, int, str, str]


@dataclass(frozen=True, slots=True)
class BalanceSettings:
    threshold: float
    margin: float
    max_moves: int


def spread_of(state: State, hosts: Sequence[int]) -> float:
    """The spread of ``hosts``' scores in ``state`` (:func:`capacity.spread`)."""
    return spread([state.score(h) for h in hosts])


def plan_balance(
    state: State,
    arch: str,
    hosts: Sequence[int],
    eligible: Callable[[int], bool],
    settings: BalanceSettings,
) -> list[Step]:
    """Balance moves over ``hosts`` (one architecture), applied to ``state`` in order."""
    if len(hosts) < 2:
        return []
    if not small_enough(state, hosts, eligible):
        return _greedy(state, arch, hosts, eligible, settings)
    steps = _greedy(state.copy(), arch, hosts, eligible, settings)
    if steps and _spread_after(state, hosts, steps) > settings.threshold + EPSILON:
        path = beam_search(state, hosts, eligible, settings.threshold, len(steps))
        if path is not None:
            steps = _beam_steps(state, arch, hosts, path, settings.threshold)
    for step in steps:
        state.move(step.vm, step.target)
    return steps


def _spread_after(state: State, hosts: Sequence[int], steps: Sequence[Step]) -> float:
    after = state.copy()
    for step in steps:
        after.move(step.vm, step.target)
    return spread_of(after, hosts)


def _beam_steps(
    state: State, arch: str, hosts: Sequence[int], path: Path, threshold: float
) -> list[Step]:
    """Steps for a beam search result (``state`` is left unchanged)."""
    model = state.model
    after = state.copy()
    spread = spread_of(after, hosts)
    for v, t in path:
        after.move(v, t)
    end = spread_of(after, hosts)
    steps: list[Step] = []
    for v, t in path:
        s = state.host_of[v]
        detail = (
            f"{arch} score spread {spread:.1f} is over threshold {threshold:g} and the greedy "
            f"search would stop above it; moving {model.vms[v].name} from "
            f"{model.hosts[s].name} to {model.hosts[t].name} is step {len(steps) + 1} of "
            f"{len(path)} that bring it to {end:.1f}."
        )
        steps.append(Step(v, s, t, Reason.BALANCE, None, detail, False))
    return steps


def _greedy(
    state: State,
    arch: str,
    hosts: Sequence[int],
    eligible: Callable[[int], bool],
    settings: BalanceSettings,
) -> list[Step]:
    """The greedy search (single moves, then pairs), applied to ``state``."""
    model = state.model
    steps: list[Step] = []
    board = _Board(state, hosts)
    moved: set[int] = set()
    need = max(settings.margin, EPSILON)
    pair_searches = MAX_PAIR_SEARCHES
    while len(steps) < settings.max_moves:
        spread = board.spread()
        if spread <= settings.threshold + EPSILON:
            break
        search = board.search(spread, need, eligible, moved, settings.threshold)
        found = search.run(SOURCES, TARGETS) or search.run(WIDE, WIDE, first_source=True)
        if found is not None:
            v, t, new_spread = found
            s = state.host_of[v]
            detail = (
                f"{arch} score spread {spread:.1f} is over threshold {settings.threshold:g}: "
                f"{model.hosts[s].name} scores {board.scores[s]:.1f} and {model.hosts[t].name} "
                f"{board.scores[t]:.1f}; moving {model.vms[v].name} brings the spread to "
                f"{new_spread:.1f}."
            )
            steps.append(Step(v, s, t, Reason.BALANCE, None, detail, False))
            board.move(v, t)
            moved.add(v)
            continue
        if pair_searches <= 0 or len(steps) + 2 > settings.max_moves:
            break
        pair_searches -= 1
        pair = _pair(board, spread, need, eligible, moved, settings.threshold)
        if pair is None:
            break
        (v1, t1), (v2, t2), new_spread = pair
        names = model.vms[v1].name, model.vms[v2].name
        for v, t in pair[:2]:
            s = state.host_of[v]
            detail = (
                f"{arch} score spread {spread:.1f} is over threshold {settings.threshold:g} "
                f"and no single move qualifies; moving {names[0]} to {model.hosts[t1].name} "
                f"and then {names[1]} to {model.hosts[t2].name} brings it to {new_spread:.1f} "
                f"({model.vms[v].name} leaves {model.hosts[s].name}, scoring "
                f"{board.scores[s]:.1f})."
            )
            steps.append(Step(v, s, t, Reason.BALANCE, None, detail, False))
            board.move(v, t)
            moved.add(v)
    return steps


class _Board:
    """Host scores of one architecture kept sorted while moves are applied to the state."""

    def __init__(self, state: State, hosts: Sequence[int]) -> None:
        self.state = state
        model = state.model
        self.names = {h: model.hosts[h].name for h in hosts}
        self.scores = {h: state.score(h) for h in hosts}
        self.order = sorted((self.scores[h], self.names[h], h) for h in hosts)
        self.total = sum(self.scores.values())

    def spread(self) -> float:
        return self.order[-1][0] - self.order[0][0]

    def move(self, v: int, t: int) -> None:
        """Move ``v`` to ``t`` in the state and re-sort its two hosts."""
        s = self.state.host_of[v]
        self.state.move(v, t)
        order, scores = self.order, self.scores
        for h in (s, t):
            del order[bisect_left(order, (scores[h], self.names[h], h))]
            self.total -= scores[h]
            scores[h] = self.state.score(h)
            self.total += scores[h]
            insort(order, (scores[h], self.names[h], h))

    def search(
        self,
        spread: float,
        need: float,
        eligible: Callable[[int], bool],
        moved: set[int],
        threshold: float,
        ceiling: float | None = None,
    ) -> _Search:
        mean = self.total / len(self.order)
        return _Search(
            self.state,
            self.order,
            self.scores,
            mean,
            spread,
            need,
            eligible,
            moved,
            threshold,
            ceiling,
        )


def _pair(
    board: _Board,
    spread: float,
    need: float,
    eligible: Callable[[int], bool],
    moved: set[int],
    threshold: float,
) -> tuple[tuple[int, int], tuple[int, int], float] | None:
    """Two moves that together lower the spread by ``need`` or to ``threshold``, when no
    single move qualifies.

    The first move goes from one of the ``PAIR_FIRST_HOT`` most loaded hosts to one of the
    ``PAIR_FIRST_COOL`` least loaded ones, or the other way round (a small VM making room on a hot
    host first); the second is the best single move in the state the first leaves, so a swap
    (a big VM out, a smaller one back) and two moves toward two cool hosts are both found.
    Both moves are feasible in the order they are returned. Ranked like single moves: the
    pair that reaches the threshold first, then the largest reduction, then the preferred
    rules the first move breaks or repairs, then fewer bytes to copy.
    """
    state = board.state
    model = state.model
    hot = [e[2] for e in board.order[::-1][:PAIR_FIRST_HOT]]
    cool = [e[2] for e in board.order[:PAIR_FIRST_COOL]]
    ceiling = max(spread - need, threshold)  # by the margin at least, or within the threshold
    firsts = [(s, t) for s in hot for t in cool if s != t]
    firsts += [(s, t) for s in cool for t in hot if s != t]
    best_key: tuple[int, float, float, int, str, str, str, str] | None = None
    best: tuple[tuple[int, int], tuple[int, int], float] | None = None
    for s, t in firsts:
        for v in sorted(state.vms_on[s]):
            if v in moved or not eligible(v) or check_move(state, v, t) is not None:
                continue
            breaks, repairs = preferred_delta(state, v, t)
            board.move(v, t)
            moved.add(v)
            sub = board.search(board.spread(), need, eligible, moved, threshold, ceiling)
            found = sub.run(PAIR_HOT, PAIR_COOL)
            moved.discard(v)
            board.move(v, s)
            if found is None:
                continue
            v2, t2, final = found
            vm, vm2 = model.vms[v], model.vms[v2]
            reaches = final <= threshold + EPSILON
            key = (
                0 if reaches else 1,
                0.0 if reaches else -round((spread - final) / GAIN_STEP),
                breaks - 0.5 * repairs,
                vm.copy_bytes + vm2.copy_bytes,
                vm.name,
                model.hosts[t].name,
                vm2.name,
                model.hosts[t2].name,
            )
            if best_key is None or key < best_key:
                best_key, best = key, ((v, t), (v2, t2), final)
    return best


SLACK = 1e-9
"""Relative room left for rounding when a bound rules moves out (a few operations on scores
err by about 1e-15 of their size)."""

Target = tuple[str, int, bool, float, float, float, int, float, float, float, float]
"""A target of one source in :meth:`_Search.run`: name, index, loaded, CPU load, CPU
denominator, memory load, usable memory, gap to the source, the two hosts' squared
deviations, and the highest and lowest score of the other hosts."""


def _too_small(
    rest: Sequence[Target], w_cpu: float, w_mem: float, s_score: float, short: float
) -> tuple[float, float, float]:
    """(k_cpu, k_mem, small): a VM of loads ``cpu`` and ``mem`` (both not negative) whose
    source score loss plus ``cpu * k_cpu + mem * k_mem`` is below ``small`` narrows the gap
    to no target of ``rest`` by ``short``. Moved from ``s`` to ``t`` (scores ``s'`` and ``t'``
    after), it narrows the gap ``s - t`` to ``|s' - t'|``, so by at most ``(s - s') + (t' -
    t)``, and ``t' - t`` is ``cpu * w_cpu / den + mem * w_mem / usable``, at most ``cpu *
    k_cpu + mem * k_mem``; ``small`` leaves room for rounding. With a target of no capacity
    (saturated) nothing is too small."""
    k_cpu = k_mem = far = -math.inf
    for _, _, loaded, _, den, _, usable, gap, _, _, _ in rest:  # one pass, the maxima of all
        if not loaded:
            return 0.0, 0.0, -math.inf
        k_cpu = max(k_cpu, w_cpu / den)
        k_mem = max(k_mem, w_mem / usable)
        far = max(far, abs(gap))
    size = 1.0 + abs(s_score) + abs(short) + far
    return k_cpu, k_mem, short - SLACK * size


def _rank_bounds(
    rest: Sequence[Target],
    t_scores: Sequence[float],
    w_cpu: float,
    w_mem: float,
    spread: float,
    mean: float,
    within: float,
) -> tuple[float, bool, float, float, float] | None:
    """(least, reach, a, b, slack): what no move from one source to a target of ``rest``
    (scoring ``t_scores``) ranks better than, its key at cost 1 as :meth:`_Search.run` makes
    it (so a bound for the moves of VMs no preferred rule selects, which cost 1). No move
    brings the spread within the threshold unless ``reach``; its gain's step is at least
    ``least``; a VM of loads ``cpu`` and ``mem`` (not negative) lowers the squared
    deviations by at most the source's own part plus ``cpu * a + mem * b``, plus ``slack``
    and ``SLACK`` of it for rounding. None: no bound (a target of no capacity, or no third
    host scoring above or below).

    After a move to ``t`` the spread is at least the others' highest less their lowest
    score, so the gain is at most ``spread`` less that. A target ``u`` points below the
    mean that gains ``x`` lowers its squared deviation by ``u**2 - (u - x)**2 = 2ux - x**2``,
    at most ``2ux``, and ``x`` is ``cpu * w_cpu / den + mem * w_mem / usable``."""
    least, reach, a, b = math.inf, False, 0.0, 0.0
    size = 1.0 + abs(mean) + abs(spread)
    for (_, _, loaded, _, den, _, usable, _, _, hi_x, lo_x), t_score in zip(
        rest, t_scores, strict=True
    ):
        if not loaded or math.isinf(hi_x) or math.isinf(lo_x):
            return None
        floor = hi_x - lo_x
        reach = reach or floor <= within
        least = min(least, -round((spread - floor) / GAIN_STEP))
        u = max(mean - t_score, 0.0)
        a, b = max(a, 2.0 * u * w_cpu / den), max(b, 2.0 * u * w_mem / usable)
        size = max(size, 1.0 + abs(t_score) + abs(hi_x) + abs(lo_x))
    return least, reach, a, b, SLACK * size * size


class _Search:
    """One greedy step: the best qualifying move among the hottest and coolest hosts."""

    def __init__(
        self,
        state: State,
        order: list[tuple[float, str, int]],
        scores: dict[int, float],
        mean: float,
        spread: float,
        need: float,
        eligible: Callable[[int], bool],
        moved: set[int],
        threshold: float,
        ceiling: float | None = None,
    ) -> None:
        self.threshold = threshold
        self.ceiling = spread if ceiling is None else ceiling
        """A move must leave the spread no higher than this."""
        self.state = state
        self.order = order
        self.scores = scores
        self.spread = spread
        self.need = need
        self.eligible = eligible
        self.moved = moved
        self.mean = mean

    def run(
        self, n_src: int, n_tgt: int, first_source: bool = False
    ) -> tuple[int, int, float] | None:
        """The best move from the ``n_src`` most to the ``n_tgt`` least loaded hosts; with
        ``first_source``, from the most loaded source that has a qualifying move.

        Feasibility (:func:`check_move`) is asked of the winner alone first: the best move
        of all, feasible, is the best feasible move (keys are unique, so the order in which
        moves are ranked does not matter), and the first source with a qualifying move is
        then the first with a feasible one. Only when the winner is refused does the search
        run again asking it of every move that ranks best so far, as it goes.
        """
        found = self._ranked(n_src, n_tgt, first_source, checked=False)
        if found is None or check_move(self.state, found[0], found[1]) is None:
            return found
        return self._ranked(n_src, n_tgt, first_source, checked=True)

    def _ranked(
        self, n_src: int, n_tgt: int, first_source: bool, checked: bool
    ) -> tuple[int, int, float] | None:
        """:meth:`run`'s search; with ``checked``, among feasible moves only.

        The innermost loop runs for every VM of a source and every target, thousands of times
        a plan on a large cluster: what does not depend on both is worked out before it, in
        the very same arithmetic (a float computed otherwise could tip a tie between moves).
        """
        state, order = self.state, self.order
        model = state.model
        w = model.weights
        w_cpu, w_mem = w.cpu * 100.0, w.memory * 100.0
        w_c, w_m = w.cpu, w.memory  # as ``score_with`` applies them (the source's score)
        hosts, vms, vms_on = model.hosts, model.vms, state.vms_on
        cpu_load, mem_load = state.cpu_load, state.mem_load
        moved, eligible = self.moved, self.eligible
        preferred = model.rules.preferred
        sources = order[-1 : -n_src - 1 : -1]
        top = [e[2] for e in order[-1:-4:-1]]
        bottom = [e[2] for e in order[:3]]
        mean = self.mean
        scores = self.scores
        spread, need = self.spread, self.need
        short = need - EPSILON
        ceiling = self.ceiling + EPSILON
        within = self.threshold + EPSILON
        # per target: what its score after a move needs besides the VM's own load
        targets = []
        for t_score, t_name, t in order[:n_tgt]:
            host = hosts[t]
            loaded = host.cpu_den > 0 and host.usable_memory > 0
            targets.append(
                (
                    t_score,
                    t_name,
                    t,
                    loaded,
                    cpu_load[t],
                    host.cpu_den,
                    mem_load[t],
                    host.usable_memory,
                    (t_score - mean) ** 2,
                )
            )
        best_key: RankKey | None = None
        best: tuple[int, int, float] | None = None
        for s_score, _, s in sources:
            if first_source and best is not None:
                break
            hi_rest = [x for x in top if x != s]
            lo_rest = [x for x in bottom if x != s]
            floor = s_score - need
            s_dev = (s_score - mean) ** 2
            # per target cooler than the floor (coolest first, so the rest are not): its
            # figures, the gap to the source, and the highest and lowest score of the others
            rest: list[Target] = []
            for t_score, t_name, t, loaded, t_cpu, den, t_mem, usable, t_dev in targets:
                if t_score >= floor:
                    break
                hi_other, lo_other = -math.inf, math.inf
                for x in hi_rest:  # the first not ``t`` (a loop: no generator a target)
                    if x != t:
                        hi_other = scores[x]
                        break
                for x in lo_rest:
                    if x != t:
                        lo_other = scores[x]
                        break
                gap, devs = s_score - t_score, s_dev + t_dev
                rest.append(
                    (t_name, t, loaded, t_cpu, den, t_mem, usable, gap, devs, hi_other, lo_other)
                )
            if not rest:
                continue
            k_cpu, k_mem, small = _too_small(rest, w_cpu, w_mem, s_score, short)
            t_scores = [e[0] for e in targets[: len(rest)]]
            bounds = _rank_bounds(rest, t_scores, w_cpu, w_mem, spread, mean, within)
            host = hosts[s]
            s_cpu, s_den, s_mem, s_usable = (
                cpu_load[s],
                host.cpu_den,
                mem_load[s],
                host.usable_memory,
            )
            plain = s_den > 0 and s_usable > 0
            for v in vms_on[s]:  # in any order: keys are unique, so the best is the same
                if v in moved or not eligible(v):
                    continue
                vm = vms[v]
                v_cpu, v_mem = vm.cpu_load, vm.mem_load
                # the source's score without the VM, ``score_with(s, v, -1)`` with its
                # arithmetic inline (the same operations, so the same floats)
                s_after = (
                    w_c * (100.0 * (s_cpu - v_cpu) / s_den)
                    + w_m * (100.0 * (s_mem - v_mem) / s_usable)
                    if plain
                    else state.score_with(s, v, -1)
                )
                # The gap to a target narrows by at most what the source loses plus what the
                # target gains: below ``need`` for every target, no target is worth a look.
                if (
                    s_score - s_after + v_cpu * k_cpu + v_mem * k_mem < small
                    and v_cpu >= 0.0
                    and v_mem >= 0.0
                ):
                    continue
                s_after_dev = (s_after - mean) ** 2
                # The rule-outs below compare keys at cost 1. A move of a VM no preferred rule
                # selects costs exactly 1; one of a VM some rule does may cost less (a repair)
                # and rank better than its key at cost 1, so it is ranked at its own cost.
                at_cost_1 = v not in preferred
                # No move of the VM can rank before the best so far (``_rank_bounds``); a
                # source some move of which could bring the spread within reach has no bound.
                if (
                    at_cost_1
                    and best_key is not None
                    and bounds is not None
                    and not bounds[1]
                    and v_cpu >= 0.0
                    and v_mem >= 0.0
                ):
                    least, _, a_dev, b_dev, slack = bounds
                    if best_key[0] == 0 or least > best_key[1]:
                        continue
                    if least == best_key[1]:
                        most = s_dev - s_after_dev + v_cpu * a_dev + v_mem * b_dev
                        if -(most + slack + SLACK * abs(most)) > best_key[2]:
                            continue
                for t_name, t, loaded, t_cpu, den, t_mem, usable, gap, devs, hi_x, lo_x in rest:
                    if loaded:
                        t_after = w_cpu * (t_cpu + v_cpu) / den + w_mem * (t_mem + v_mem) / usable
                    else:
                        t_after = SATURATED
                    if gap - abs(s_after - t_after) < short:
                        continue
                    hi = max(s_after, t_after, hi_x)
                    lo = min(s_after, t_after, lo_x)
                    new_spread = hi - lo
                    gain = spread - new_spread
                    if gain < -EPSILON:
                        continue
                    dev = devs - s_after_dev - (t_after - mean) ** 2
                    if dev <= EPSILON:
                        continue
                    if new_spread > ceiling:
                        continue
                    reaches = new_spread <= within
                    # ``_key`` at cost 1 (dividing by 1.0 changes no float)
                    key: RankKey = (
                        (0, 1.0, 0.0, vm.copy_bytes, vm.name, t_name)
                        if reaches
                        else (1, -round(gain / GAIN_STEP), -dev, vm.copy_bytes, vm.name, t_name)
                    )
                    if at_cost_1 and best_key is not None and key >= best_key:
                        continue
                    if checked and check_move(state, v, t) is not None:
                        continue
                    breaks, repairs = (0, 0) if at_cost_1 else preferred_delta(state, v, t)
                    if breaks or repairs:
                        cost = max(0.25, 1.0 + breaks - 0.5 * repairs)
                        key = self._key(reaches, gain, dev, cost, vm.copy_bytes, vm.name, t_name)
                    if best_key is None or key < best_key:
                        best_key, best = key, (v, t, new_spread)
        return best

    @staticmethod
    def _key(
        reaches: bool, gain: float, dev: float, cost: float, copied: int, vm: str, host: str
    ) -> RankKey:
        """Rank: a move that alone brings the spread within the threshold first (then cost,
        bytes to copy); else the largest spread reduction per cost, in steps of ``GAIN_STEP``
        points, then the largest deviation reduction per cost; bytes to copy (memory plus
        local disks) only break ties."""
        if reaches:
            return (0, cost, 0.0, copied, vm, host)
        return (1, -round(gain / cost / GAIN_STEP), -dev / cost, copied, vm, host)
