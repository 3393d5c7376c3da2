"""The group-rule phase of the mandatory moves: antiAffinity, spread and affinity repairs.

antiAffinity and spread move one member at a time from a crowded domain to an empty or thin
one, each move strictly lowering the rule's (measure, sum of squares). affinity brings every
member onto one host in one unit (one wave): the host already holding most members if they
fit there, else any host that takes them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reconciler.core.feasibility import Refusal, preferred_delta
from reconciler.core.rules import REASONS, GroupRule, describe_kind, domain_of
from reconciler.core.state import State
from reconciler.core.steps import summarise
from reconciler.core.units import (
    best_target,
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
        best: tuple[int, int, int, float, str, str] | None = None
        choice: tuple[int, int] | None = None
        refusals: list[Refusal] = []
        for m in movers:
            allowed = set(candidate_hosts(state, m))

            def improves(t: int, m: int = m, key: tuple[int, int] = key) -> Refusal | None:
                return _improves(state, g, m, t, key)

            t, refs = best_target(state, m, [h for h in targets if h in allowed], improves)
            refusals.extend(refs)
            if t is None:
                continue
            breaks, repairs = preferred_delta(state, m, t)
            cand = (
                breaks,
                -repairs,
                model.vms[m].memory,
                state.score_with(t, m, 1),
                p.name(m),
                p.host(t),
            )
            if best is None or cand < best:
                best, choice = cand, (m, t)
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
        if g.kind == "antiAffinity":
            where = p.host(s) if g.topology_key is None else f"{d_from}"
            to = p.host(t) if g.topology_key is None else f"{p.host(t)} ({d_to})"
            detail = (
                f"anti-affinity {g.name}: {p.name(m)} shares {where} with another "
                f"member; {to} holds none."
            )
        else:
            detail = (
                f"spread {g.name}: {d_from} holds {counts.count(d_from)} members and "
                f"{d_to} {counts.count(d_to)} (maxSkew {g.max_skew}); "
                f"{p.name(m)} moves to {p.host(t)}."
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


def _improves(state: State, g: GroupRule, m: int, t: int, key: tuple[int, int]) -> Refusal | None:
    """Accept ``t`` only when moving ``m`` there strictly lowers ``g``'s (measure, sumsq)."""
    dc = state.counts[g.index]
    a, b = domain_of(g, state.host_of[m]), domain_of(g, t)
    if dc.key_if_moved(a, b) < key:
        return None
    return Refusal(
        f"rule {g.name}", f"moving it to {state.model.hosts[t].name} does not repair {g.name}"
    )
