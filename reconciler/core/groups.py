"""The group-rule phase of the mandatory moves: antiAffinity, spread and affinity repairs.

antiAffinity and spread move one member at a time from a crowded domain to an empty or thin
one, each move strictly lowering the rule's (measure, sum of squares). Among the members and
targets that do, the move that best balances the architecture wins (see :func:`_rank`): a big
member off a hot host repairs the rule and saves the balance moves that would otherwise
follow. affinity brings every member onto one host in one unit (one wave): the host already
holding most members if they fit there, else any host that takes them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reconciler.core.feasibility import Refusal, check_move, preferred_delta
from reconciler.core.rules import REASONS, GroupRule, describe_kind, domain_of
from reconciler.core.state import State
from reconciler.core.steps import summarise
from reconciler.core.units import (
    candidate_hosts,
    check_unit,
    fixed_reason,
    unit_key,
    unit_of,
)
from reconciler.model.plan import Reason, UnsatisfiableCode

if TYPE_CHECKING:
    from reconciler.core.mandatory import _Planner

Code = UnsatisfiableCode
GAIN_STEP = 10.0
"""Balance gains of repairing moves this close count as equal, so the member with less memory
moves (squared score points: a quarter point moved between hosts 20 apart gains about 10)."""


def groups(p: _Planner) -> None:
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
        else:
            repair(p, g, too_few)


def _members_by_domain(state: State, g: GroupRule) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for m in g.members:
        d = domain_of(g, state.host_of[m])
        if d is not None:
            out.setdefault(d, []).append(m)
    return out


def repair(p: _Planner, g: GroupRule, too_few: bool) -> None:
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
            for h in range(len(model.hosts))
            if model.hosts[h].accepts
            and counts.count(domain_of(g, h)) == target_count
            and domain_of(g, h) is not None
        ]
        best: RepairKey | None = None
        choice: tuple[int, int] | None = None
        refusals: list[Refusal] = []
        means: dict[str, float] = {}
        for m in movers:
            allowed = set(candidate_hosts(state, m))
            arch = model.arch_of(state.host_of[m])
            if arch not in means:
                means[arch] = _mean_score(state, arch)
            for t in targets:
                if t not in allowed:
                    continue
                refusal = check_move(state, m, t) or _improves(state, g, m, t, key)
                if refusal is not None:
                    refusals.append(refusal)
                    continue
                cand = _rank(state, m, t, means[arch])
                if best is None or cand < best:
                    best, choice = cand, (m, t)
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
        scores = (
            f"{p.host(s)} scores {state.score(s):.1f} -> {state.score_with(s, m, -1):.1f}, "
            f"{p.host(t)} {state.score(t):.1f} -> {state.score_with(t, m, 1):.1f}"
        )
        if g.kind == "antiAffinity":
            where = p.host(s) if g.topology_key is None else f"{d_from}"
            to = p.host(t) if g.topology_key is None else f"{p.host(t)} ({d_to})"
            detail = (
                f"anti-affinity {g.name}: {p.name(m)} shares {where} with another "
                f"member; {to} holds none ({scores})."
            )
        else:
            detail = (
                f"spread {g.name}: {d_from} holds {counts.count(d_from)} members and "
                f"{d_to} {counts.count(d_to)} (maxSkew {g.max_skew}); "
                f"{p.name(m)} moves to {p.host(t)} ({scores})."
            )
        p.apply(m, t, reason, g.name, detail)


def affinity(p: _Planner, g: GroupRule) -> None:
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


def _mean_score(state: State, arch: str) -> float:
    hosts = state.model.arches.get(arch, ())
    return sum(state.score(h) for h in hosts) / len(hosts) if hosts else 0.0


def _balance_gain(state: State, v: int, t: int, mean: float) -> float:
    """How much moving ``v`` to ``t`` lowers the squared deviations of its source's and
    ``t``'s scores from ``mean`` (negative: the move unbalances them)."""
    s = state.host_of[v]
    before = (state.score(s) - mean) ** 2 + (state.score(t) - mean) ** 2
    after = (state.score_with(s, v, -1) - mean) ** 2 + (state.score_with(t, v, 1) - mean) ** 2
    return before - after


def _rank(state: State, v: int, t: int, mean: float) -> RepairKey:
    """Rank of a move of member ``v`` to ``t`` that repairs its rule.

    Fewest preferred rules broken, most repaired; then, for a source scoring above its
    architecture's ``mean``, the largest balance gain: a big member off a hot host to a cold
    one repairs and balances at once, where the smallest member first leaves the hot host to
    more balance moves. A source at or below the mean gains nothing by giving load away (it
    would spend a cold host's room the hot hosts need), so its smallest member goes, to the
    target that balances best. Gains count in steps of ``GAIN_STEP``; memory, then names,
    break ties.
    """
    breaks, repairs = preferred_delta(state, v, t)
    gain = _balance_gain(state, v, t, mean)
    useful = gain if state.score(state.host_of[v]) > mean else min(gain, 0.0)
    model = state.model
    vm = model.vms[v]
    return (
        breaks,
        -repairs,
        -round(useful / GAIN_STEP),
        vm.memory,
        -round(gain / GAIN_STEP),
        vm.name,
        model.hosts[t].name,
    )


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
