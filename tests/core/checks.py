"""An independent reading of the contract, to check plans against (not the planner's code)."""

from __future__ import annotations

from fnmatch import fnmatchcase

from reconciler.model.cluster import effective_reserve
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Move
from reconciler.model.rules import (
    AffinityRule,
    AntiAffinityRule,
    DisruptionBudgetRule,
    Enforcement,
    ExcludeRule,
    HostAffinityRule,
    HostAntiAffinityRule,
    PinRule,
    Selector,
)
from reconciler.model.snapshot import Snapshot, VmRunState, VmState


def selects(sel: Selector, name: str, labels: dict[str, str]) -> bool:
    if sel.names is not None and not any(fnmatchcase(name, p) for p in sel.names):
        return False
    return sel.labels is None or all(labels.get(k) == v for k, v in sel.labels.items())


def placements(snap: Snapshot) -> dict[str, str]:
    """VM -> host, the first sighting in (name, host) order."""
    out: dict[str, str] = {}
    for v in sorted(snap.vms, key=lambda v: (v.name, v.host)):
        out.setdefault(v.name, v.host)
    return out


def host_overcommit(desired: DesiredState, snap: Snapshot, host: str) -> str | None:
    """Why ``host`` is over capacity in ``snap``, None when it is not."""
    spec = desired.policy.spec
    h = next(h for h in desired.cluster.spec.hosts if h.name == host)
    obs = next(s for s in snap.hosts if s.name == host)
    assert obs.cpus is not None
    assert obs.memory_total is not None
    res_mem, res_cpu = effective_reserve(desired.cluster, h)
    usable_mem = obs.memory_total - res_mem
    usable_cpu = obs.cpus - res_cpu
    # A shut-off or crashed guest holds no memory or CPU on its host (capacity.vm_loads).
    inactive = {VmRunState.SHUTOFF, VmRunState.CRASHED}
    vms: list[VmState] = [v for v in snap.vms if v.host == host and v.state not in inactive]
    mem = sum(v.memory_max for v in vms)
    vcpus = sum(v.vcpus for v in vms)
    if mem > usable_mem:
        return f"memory {mem} > {usable_mem}"
    if vcpus > usable_cpu * spec.cpu_overcommit + 1e-6:
        return f"vcpus {vcpus} > {usable_cpu * spec.cpu_overcommit}"
    if spec.basis.value == "used":
        cpu = sum(
            v.cpu_used if v.cpu_used is not None else v.vcpus / spec.cpu_overcommit for v in vms
        )
        cpu_pct = 100 * cpu / usable_cpu if usable_cpu > 0 else (0 if cpu == 0 else 999)
        used = sum(v.memory_used if v.memory_used is not None else v.memory_current for v in vms)
    else:
        den = usable_cpu * spec.cpu_overcommit
        cpu_pct = 100 * vcpus / den if den > 0 else (0 if vcpus == 0 else 999)
        used = mem
    mem_pct = 100 * used / usable_mem if usable_mem > 0 else (0 if used == 0 else 999)
    limit = spec.host_limit
    if cpu_pct > limit + 1e-6 or mem_pct > limit + 1e-6:
        return f"utilisation cpu {cpu_pct:.1f}% mem {mem_pct:.1f}% > {limit}%"
    return None


def required_measures(desired: DesiredState, snap: Snapshot) -> dict[str, int]:
    """How badly ``snap`` breaks each required placement rule, 0 when it holds.

    Host rules: members on a host they may not be on; affinity: members off the host holding
    most; antiAffinity: members beyond the first per domain; spread: skew beyond maxSkew.
    """
    where = placements(snap)
    labels: dict[str, dict[str, str]] = {v.name: v.labels for v in snap.vms}
    hosts = {h.name: h for h in desired.cluster.spec.hosts}
    known = {h.name for h in snap.hosts if h.reachable}
    rules = desired.rules.spec.rules

    def members(sel: Selector) -> list[str]:
        return sorted(n for n in where if selects(sel, n, labels[n]))

    def host_sel(sel: Selector) -> set[str]:
        return {n for n, h in hosts.items() if selects(sel, n, h.labels)}

    host_rules = [
        r
        for r in rules
        if isinstance(r, PinRule)
        or (
            isinstance(r, HostAffinityRule | HostAntiAffinityRule)
            and r.enforcement is Enforcement.REQUIRED
        )
    ]

    def permits(r: PinRule | HostAffinityRule | HostAntiAffinityRule, host: str) -> bool:
        return (host in host_sel(r.hosts)) != isinstance(r, HostAntiAffinityRule)

    def allowed(vm: str, host: str) -> bool:
        return all(permits(r, host) for r in host_rules if selects(r.vms, vm, labels[vm]))

    broken: dict[str, int] = {}
    for r in rules:
        if isinstance(r, ExcludeRule | DisruptionBudgetRule):
            continue
        if not isinstance(r, PinRule) and r.enforcement is not Enforcement.REQUIRED:
            continue
        ms = members(r.vms)
        if isinstance(r, PinRule | HostAffinityRule | HostAntiAffinityRule):
            broken[r.name] = sum(not permits(r, where[m]) for m in ms)
        elif isinstance(r, AffinityRule):
            on = [where[m] for m in ms]
            broken[r.name] = len(on) - max((on.count(h) for h in on), default=0)
        elif isinstance(r, AntiAffinityRule):
            key = r.topology_key

            def dom(h: str, key: str | None = key) -> str:
                lab = hosts[h].labels
                return h if key is None or key not in lab else f"{key}={lab[key]}"

            doms = [dom(where[m]) for m in ms]
            broken[r.name] = len(doms) - len(set(doms))
        else:
            key = r.topology_key
            eligible: dict[str, str] = {}
            for n, h in hosts.items():
                if n not in known or h.maintenance:
                    continue
                if key is not None and key not in h.labels:
                    continue
                if ms and not any(allowed(m, n) for m in ms):
                    continue
                eligible[n] = n if key is None else h.labels[key]
            # Members count in the value of their host's label when that value is eligible.
            counts = dict.fromkeys(eligible.values(), 0)
            for m in ms:
                lab = hosts[where[m]].labels
                value = where[m] if key is None else lab.get(key)
                if value in counts:
                    counts[value] += 1
            skew = max(counts.values()) - min(counts.values()) if counts else 0
            broken[r.name] = max(0, skew - r.max_skew)
    return broken


def broken_required_rules(desired: DesiredState, snap: Snapshot) -> set[str]:
    """Names of the required placement rules ``snap`` breaks."""
    return {name for name, n in required_measures(desired, snap).items() if n}


def step(snap: Snapshot, move: Move) -> Snapshot:
    vms = [v.model_copy(update={"host": move.target}) if v.name == move.vm else v for v in snap.vms]
    return snap.model_copy(update={"vms": vms})
