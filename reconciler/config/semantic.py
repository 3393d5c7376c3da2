"""Checks across the documents of one cluster: what each model alone cannot see.

Pure functions: models and the positions of their documents in, findings out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from reconciler.config.findings import Finding, Severity, finding_at
from reconciler.config.selectors import (
    KnownVms,
    covers,
    hosts_matching,
    is_glob,
    known_members,
    known_vm_names,
    literal_members,
    unknown_host_hint,
)
from reconciler.config.yaml_source import DocPath, Document
from reconciler.core.semantics import is_required, topology_domain
from reconciler.model.cluster import Host
from reconciler.model.desired import DesiredState
from reconciler.model.rules import (
    AffinityRule,
    AntiAffinityRule,
    HostAffinityRule,
    HostAntiAffinityRule,
    PinRule,
    Selector,
)

R = TypeVar("R")

_PREFERRED_HINT = "or make the rule enforcement: preferred"


@dataclass(frozen=True)
class Sources:
    """The document each kind was read from; None for a kind the folder does not have."""

    cluster: Document
    rules: Document | None = None
    placement: Document | None = None
    policy: Document | None = None
    rollouts: tuple[Document, ...] = ()
    """The document of each rollout, in the order of ``DesiredState.rollouts``."""


def _rule_path(i: int, *rest: str | int) -> DocPath:
    return ("spec", "rules", i, *rest)


def _labels_text(labels: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in labels.items())


def _indexed(desired: DesiredState, kind: type[R]) -> list[tuple[int, R]]:
    """The rules of one type, with their index in ``spec.rules``."""
    return [(i, r) for i, r in enumerate(desired.rules.spec.rules) if isinstance(r, kind)]


def _domain(host: Host, key: str | None) -> str:
    """The antiAffinity domain of ``host``, as the planner counts it (never None there)."""
    return topology_domain(host.name, host.labels, key) or host.name


def _domain_text(domain: str, key: str | None) -> str:
    """``kvm-03``, ``rack=r1``, or ``kvm-03 (no rack label: its own domain)``."""
    if key is not None and domain.startswith("host="):
        return f"{domain.removeprefix('host=')} (it has no {key} label, so it is its own domain)"
    return domain


# --- Cluster ---------------------------------------------------------------------------------


def duplicate_host_findings(desired: DesiredState, src: Sources) -> list[Finding]:
    """Two hosts with one name, or one libvirt URI."""
    out = []
    names: dict[str, int] = {}
    uris: dict[str, str] = {}
    for i, host in enumerate(desired.cluster.spec.hosts):
        if host.name in names:
            out.append(
                finding_at(
                    src.cluster,
                    ("spec", "hosts", i, "name"),
                    Severity.ERROR,
                    f"duplicate host name {host.name!r} (also spec.hosts[{names[host.name]}])",
                    "give every host its own name",
                )
            )
        names.setdefault(host.name, i)
        if host.uri in uris:
            out.append(
                finding_at(
                    src.cluster,
                    ("spec", "hosts", i, "uri"),
                    Severity.ERROR,
                    f"duplicate uri {host.uri!r} (also host {uris[host.uri]})",
                    "every host needs its own libvirt URI",
                )
            )
        uris.setdefault(host.uri, host.name)
    return out


# --- Rules -----------------------------------------------------------------------------------


def duplicate_rule_findings(desired: DesiredState, src: Sources) -> list[Finding]:
    """Two rules with one name."""
    out = []
    seen: dict[str, int] = {}
    for i, rule in enumerate(desired.rules.spec.rules):
        if rule.name in seen:
            out.append(
                finding_at(
                    src.rules,
                    _rule_path(i, "name"),
                    Severity.ERROR,
                    f"duplicate rule name {rule.name!r} (also spec.rules[{seen[rule.name]}])",
                    "give every rule its own name",
                )
            )
        seen.setdefault(rule.name, i)
    return out


HostRule = HostAffinityRule | HostAntiAffinityRule | PinRule
_HOST_RULES: dict[int, tuple[DesiredState, list[tuple[int, HostRule]]]] = {}


def _host_rules(desired: DesiredState) -> list[tuple[int, HostRule]]:
    """The host rules with their index; worked out once per desired state (asked per rule)."""
    entry = _HOST_RULES.get(id(desired))
    if entry is not None and entry[0] is desired:
        return entry[1]
    rules = [
        (i, r)
        for i, r in enumerate(desired.rules.spec.rules)
        if isinstance(r, HostAffinityRule | HostAntiAffinityRule | PinRule)
    ]
    _HOST_RULES.clear()  # one desired state at a time is validated
    _HOST_RULES[id(desired)] = (desired, rules)
    return rules


def _names_exist(selector: Selector, hosts: list[Host]) -> bool:
    return all(hosts_matching(Selector(names=[n]), hosts) for n in selector.names or ())


def host_selector_findings(desired: DesiredState, src: Sources) -> list[Finding]:
    """Host names that match no host (error); host labels that match no host (warning)."""
    hosts = desired.cluster.spec.hosts
    out = []
    for i, rule in _host_rules(desired):
        for j, name in enumerate(rule.hosts.names or ()):
            if hosts_matching(Selector(names=[name]), hosts):
                continue
            message = (
                f"no host matches {name!r}" if is_glob(name) else f"host {name!r} does not exist"
            )
            out.append(
                finding_at(
                    src.rules,
                    _rule_path(i, "hosts", "names", j),
                    Severity.ERROR,
                    message,
                    unknown_host_hint(name, hosts),
                )
            )
        leaves_none = isinstance(rule, HostAffinityRule) and is_required(rule)
        labels = rule.hosts.labels
        if (
            labels is not None
            and not leaves_none
            and _names_exist(rule.hosts, hosts)
            and not hosts_matching(rule.hosts, hosts)
        ):
            among = " among the named hosts" if rule.hosts.names else ""
            out.append(
                finding_at(
                    src.rules,
                    _rule_path(i, "hosts", "labels"),
                    Severity.WARNING,
                    f"no host has the labels {_labels_text(labels)}{among}, so {rule.name} "
                    "selects no host",
                    "add the labels to a host in the Cluster, or fix the selector",
                )
            )
    return out


_NARROWING: dict[int, tuple[DesiredState, list[HostAffinityRule | HostAntiAffinityRule]]] = {}


def _narrowing_rules(desired: DesiredState) -> list[HostAffinityRule | HostAntiAffinityRule]:
    """The required hostAffinity and hostAntiAffinity rules, worked out once per state."""
    entry = _NARROWING.get(id(desired))
    if entry is not None and entry[0] is desired:
        return entry[1]
    rules = [
        r
        for _, r in _host_rules(desired)
        if isinstance(r, HostAffinityRule | HostAntiAffinityRule) and is_required(r)
    ]
    _NARROWING.clear()
    _NARROWING[id(desired)] = (desired, rules)
    return rules


_KNOWN: dict[tuple[int, str], tuple[DesiredState, KnownVms]] = {}


def _cached_known(desired: DesiredState, what: str) -> KnownVms:
    """An index of VM names, built once per desired state: it is asked about every rule."""
    entry = _KNOWN.get((id(desired), what))
    if entry is not None and entry[0] is desired:
        return entry[1]
    if any(d is not desired for d, _ in _KNOWN.values()):
        _KNOWN.clear()
    names = known_vm_names(desired) if what == "known" else desired.placement.spec.vms
    known = KnownVms(names)
    _KNOWN[id(desired), what] = (desired, known)
    return known


def _known(desired: DesiredState) -> KnownVms:
    """The VMs named literally in the rules or the placement."""
    return _cached_known(desired, "known")


def _placed(desired: DesiredState) -> KnownVms:
    """The VMs the placement lists, in its order."""
    return _cached_known(desired, "placed")


_AVAILABLE: dict[int, tuple[DesiredState, list[Host]]] = {}


def _available(desired: DesiredState) -> list[Host]:
    """The hosts not in maintenance, worked out once per desired state."""
    entry = _AVAILABLE.get(id(desired))
    if entry is not None and entry[0] is desired:
        return entry[1]
    hosts = [h for h in desired.cluster.spec.hosts if not h.maintenance]
    _AVAILABLE.clear()
    _AVAILABLE[id(desired)] = (desired, hosts)
    return hosts


def eligible_hosts(desired: DesiredState, vms: Selector) -> list[Host]:
    """Hosts not in maintenance that every required host rule covering ``vms`` allows."""
    every = desired.cluster.spec.hosts
    hosts = _available(desired)  # returned as is when no host rule narrows it
    for rule in _narrowing_rules(desired):
        if not covers(rule.vms, vms):
            continue
        picked = {h.name for h in hosts_matching(rule.hosts, every)}
        keep = isinstance(rule, HostAffinityRule)
        hosts = [h for h in hosts if (h.name in picked) == keep]
    return hosts


def _why_not(desired: DesiredState, host: Host, vms: Selector) -> str:
    if host.maintenance:
        return f"{host.name} is in maintenance"
    for _, rule in _host_rules(desired):
        if isinstance(rule, PinRule) or not is_required(rule) or not covers(rule.vms, vms):
            continue
        picked = bool(hosts_matching(rule.hosts, [host]))
        if isinstance(rule, HostAntiAffinityRule) and picked:
            return f"{host.name} is excluded by hostAntiAffinity {rule.name}"
        if isinstance(rule, HostAffinityRule) and not picked:
            return f"{host.name} is not allowed by hostAffinity {rule.name}"
    return f"{host.name} is not allowed"


def host_affinity_findings(desired: DesiredState, src: Sources) -> list[Finding]:
    """A required hostAffinity that leaves its VMs no host."""
    hosts = desired.cluster.spec.hosts
    out = []
    for i, rule in _indexed(desired, HostAffinityRule):
        if not is_required(rule) or not _names_exist(rule.hosts, hosts):
            continue
        if eligible_hosts(desired, rule.vms):
            continue
        selected = hosts_matching(rule.hosts, hosts)
        reasons = [_why_not(desired, h, rule.vms) for h in selected] or [
            "its hosts selector matches no host"
        ]
        out.append(
            finding_at(
                src.rules,
                _rule_path(i, "hosts"),
                Severity.ERROR,
                f"hostAffinity {rule.name} leaves no host: {'; '.join(reasons)}",
                f"select more hosts, end a maintenance, {_PREFERRED_HINT}",
            )
        )
    return out


def _pin_target(rule: PinRule, hosts: list[Host]) -> Host | None:
    picked = hosts_matching(rule.hosts, hosts)
    return picked[0] if len(picked) == 1 else None


def pin_findings(desired: DesiredState, src: Sources) -> list[Finding]:
    """Pins to several hosts, to a host in maintenance, against host rules, or in pairs."""
    hosts = desired.cluster.spec.hosts
    known = _known(desired)
    out = []
    pinned: dict[str, tuple[str, str]] = {}
    for i, rule in _indexed(desired, PinRule):
        if not _names_exist(rule.hosts, hosts):
            continue
        picked = hosts_matching(rule.hosts, hosts)
        if len(picked) > 1:
            out.append(
                finding_at(
                    src.rules,
                    _rule_path(i, "hosts"),
                    Severity.ERROR,
                    f"pin {rule.name} selects {len(picked)} hosts "
                    f"({', '.join(h.name for h in picked)}); a pin needs exactly one",
                    "name a single host in hosts.names",
                )
            )
            continue
        target = _pin_target(rule, hosts)
        if target is None:
            continue
        if target.maintenance:
            out.append(
                finding_at(
                    src.rules,
                    _rule_path(i, "hosts"),
                    Severity.ERROR,
                    f"pin {rule.name} pins to {target.name}, which is in maintenance",
                    f"pin to another host, or set maintenance: false on {target.name}",
                )
            )
        elif target.name not in {h.name for h in eligible_hosts(desired, rule.vms)}:
            out.append(
                finding_at(
                    src.rules,
                    _rule_path(i, "hosts"),
                    Severity.ERROR,
                    f"pin {rule.name} pins to {target.name}, but "
                    f"{_why_not(desired, target, rule.vms)}",
                    "pin to a host the host rules allow, or change one of the rules",
                )
            )
        for vm in sorted(known_members(rule.vms, known) or ()):
            other = pinned.setdefault(vm, (rule.name, target.name))
            if other[1] != target.name:
                out.append(
                    finding_at(
                        src.rules,
                        _rule_path(i, "vms"),
                        Severity.ERROR,
                        f"{vm} is pinned to {other[1]} by {other[0]} and to {target.name} "
                        f"by {rule.name}",
                        "keep only one of the two pins for this VM",
                    )
                )
    return out


def anti_affinity_capacity_findings(desired: DesiredState, src: Sources) -> list[Finding]:
    """A required antiAffinity with more (literally named) VMs than hosts it may use."""
    out = []
    rooms: dict[tuple[int, str | None], int] = {}  # most rules share the eligible list
    for i, rule in _indexed(desired, AntiAffinityRule):
        members = literal_members(rule.vms)
        if not is_required(rule) or members is None:
            continue
        eligible = eligible_hosts(desired, rule.vms)
        key = rule.topology_key
        room = rooms.get((id(eligible), key))
        if room is None:
            room = len({_domain(h, key) for h in eligible})
            if eligible is _available(desired):
                rooms[id(eligible), key] = room
        if key is None:
            what = f"{len(members)} hosts"
            have = f"{room} {'is' if room == 1 else 'are'} eligible"
        else:
            what = f"{len(members)} topology domains (values of host label {key}; a host "
            what += "without it is a domain of its own)"
            have = f"eligible hosts make {room}"
        if len(members) > room:
            out.append(
                finding_at(
                    src.rules,
                    _rule_path(i, "vms"),
                    Severity.ERROR,
                    f"antiAffinity {rule.name} needs {what} for its {len(members)} VMs, {have}",
                    f"add hosts, end a maintenance, take VMs out of the rule, {_PREFERRED_HINT}",
                )
            )
    return out


def affinity_conflict_findings(desired: DesiredState, src: Sources) -> list[Finding]:
    """Two VMs that a required affinity keeps together and a required antiAffinity apart."""
    known = _known(desired)
    out = []
    for ia, a in _indexed(desired, AffinityRule):
        for ib, b in _indexed(desired, AntiAffinityRule):
            if not (is_required(a) and is_required(b)):
                continue
            ma, mb = known_members(a.vms, known), known_members(b.vms, known)
            both = sorted(ma & mb) if ma is not None and mb is not None else []
            if len(both) >= 2:
                pair = f"{both[0]} and {both[1]}"
            elif a.vms == b.vms:
                pair = "the same VMs"
            else:
                continue
            out.append(
                finding_at(
                    src.rules,
                    _rule_path(max(ia, ib), "vms"),
                    Severity.ERROR,
                    f"{pair} must share a host by affinity {a.name} and be apart by "
                    f"antiAffinity {b.name}",
                    f"take the VMs out of one of the two rules, {_PREFERRED_HINT}",
                )
            )
    return out


# --- Placement -------------------------------------------------------------------------------


HostRuleOfVm = tuple[HostAffinityRule | HostAntiAffinityRule | PinRule, list[str]]


def _required_host_rules_of(desired: DesiredState) -> dict[str, list[HostRuleOfVm]]:
    """Placed VM -> the required host rules that surely select it, in rule order, each with
    the names of the hosts it selects."""
    placed = _placed(desired)
    hosts = desired.cluster.spec.hosts
    out: dict[str, list[HostRuleOfVm]] = {}
    for _, rule in _host_rules(desired):
        if not is_required(rule):
            continue
        vms = placed.surely_selected(rule.vms)
        if vms:
            names = [h.name for h in hosts_matching(rule.hosts, hosts)]
            for vm in vms:
                out.setdefault(vm, []).append((rule, names))
    return out


def _placement_conflict(vm: str, host: Host, rules: list[HostRuleOfVm]) -> tuple[str, str] | None:
    """(message, hint) when one of the required host ``rules`` of ``vm`` forbids ``host``."""
    for rule, names in rules:
        if isinstance(rule, PinRule) and len(names) == 1 and names[0] != host.name:
            return (
                f"{vm} is placed on {host.name} but pin {rule.name} pins it to {names[0]}",
                f"write {vm}: {names[0]}, or change the pin",
            )
        if isinstance(rule, HostAffinityRule) and host.name not in names:
            return (
                f"{vm} is placed on {host.name}, which hostAffinity {rule.name} does not allow",
                f"use one of {', '.join(names) or 'the hosts it selects'}",
            )
        if isinstance(rule, HostAntiAffinityRule) and host.name in names:
            return (
                f"{vm} is placed on {host.name}, which hostAntiAffinity {rule.name} forbids",
                "place it on another host",
            )
    return None


def placement_findings(desired: DesiredState, src: Sources) -> list[Finding]:
    """Placement to hosts that do not exist, are in maintenance, or that a rule forbids."""
    by_name = {h.name: h for h in desired.cluster.spec.hosts}
    rules_of = _required_host_rules_of(desired)
    out = []
    for vm, host_name in desired.placement.spec.vms.items():
        path: DocPath = ("spec", "vms", vm)
        host = by_name.get(host_name)
        if host is None:
            out.append(
                finding_at(
                    src.placement,
                    path,
                    Severity.ERROR,
                    f"host {host_name!r} does not exist",
                    unknown_host_hint(host_name, desired.cluster.spec.hosts),
                )
            )
            continue
        conflict = _placement_conflict(vm, host, rules_of.get(vm, []))
        if conflict is not None:
            out.append(finding_at(src.placement, path, Severity.ERROR, *conflict))
        elif host.maintenance:
            out.append(
                finding_at(
                    src.placement,
                    path,
                    Severity.WARNING,
                    f"{vm} is placed on {host_name}, which is in maintenance",
                    "place it on another host; VMs are moved off hosts in maintenance",
                )
            )
    out.extend(_placed_together_findings(desired, src))
    return out


def _placed_together_findings(desired: DesiredState, src: Sources) -> list[Finding]:
    by_name = {h.name: h for h in desired.cluster.spec.hosts}
    placed = {vm: by_name[h] for vm, h in desired.placement.spec.vms.items() if h in by_name}
    known = _placed(desired) if len(placed) == len(desired.placement.spec.vms) else KnownVms(placed)
    out = []
    for _, rule in _indexed(desired, AntiAffinityRule):
        if not is_required(rule):
            continue
        key = rule.topology_key
        seen: dict[str, str] = {}
        for vm in known.surely_selected(rule.vms):
            host = placed[vm]
            domain = _domain(host, key)
            if domain in seen:
                where = _domain_text(domain, key)
                out.append(
                    finding_at(
                        src.placement,
                        ("spec", "vms", vm),
                        Severity.ERROR,
                        f"{seen[domain]} and {vm} are both placed on {where}, but antiAffinity "
                        f"{rule.name} keeps them apart",
                        "place one of them elsewhere",
                    )
                )
            seen.setdefault(domain, vm)
    for _, affinity in _indexed(desired, AffinityRule):
        if not is_required(affinity):
            continue
        together = [(vm, placed[vm]) for vm in known.surely_selected(affinity.vms)]
        first = together[0] if together else None
        for vm, host in together[1:]:
            if first is not None and host.name != first[1].name:
                out.append(
                    finding_at(
                        src.placement,
                        ("spec", "vms", vm),
                        Severity.ERROR,
                        f"{vm} is placed on {host.name} and {first[0]} on {first[1].name}, but "
                        f"affinity {affinity.name} keeps them on one host",
                        "place them on the same host",
                    )
                )
    return out


CHECKS: tuple[Callable[[DesiredState, Sources], list[Finding]], ...] = (
    duplicate_host_findings,
    duplicate_rule_findings,
    host_selector_findings,
    host_affinity_findings,
    pin_findings,
    anti_affinity_capacity_findings,
    affinity_conflict_findings,
    placement_findings,
)


def semantic_findings(desired: DesiredState, src: Sources) -> list[Finding]:
    """Every cross-document problem of one cluster."""
    from reconciler.config.load_checks import load_findings
    from reconciler.config.recovery_checks import recovery_findings

    found = [finding for check in CHECKS for finding in check(desired, src)]
    found += load_findings(desired.policy.spec, src.policy)
    found += recovery_findings(desired, src.policy)
    if desired.rollouts:  # the rollout steps' modules: only for a cluster that has rollouts
        from reconciler.config.rollout_checks import rollout_findings

        found += rollout_findings(desired, src.rollouts)
    return found
