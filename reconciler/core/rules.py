"""Placement rules compiled once per plan into index sets, and per-rule domain counters.

Host rules (pin, hostAffinity, hostAntiAffinity) become a set of allowed or forbidden host
indices per rule. Group rules (antiAffinity, affinity, spread) become member lists and a
domain per host (the ``topologyKey`` value, or the host itself); a :class:`DomainCounts`
tracks how many members sit in each domain so a move is checked in constant time.

Each group rule has a *violation measure*, 0 when satisfied:

- antiAffinity: members beyond the first in each domain;
- affinity: members not on the host holding most of them;
- spread: how far ``max - min`` members per eligible domain exceeds ``maxSkew``.

A move may never raise the measure of a required rule it touches, so a satisfied rule is
never broken, and a broken one is never made worse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from reconciler.core.capacity import HostInfo, VmInfo
from reconciler.core.selectors import Index, matches
from reconciler.core.semantics import is_required, topology_domain
from reconciler.model.plan import Reason
from reconciler.model.rules import (
    AffinityRule,
    AntiAffinityRule,
    DisruptionBudgetRule,
    ExcludeRule,
    HostAffinityRule,
    HostAntiAffinityRule,
    PinRule,
    Rule,
    SpreadRule,
)

HostRuleKind = Literal["pin", "hostAffinity", "hostAntiAffinity"]
GroupKind = Literal["antiAffinity", "affinity", "spread"]

REASONS: Mapping[str, Reason] = {
    "pin": Reason.PIN,
    "hostAffinity": Reason.HOST_AFFINITY,
    "hostAntiAffinity": Reason.HOST_ANTI_AFFINITY,
    "antiAffinity": Reason.ANTI_AFFINITY,
    "affinity": Reason.AFFINITY,
    "spread": Reason.SPREAD,
}


@dataclass(frozen=True, slots=True)
class HostRule:
    name: str
    kind: HostRuleKind
    required: bool
    hosts: frozenset[int]
    allow: bool
    """True: the VM must be on one of ``hosts``; False: on none of them."""

    def permits(self, host: int) -> bool:
        return (host in self.hosts) == self.allow


@dataclass(frozen=True, slots=True)
class GroupRule:
    index: int
    name: str
    kind: GroupKind
    required: bool
    members: tuple[int, ...]
    domains: tuple[str | None, ...]
    """Domain of each host index; None = the host does not count for this rule."""
    eligible: frozenset[str]
    """Domains of hosts that may hold members (spread counts empty ones as 0)."""
    max_skew: int = 1
    topology_key: str | None = None


@dataclass(frozen=True, slots=True)
class Budget:
    name: str
    max_concurrent: int
    members: frozenset[int]


@dataclass(slots=True)
class DomainCounts:
    """Members per domain of one group rule, with the aggregates its measure needs."""

    kind: GroupKind
    max_skew: int
    total: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    hist: dict[int, int] = field(default_factory=dict)
    """count -> number of domains with that count (for max and min in O(distinct counts))."""
    excess: int = 0
    sumsq: int = 0

    def copy(self) -> DomainCounts:
        return DomainCounts(
            self.kind,
            self.max_skew,
            self.total,
            dict(self.counts),
            dict(self.hist),
            self.excess,
            self.sumsq,
        )

    def add_domain(self, domain: str) -> None:
        if domain not in self.counts:
            self.counts[domain] = 0
            self.hist[0] = self.hist.get(0, 0) + 1

    def shift(self, domain: str | None, delta: int) -> None:
        if domain is None:
            return
        old = self.counts.get(domain)
        if old is None:
            old = 0
            self.hist[0] = self.hist.get(0, 0) + 1
        new = old + delta
        self.counts[domain] = new
        left = self.hist[old] - 1
        if left:
            self.hist[old] = left
        else:
            del self.hist[old]
        self.hist[new] = self.hist.get(new, 0) + 1
        self.total += delta
        self.excess += max(0, new - 1) - max(0, old - 1)
        self.sumsq += new * new - old * old

    def measure(self) -> int:
        if self.kind == "antiAffinity":
            return self.excess
        if not self.hist:
            return 0
        if self.kind == "affinity":
            return self.total - max(self.hist)
        return max(0, max(self.hist) - min(self.hist) - self.max_skew)

    def key(self) -> tuple[int, int]:
        """Measure, then sum of squares: strictly lower after every repairing move."""
        return self.measure(), self.sumsq

    def key_if_moved(self, source: str | None, target: str | None) -> tuple[int, int]:
        """``key()`` as it would be after one member moves from ``source`` to ``target``.

        Probes in place and undoes it, cheaper than a copy on the planner's hot path.
        """
        self.shift(source, -1)
        self.shift(target, 1)
        after = self.key()
        self.shift(target, -1)
        self.shift(source, 1)
        return after

    def count(self, domain: str | None) -> int:
        return 0 if domain is None else self.counts.get(domain, 0)


@dataclass(frozen=True, slots=True)
class CompiledRules:
    host_rules: tuple[tuple[HostRule, ...], ...]
    """Per VM index: the host rules that select it."""
    groups: tuple[GroupRule, ...]
    vm_groups: tuple[tuple[int, ...], ...]
    """Per VM index: indices into ``groups`` of the group rules it is a member of."""
    excluded: Mapping[int, str]
    """VM index -> the exclude rule that names it."""
    pinned: Mapping[int, str]
    budgets: tuple[Budget, ...]
    vm_budgets: tuple[tuple[int, ...], ...]
    preferred: frozenset[int]
    """The VMs some preferred host or group rule selects (those ``preferred_delta`` looks at):
    only a move of one of them can break or repair a preferred rule, so only theirs can cost
    other than 1."""

    def allowed(self, vm: int, host: int) -> str | None:
        """The first required host rule that forbids ``host`` for ``vm``, else None."""
        for r in self.host_rules[vm]:
            if r.required and not r.permits(host):
                return r.name
        return None


def compile_rules(
    rules: Sequence[Rule],
    hosts: Sequence[HostInfo],
    vms: Sequence[VmInfo],
    vm_index: Mapping[str, int] | None = None,
) -> CompiledRules:
    """Index sets of every rule over ``hosts`` and ``vms`` (shadow sightings are no members).

    ``vm_index``: name -> index of every VM of ``vms`` that is no shadow, when the caller has
    it (the model's own), so the name index is not made again."""
    ordered = sorted(rules, key=lambda r: (r.name, r.type))
    vm_keys = {k for r in rules if r.vms.labels for k in r.vms.labels}
    vm_items = Index([v for v in vms if not v.shadow], vm_keys, vm_index)
    host_items = Index(hosts)
    cache: dict[object, object] = {}
    # Per VM, what selects it: one shared empty tuple for the many VMs no rule selects, a
    # longer tuple made for each one that some rule does (a list per VM would be 125,000
    # lists made and turned into tuples at 5,000 hosts).
    host_rules: list[tuple[HostRule, ...]] = [()] * len(vms)
    vm_groups: list[tuple[int, ...]] = [()] * len(vms)
    vm_budgets: list[tuple[int, ...]] = [()] * len(vms)
    groups: list[GroupRule] = []
    budgets: list[Budget] = []
    excluded: dict[int, str] = {}
    pinned: dict[int, str] = {}
    preferred: set[int] = set()
    for rule in ordered:
        members = sorted(vm_items.select(rule.vms))
        if isinstance(rule, PinRule | HostAffinityRule | HostAntiAffinityRule):
            hr = HostRule(
                name=rule.name,
                kind=rule.type,
                required=is_required(rule),
                hosts=host_items.select(rule.hosts),
                allow=not isinstance(rule, HostAntiAffinityRule),
            )
            for m in members:
                host_rules[m] += (hr,)
                if isinstance(rule, PinRule):
                    pinned.setdefault(m, rule.name)
            if not hr.required:
                preferred.update(members)
        elif isinstance(rule, ExcludeRule):
            for m in members:
                excluded.setdefault(m, rule.name)
        elif isinstance(rule, DisruptionBudgetRule):
            for m in members:
                vm_budgets[m] += (len(budgets),)
            budgets.append(Budget(rule.name, rule.max_concurrent, frozenset(members)))
        else:
            groups.append(_group(len(groups), rule, members, hosts, host_rules, cache))
            for m in members:
                vm_groups[m] += (groups[-1].index,)
            if not groups[-1].required:
                preferred.update(members)
    _refusals(vms, hosts, host_rules)
    return CompiledRules(
        host_rules=tuple(host_rules),
        groups=tuple(groups),
        vm_groups=tuple(vm_groups),
        excluded=excluded,
        pinned=pinned,
        budgets=tuple(budgets),
        vm_budgets=tuple(vm_budgets),
        preferred=frozenset(preferred),
    )


def _refusals(
    vms: Sequence[VmInfo], hosts: Sequence[HostInfo], host_rules: list[tuple[HostRule, ...]]
) -> None:
    """A host that would refuse a VM (observed: CPU, machine type) is a required
    anti-affinity to it, named for the refusal so the plan says why."""
    index = {h.name: h.index for h in hosts}
    for vm in vms:
        for host, why in vm.refused_by:
            if host in index:
                rule = HostRule(
                    name=f"compatibility: {host} refuses it ({why})",
                    kind="hostAntiAffinity",
                    required=True,
                    hosts=frozenset({index[host]}),
                    allow=False,
                )
                host_rules[vm.index] += (rule,)


def _group(
    index: int,
    rule: AntiAffinityRule | AffinityRule | SpreadRule,
    members: list[int],
    hosts: Sequence[HostInfo],
    host_rules: Sequence[tuple[HostRule, ...]],
    cache: dict[object, object],
) -> GroupRule:
    key = None if isinstance(rule, AffinityRule) else rule.topology_key
    spread = isinstance(rule, SpreadRule)
    domains = cache.get(("domains", key, spread))
    if not isinstance(domains, tuple):
        domains = tuple(topology_domain(h.name, h.labels, key, spread=spread) for h in hosts)
        cache["domains", key, spread] = domains
    # Members share few distinct sets of required host rules: check each set once per host.
    signatures = frozenset(tuple(r for r in host_rules[m] if r.required) for m in members)
    eligible = cache.get(("eligible", key, spread, signatures))
    if not isinstance(eligible, frozenset):
        sigs = signatures or frozenset({()})
        found: set[str] = set()
        for h in hosts:
            d = domains[h.index]
            if d is None or not h.accepts or d in found:
                continue
            if any(all(r.permits(h.index) for r in sig) for sig in sigs):
                found.add(d)
        eligible = frozenset(found)
        cache["eligible", key, spread, signatures] = eligible
    return GroupRule(
        index=index,
        name=rule.name,
        kind=rule.type,
        required=is_required(rule),
        members=tuple(members),
        domains=domains,
        eligible=eligible,
        max_skew=rule.max_skew if isinstance(rule, SpreadRule) else 1,
        topology_key=key,
    )


def new_counts(group: GroupRule, host_of: Sequence[int]) -> DomainCounts:
    """Counters of ``group`` for VMs placed as ``host_of`` (-1 = nowhere yet)."""
    dc = DomainCounts(group.kind, group.max_skew)
    if group.kind == "spread":
        for d in sorted(group.eligible):
            dc.add_domain(d)
    for m in group.members:
        dc.shift(domain_of(group, host_of[m]), 1)
    return dc


def domain_of(group: GroupRule, host: int) -> str | None:
    """The domain a member on ``host`` counts in, None when it does not count."""
    if host < 0:
        return None
    d = group.domains[host]
    if group.kind == "spread" and d not in group.eligible:
        return None
    return d


def describe_kind(kind: str) -> str:
    return {
        "antiAffinity": "anti-affinity",
        "affinity": "affinity",
        "spread": "spread",
        "pin": "pin",
        "hostAffinity": "host affinity",
        "hostAntiAffinity": "host anti-affinity",
    }.get(kind, kind)


__all__ = [
    "REASONS",
    "Budget",
    "CompiledRules",
    "DomainCounts",
    "GroupRule",
    "HostRule",
    "compile_rules",
    "describe_kind",
    "domain_of",
    "matches",
    "new_counts",
]
