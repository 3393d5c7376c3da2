"""The group-rule phase of the mandatory moves: antiAffinity, spread and affinity repairs.

antiAffinity and spread move one member at a time from a crowded domain to an empty or thin
one, each move strictly lowering the rule's (measure, sum of squares). Among the members and
targets that do, the move that best balances the architecture wins (see :func:`_ranked`): a big
member off a hot host repairs the rule and saves the balance moves that would otherwise
follow. affinity brings every member onto one host in one unit (one wave): the host already
holding most members if they fit there, else any host that takes them all.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Protocol

from reconciler.core.feasibility import Refusal, check_move, preferred_delta
from reconciler.core.rules import REASONS, GroupRule, describe_kind, domain_of
from reconciler.core.state import Model, State
from reconciler.core.steps import summarise
from reconciler.core.units import (
    Limits,
    candidate_hosts,
    check_unit,
    fixed_reason,
    unit_key,
    unit_of,
)
from reconciler.model.plan import Reason, UnsatisfiableCode


class _Moved(Protocol):
    moved: set[int]


class GroupRepairs(Protocol):
    """What the group phase needs of the mandatory planner (``mandatory.GroupRepairs``): declared
    here, so this module does not import the one that calls it."""

    state: State
    model: Model
    limits: Limits

    @property
    def out(self) -> _Moved: ...

    def name(self, v: int) -> str: ...

    def host(self, h: int) -> str: ...

    def problem(
        self,
        code: UnsatisfiableCode,
        message: str,
        vms: Iterable[int] = (),
        rule: str | None = None,
    ) -> None: ...

    def apply(self, v: int, t: int, reason: Reason, rule: str | None, detail: str) -> None: ...

    def apply_unit(
        self, unit: Sequence[int], t: int, reason: Reason, rule: str | None, detail: str
    ) -> None: ...


Code = UnsatisfiableCode
GAIN_STEP = 10.0
"""Balance gains of repairing moves this close count as equal, so the member with less memory
moves (squared score points: a quarter point moved between hosts 20 apart gains about 10)."""


def groups(p: GroupRepairs) -> None:
    scores = _Scores(p.state)
    for g in p.model.rules.groups:
        if not g.required or p.state.counts[g.index].measure() == 0:
            continue
        too_few = g.kind == "antiAffinity" and len(g.members) > len(g.eligible)
        if too_few:
            unit = "hosts" if g.topology_key is None else f"values of {g.topology_key}"
            p.problem(
                Code.TOO_FEW_HOSTS,
                f"anti-affinity {g.name} needs {len(g.members)} {unit}, "
                f"{len(g.eligible)} are eligible",
                g.members,
                g.name,
            )
        if g.kind == "affinity":
            affinity(p, g)
            scores.clear()
        else:
            repair(p, g, too_few, scores)


def _members_by_domain(state: State, g: GroupRule) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for m in g.members:
        d = domain_of(g, state.host_of[m])
        if d is not None:
            out.setdefault(d, []).append(m)
    return out


def repair(p: GroupRepairs, g: GroupRule, too_few: bool, scores: _Scores) -> None:
    """antiAffinity and spread: move members from crowded to empty or thin domains."""
    state, model = p.state, p.model
    counts = state.counts[g.index]
    reason = REASONS[g.kind]
    for _ in range(len(g.members) + 1):
        key = counts.key()
        if key[0] == 0:
            return
        by_domain = _members_by_domain(state, g)
        values = [counts.count(d) for d in g.eligible] or [0]
        if g.kind == "antiAffinity":
            sources = {d for d, ms in by_domain.items() if len(ms) > 1}
            target_count = 0
        else:
            high = max(counts.counts.values())
            sources = {d for d, ms in by_domain.items() if len(ms) == high}
            target_count = min(values)
        movers: list[int] = []
        stuck: list[int] = []
        for d in sorted(sources):
            for m in by_domain[d]:
                (stuck if fixed_reason(state, m) or m in p.out.moved else movers).append(m)
        targets = [
            h
            for h, host in enumerate(model.hosts)
            if host.accepts
            and (dom := domain_of(g, h)) is not None
            and counts.count(dom) == target_count
        ]
        # Best ranked first; only those are checked for feasibility, until one passes.
        ranked = _ranked(state, movers, targets, scores)
        heapq.heapify(ranked)
        choice: tuple[int, int] | None = None
        refusals: list[Refusal] = []
        while ranked:
            _, m, t = heapq.heappop(ranked)
            refusal = check_move(state, m, t) or _improves(state, g, m, t, key)
            if refusal is None:
                choice = m, t
                break
            refusals.append(refusal)
        if not refusals and choice is None and movers and targets:
            refusals.append(_no_target(state, g, movers))
        if choice is None:
            kind = describe_kind(g.kind)
            if not movers and stuck:
                names = ", ".join(sorted(p.name(m) for m in stuck))
                p.problem(
                    Code.UNMIGRATABLE,
                    f"{kind} {g.name} is broken and none of {names} may be moved",
                    stuck,
                    g.name,
                )
            elif not targets:
                # Every eligible domain already holds its share: too few hosts (reported).
                if not too_few:
                    p.problem(
                        Code.TOO_FEW_HOSTS,
                        f"{kind} {g.name} is broken and every eligible host already holds "
                        "its share of members",
                        movers + stuck,
                        g.name,
                    )
            else:
                p.problem(
                    Code.NO_FEASIBLE_HOST,
                    f"{kind} {g.name} is broken and no move repairs it: {summarise(refusals)}",
                    movers + stuck,
                    g.name,
                )
            return
        m, t = choice
        s = state.host_of[m]
        d_from, d_to = domain_of(g, s), domain_of(g, t)
        effect = (
            f"{p.host(s)} scores {state.score(s):.1f} -> {state.score_with(s, m, -1):.1f}, "
            f"{p.host(t)} {state.score(t):.1f} -> {state.score_with(t, m, 1):.1f}"
        )
        if g.kind == "antiAffinity":
            where = p.host(s) if g.topology_key is None else f"{d_from}"
            to = p.host(t) if g.topology_key is None else f"{p.host(t)} ({d_to})"
            detail = (
                f"anti-affinity {g.name}: {p.name(m)} shares {where} with another "
                f"member; {to} holds none ({effect})."
            )
        else:
            detail = (
                f"spread {g.name}: {d_from} holds {counts.count(d_from)} members and "
                f"{d_to} {counts.count(d_to)} (maxSkew {g.max_skew}); "
                f"{p.name(m)} moves to {p.host(t)} ({effect})."
            )
        scores.moving(m, t)
        p.apply(m, t, reason, g.name, detail)


def affinity(p: GroupRepairs, g: GroupRule) -> None:
    """Bring all members of ``g`` onto one host in one unit: a host holding most of them
    first (least memory to move, then least loaded), then any other host that takes them."""
    state, model = p.state, p.model
    by_host: dict[int, list[int]] = {}
    for m in g.members:
        by_host.setdefault(state.host_of[m], []).append(m)
    fixed_hosts = {h for h, ms in by_host.items() if any(fixed_reason(state, m) for m in ms)}
    if len(fixed_hosts) > 1:
        names = ", ".join(sorted(p.host(h) for h in fixed_hosts))
        p.problem(
            Code.UNMIGRATABLE,
            f"affinity {g.name} needs its members on one host, but members that may not "
            f"move run on {names}",
            g.members,
            g.name,
        )
        return
    vms = model.vms

    def memory_to_move(h: int) -> int:
        return sum(vms[m].memory for m in g.members if m not in by_host.get(h, ()))

    holding = sorted(
        (h for h in by_host if h >= 0),
        key=lambda h: (-len(by_host[h]), memory_to_move(h), state.score(h), p.host(h)),
    )
    if fixed_hosts:
        options = sorted(fixed_hosts)
    else:
        arch = {model.arch_of(h) for h in holding}
        others = [h for a in sorted(arch) for h in model.arches.get(a, ()) if h not in by_host]
        others.sort(key=lambda h: unit_key(state, g.members, h))
        options = holding + others
    last = "no host holds a member"
    for h in options:
        # Whole units: a member's partners of other required affinities on its host go too.
        movers = tuple(
            sorted({u for m in g.members if state.host_of[m] != h for u in unit_of(state, m)})
        )
        blocked = [m for m in movers if m in p.out.moved or fixed_reason(state, m)]
        if blocked:
            last = f"{p.name(blocked[0])} may not move"
            continue
        refusal = check_unit(state, movers, h, p.limits)
        if refusal is None:
            p.apply_unit(
                movers,
                h,
                Reason.AFFINITY,
                g.name,
                f"affinity {g.name} keeps its members together on {p.host(h)}.",
            )
            return
        if h in by_host:
            last = refusal.text
    p.problem(
        Code.NO_FEASIBLE_HOST,
        f"affinity {g.name} is broken and its members cannot be brought together: {last}",
        g.members,
        g.name,
    )


RepairKey = tuple[int, int, int, int, int, str, str]


class _Scores:
    """Host scores and their mean per architecture (hosts that take VMs), kept current as
    repairs move VMs, so a repair does not score every host again."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.scores: dict[int, float] = {}
        self.sums: dict[str, float] = {}
        self.hosts: dict[str, frozenset[int]] = {}

    def score(self, h: int) -> float:
        found = self.scores.get(h)
        if found is None:
            found = self.scores[h] = self.state.score(h)
        return found

    def mean(self, arch: str) -> float:
        hosts = self.state.model.arches.get(arch, ())
        if not hosts:
            return 0.0
        if arch not in self.sums:
            self.sums[arch] = sum(self.score(h) for h in hosts)
            self.hosts[arch] = frozenset(hosts)
        return self.sums[arch] / len(hosts)

    def moving(self, v: int, t: int) -> None:
        """Before VM ``v`` moves to ``t``."""
        state = self.state
        s = state.host_of[v]
        arch = state.model.arch_of(s)
        for h, sign in ((s, -1), (t, 1)):
            after = state.score_with(h, v, sign)
            if arch in self.sums and h in self.hosts[arch]:
                self.sums[arch] += after - self.score(h)
            self.scores[h] = after

    def clear(self) -> None:
        self.scores.clear()
        self.sums.clear()


def _ranked(
    state: State, movers: list[int], targets: list[int], scores: _Scores
) -> list[tuple[RepairKey, int, int]]:
    """Every (member, target) pair a repair may try, with its rank, feasibility unchecked.

    Fewest preferred rules broken, most repaired; then, for a source scoring above its
    architecture's mean, the largest balance gain: how much the move lowers the squared
    deviations of its two hosts' scores from the mean. A big member off a hot host to a cold
    one repairs and balances at once, where the smallest member first leaves the hot host to
    more balance moves. A source at or below the mean gains nothing by giving load away (it
    would spend a cold host's room the hot hosts need), so its smallest member goes, to the
    target that balances best. Gains count in steps of ``GAIN_STEP``; memory, then names,
    break ties.
    """
    model = state.model
    hosts = model.hosts
    w = model.weights
    rules = model.rules
    out: list[tuple[RepairKey, int, int]] = []
    for m in movers:
        s = state.host_of[m]
        mean = scores.mean(model.arch_of(s))
        vm = model.vms[m]
        hot = scores.score(s) > mean
        source = (scores.score(s) - mean) ** 2 - (state.score_with(s, m, -1) - mean) ** 2
        preferred = any(not r.required for r in rules.host_rules[m]) or any(
            not rules.groups[gi].required for gi in rules.vm_groups[m]
        )
        breaks = repairs = 0
        allowed = set(candidate_hosts(state, m))
        for t in targets:
            if t not in allowed:
                continue
            host = hosts[t]
            if host.cpu_den > 0 and host.usable_memory > 0:  # score_with, inlined: hot path
                after = w.cpu * (100.0 * (state.cpu_load[t] + vm.cpu_load) / host.cpu_den) + (
                    w.memory * (100.0 * (state.mem_load[t] + vm.mem_load) / host.usable_memory)
                )
            else:
                after = state.score_with(t, m, 1)
            gain = source + (scores.score(t) - mean) ** 2 - (after - mean) ** 2
            useful = gain if hot else min(gain, 0.0)
            if preferred:
                breaks, repairs = preferred_delta(state, m, t)
            key = (
                breaks,
                -repairs,
                -round(useful / GAIN_STEP),
                vm.memory,
                -round(gain / GAIN_STEP),
                vm.name,
                host.name,
            )
            out.append((key, m, t))
    return out


def _no_target(state: State, g: GroupRule, movers: list[int]) -> Refusal:
    """Why no move was tried: no host the movers may use lies in a domain that repairs."""
    arch = "/".join(sorted({state.model.arch_of(state.host_of[m]) for m in movers}))
    if g.kind == "spread":
        where = f"is on a {g.topology_key or 'host'} with the fewest members"
        text = f"no {arch} host they may use {where}"
    elif g.topology_key is None:
        text = f"every {arch} host they may use holds a member"
    else:
        text = f"every {arch} host they may use is on a {g.topology_key} holding a member"
    return Refusal(f"rule {g.name}", text)


def _improves(state: State, g: GroupRule, m: int, t: int, key: tuple[int, int]) -> Refusal | None:
    """Accept ``t`` only when moving ``m`` there strictly lowers ``g``'s (measure, sumsq)."""
    dc = state.counts[g.index]
    a, b = domain_of(g, state.host_of[m]), domain_of(g, t)
    if dc.key_if_moved(a, b) < key:
        return None
    return Refusal(
        f"rule {g.name}", f"moving it to {state.model.hosts[t].name} does not repair {g.name}"
    )
