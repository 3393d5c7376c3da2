"""Seeded generator of synthetic clusters for the planner benchmarks.

A generated case is what the planner reads: a ``DesiredState`` (cluster, policy, rules, empty
placement), a ``Snapshot`` and a ``History``, all built from the models. The clusters have:

* mixed host sizes (16-128 CPUs, 64-1024 GiB) and two CPU architectures (x86_64, aarch64);
* skewed load: about a third of the hosts are hot (55-80% allocated), the rest cold (8-35%),
  with vCPUs sized against usable CPUs x cpuOvercommit and CPU in use against usable CPUs;
* required anti-affinity groups of 2-3 VMs (by label or by name; some over the ``rack`` label);
* pins to the current host, excluded VMs and unmigratable VMs (``migratable: false``);
* labels on hosts (``rack``, ``room``) and VMs (``app``, ``group``).

Every generated start state respects capacity (hostLimit, cpuOvercommit, memory) and, unless
``broken_groups`` is set, every required rule, so a planner only has balance work to do. With
``broken_groups`` that fraction of the anti-affinity groups starts broken: one member shares a
host (or rack) with another, a hot host where one fits, so a planner must repair them. The
history says ``holdRounds`` are satisfied, the batch is 1000 and no VM is in cooldown or
under ``minUptime``.

Run ``.venv/bin/python benchmarks/plan_generate.py --hosts 8 --vms-per-host 4 --seed 1`` for a
summary of one case.
"""

from __future__ import annotations

import argparse
import math
import random
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from reconciler.model.base import API_VERSION, HostName, Metadata, VmName, VmUuid
from reconciler.model.cluster import Cluster, ClusterMetadata, ClusterSpec, Defaults, Host, Reserve
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.placement import Placement
from reconciler.model.policy import BalancePolicy, BalancePolicySpec, Basis, ScoreWeights
from reconciler.model.rules import (
    AntiAffinityRule,
    Enforcement,
    ExcludeRule,
    PinRule,
    PlacementRules,
    PlacementRulesSpec,
    Rule,
    Selector,
)
from reconciler.model.snapshot import (
    HostState,
    Snapshot,
    Unmigratable,
    UnmigratableReason,
    VmRunState,
    VmState,
)

GIB = 1024**3
MIB = 1024**2
NOW = datetime(2025, 3, 3, 12, 0, tzinfo=UTC)
ARCHES = ("x86_64", "aarch64")
CPU_SIZES = (16, 24, 32, 48, 64, 96, 128)
GIB_PER_CPU = (4, 6, 8)
VM_MEMORY_WEIGHTS = (1, 2, 2, 4, 4, 4, 8, 8, 16, 32)
VM_VCPU_WEIGHTS = (1, 1, 2, 2, 4, 4, 8, 16)
APPS = ("web", "db", "cache", "batch", "queue")
DEFAULT_RESERVE_MEMORY = 4 * GIB
DEFAULT_RESERVE_CPUS = 2.0
INITIAL_CEILING = 0.85
"""No generated host starts above this fraction of its usable CPU or memory on any basis."""


@dataclass(frozen=True)
class GenParams:
    """What to generate; everything else follows from ``seed``."""

    hosts: int
    vms_per_host: float
    seed: int
    basis: Basis = Basis.USED
    threshold: float = 20.0
    margin: float = 2.0
    host_limit: float = 90.0
    cpu_overcommit: float = 4.0
    hot_fraction: float = 0.3
    group_every: int = 12
    """One required anti-affinity group per this many VMs (at least one)."""
    pin_fraction: float = 0.04
    unmigratable_fraction: float = 0.05
    exclude_fraction: float = 0.02
    broken_groups: float = 0.0
    """Fraction of the anti-affinity groups that start broken (see ``_break_groups``); 0
    keeps every required rule met and the case byte-identical to one without the field."""


@dataclass(frozen=True)
class Case:
    """One generated input of ``plan()``."""

    params: GenParams
    desired: DesiredState
    snapshot: Snapshot
    history: History
    now: datetime
    hot_hosts: frozenset[str] = field(default_factory=frozenset)

    @property
    def name(self) -> str:
        p = self.params
        return f"h{p.hosts}-v{len(self.snapshot.vms)}-s{p.seed}-{p.basis.value}"


@dataclass
class _Vm:
    name: str
    host: int
    vcpus: int
    memory: int
    cpu_used: float
    memory_used: int
    labels: dict[str, str]
    migratable: bool = True
    unmigratable: list[Unmigratable] = field(default_factory=list)


@dataclass
class _Host:
    name: str
    arch: str
    cpus: int
    memory: int
    reserve_memory: int
    reserve_cpus: float
    rack: str
    override_reserve: bool

    @property
    def usable_cpus(self) -> float:
        return self.cpus - self.reserve_cpus

    @property
    def usable_memory(self) -> int:
        return self.memory - self.reserve_memory


def _make_hosts(rng: random.Random, n: int) -> list[_Host]:
    racks = max(2, n // 4)
    hosts: list[_Host] = []
    for i in range(n):
        arch = ARCHES[i] if i < 2 else ("x86_64" if rng.random() < 0.6 else "aarch64")
        cpus = rng.choice(CPU_SIZES)
        memory_gib = min(1024, max(64, cpus * rng.choice(GIB_PER_CPU)))
        override = memory_gib >= 512
        hosts.append(
            _Host(
                name=f"kvm-{i + 1:04d}",
                arch=arch,
                cpus=cpus,
                memory=memory_gib * GIB,
                reserve_memory=8 * GIB if override else DEFAULT_RESERVE_MEMORY,
                reserve_cpus=DEFAULT_RESERVE_CPUS,
                rack=f"r{i % racks + 1}",
                override_reserve=override,
            )
        )
    return hosts


def _split_counts(rng: random.Random, total: int, weights: list[float]) -> list[int]:
    """``total`` items over bins in proportion to ``weights``, every bin at least one."""
    n = len(weights)
    total = max(total, n)
    s = sum(weights)
    counts = [max(1, int(total * w / s)) for w in weights]
    while sum(counts) < total:
        counts[rng.choices(range(n), weights=weights)[0]] += 1
    while sum(counts) > total:
        i = max(range(n), key=lambda j: counts[j])
        counts[i] -= 1
    return counts


def _fill_host(
    rng: random.Random,
    host: _Host,
    index: int,
    count: int,
    fraction: float,
    first: int,
    overcommit: float,
) -> list[_Vm]:
    """``count`` VMs making about ``fraction`` of the host on every basis: guest memory of the
    usable memory, vCPUs of usable CPUs x ``overcommit``, CPU in use of usable CPUs."""
    mem_w = [rng.choice(VM_MEMORY_WEIGHTS) for _ in range(count)]
    cpu_w = [rng.choice(VM_VCPU_WEIGHTS) for _ in range(count)]
    vcpu_capacity = host.usable_cpus * overcommit
    mem_target = fraction * host.usable_memory
    cpu_target = fraction * rng.uniform(0.8, 1.05) * vcpu_capacity
    quantum = 256 * MIB
    memory = [max(2, round(w * mem_target / sum(mem_w) / quantum)) * quantum for w in mem_w]
    vcpus = [max(1, round(w * cpu_target / sum(cpu_w))) for w in cpu_w]
    while sum(memory) > INITIAL_CEILING * host.usable_memory:
        i = max(range(count), key=lambda j: memory[j])
        memory[i] = max(quantum, memory[i] - quantum)
    while sum(vcpus) > INITIAL_CEILING * vcpu_capacity and max(vcpus) > 1:
        i = max(range(count), key=lambda j: vcpus[j])
        vcpus[i] -= 1
    # Cores in use: a share of each VM's vCPUs, scaled so the host uses about
    # ``fraction`` (x 0.6-1.0) of its usable cores, never more than the ceiling.
    share = [rng.uniform(0.3, 1.0) for _ in range(count)]
    raw = sum(v * s for v, s in zip(vcpus, share, strict=True))
    busy = min(INITIAL_CEILING, fraction * rng.uniform(0.6, 1.0)) * host.usable_cpus
    scale = min(1.0, busy / raw) if raw > 0 else 0.0
    vms = []
    for k in range(count):
        used_mem = int(memory[k] * rng.uniform(0.55, 1.0)) // MIB * MIB
        vms.append(
            _Vm(
                name=f"vm-{first + k + 1:05d}",
                host=index,
                vcpus=vcpus[k],
                memory=memory[k],
                cpu_used=round(vcpus[k] * share[k] * scale, 3),
                memory_used=used_mem,
                labels={"app": rng.choice(APPS)},
            )
        )
    return vms


def _anti_affinity(
    rng: random.Random, hosts: list[_Host], vms: list[_Vm], taken: set[int], p: GenParams
) -> list[Rule]:
    """Required anti-affinity groups placed on distinct hosts (or racks) from the start."""
    rules: list[Rule] = []
    groups = max(1, len(vms) // p.group_every)
    by_host: dict[int, list[int]] = {}
    for i, vm in enumerate(vms):
        by_host.setdefault(vm.host, []).append(i)
    for g in range(groups):
        over_rack = g % 3 == 1 and len({h.rack for h in hosts}) >= 2
        size = rng.choice((2, 2, 3))
        domains: dict[str, list[int]] = {}
        for hi, h in enumerate(hosts):
            domains.setdefault(h.rack if over_rack else h.name, []).append(hi)
        keys = list(domains)
        rng.shuffle(keys)
        members: list[int] = []
        for key in keys:
            if len(members) == size:
                break
            free = [i for hi in domains[key] for i in by_host.get(hi, []) if i not in taken]
            if free:
                members.append(rng.choice(free))
        if len(members) < 2:
            continue
        name = f"apart-{g + 1}"
        taken.update(members)
        for i in members:
            vms[i].labels["group"] = name
        selector = (
            Selector(labels={"group": name})
            if g % 2 == 0
            else Selector(names=sorted(vms[i].name for i in members))
        )
        rules.append(
            AntiAffinityRule(
                name=name,
                type="antiAffinity",
                vms=selector,
                topology_key="rack" if over_rack else None,
                enforcement=Enforcement.REQUIRED,
            )
        )
    return rules


def _fits(host: _Host, load: list[float], vm: _Vm, overcommit: float) -> bool:
    """Whether ``vm`` joins ``host`` (current ``load``: guest memory, vCPUs, cores and memory
    in use) within ``INITIAL_CEILING`` on every basis."""
    mem, vcpus, cpu, used = load
    c = INITIAL_CEILING
    return (
        mem + vm.memory <= c * host.usable_memory
        and vcpus + vm.vcpus <= c * host.usable_cpus * overcommit
        and cpu + vm.cpu_used <= c * host.usable_cpus
        and used + vm.memory_used <= c * host.usable_memory
    )


def _break_groups(
    hosts: list[_Host], vms: list[_Vm], rules: list[Rule], hot: set[int], p: GenParams
) -> None:
    """Break ``p.broken_groups`` of the anti-affinity groups (rounded up): move one member onto
    the host, or into the rack, of another member, a hot host first, then one of the mover's
    architecture (a member moved to the other one stands for a VM of that architecture),
    within ``INITIAL_CEILING``, where a host of the target's architecture is left in a domain
    without members (so a move can repair it). A group where nothing fits stays whole.

    Uses its own random stream, so the rest of the case is the same as without breaking."""
    rng = random.Random(p.seed * 7_000_003 + p.hosts * 104_729 + 17)
    groups = [r for r in rules if isinstance(r, AntiAffinityRule)]
    chosen = rng.sample(groups, min(len(groups), math.ceil(p.broken_groups * len(groups))))
    load = [[0.0, 0.0, 0.0, 0.0] for _ in hosts]
    for vm in vms:
        for k, x in enumerate((vm.memory, vm.vcpus, vm.cpu_used, vm.memory_used)):
            load[vm.host][k] += x
    for rule in sorted(chosen, key=lambda r: r.name):
        members = [i for i, vm in enumerate(vms) if vm.labels.get("group") == rule.name]
        by_rack = rule.topology_key is not None

        def domain(h: _Host, by_rack: bool = by_rack) -> str:
            return h.rack if by_rack else h.name

        options: list[tuple[bool, bool, float, int, int]] = []
        for a in members:
            anchor = hosts[vms[a].host]
            for m in members:
                if m == a:
                    continue
                arch = hosts[vms[m].host].arch
                held = {domain(hosts[vms[x].host]) for x in members if x != m}
                for t, h in enumerate(hosts):
                    # Only a break a move can repair: a domain without members is left on
                    # the target's architecture.
                    repairable = any(x.arch == h.arch and domain(x) not in held for x in hosts)
                    if domain(h) == domain(anchor) and t != vms[m].host and repairable:
                        options.append((t not in hot, h.arch != arch, rng.random(), m, t))
        for *_, m, t in sorted(options):
            if _fits(hosts[t], load[t], vms[m], p.cpu_overcommit):
                vm = vms[m]
                for k, x in enumerate((vm.memory, vm.vcpus, vm.cpu_used, vm.memory_used)):
                    load[vm.host][k] -= x
                    load[t][k] += x
                vm.host = t
                break


def generate(p: GenParams) -> Case:
    """One cluster for ``p``; the same ``p`` always gives the same case."""
    rng = random.Random(p.seed * 1_000_003 + p.hosts * 7919 + round(p.vms_per_host * 1000))
    hosts = _make_hosts(rng, p.hosts)
    n_hot = max(1, round(p.hot_fraction * p.hosts))
    hot: set[int] = set()
    for arch in ARCHES:  # every architecture with two hosts or more gets a hot one
        members = [i for i, h in enumerate(hosts) if h.arch == arch]
        if len(members) >= 2 and len(hot) < n_hot:
            hot.add(rng.choice(members))
    hot.update(rng.sample(sorted(set(range(p.hosts)) - hot), n_hot - len(hot)))
    fractions = [
        rng.uniform(0.55, 0.80) if i in hot else rng.uniform(0.08, 0.35) for i in range(p.hosts)
    ]
    weights = [1.6 if i in hot else 0.7 for i in range(p.hosts)]
    counts = _split_counts(rng, round(p.hosts * p.vms_per_host), weights)
    vms: list[_Vm] = []
    for i, h in enumerate(hosts):
        vms.extend(_fill_host(rng, h, i, counts[i], fractions[i], len(vms), p.cpu_overcommit))

    taken: set[int] = set()
    rules: list[Rule] = _anti_affinity(rng, hosts, vms, taken, p)
    if p.broken_groups > 0:
        _break_groups(hosts, vms, rules, hot, p)
    free = [i for i in range(len(vms)) if i not in taken]
    rng.shuffle(free)
    n_pin = round(p.pin_fraction * len(vms))
    n_unmig = round(p.unmigratable_fraction * len(vms))
    n_excl = round(p.exclude_fraction * len(vms))
    pinned, free = free[:n_pin], free[n_pin:]
    unmig, free = free[:n_unmig], free[n_unmig:]
    excluded = free[:n_excl]
    for i in sorted(pinned):
        rules.append(
            PinRule(
                name=f"pin-{vms[i].name}",
                type="pin",
                vms=Selector(names=[vms[i].name]),
                hosts=Selector(names=[hosts[vms[i].host].name]),
            )
        )
    if excluded:
        rules.append(
            ExcludeRule(
                name="keep-licensed",
                type="exclude",
                vms=Selector(names=sorted(vms[i].name for i in excluded)),
            )
        )
    for k, i in enumerate(sorted(unmig)):
        vms[i].migratable = False
        if k % 2 == 0:
            vms[i].unmigratable = [
                Unmigratable(
                    code=UnmigratableReason.LOCAL_DISK,
                    detail=f"/var/lib/libvirt/images/{vms[i].name}.qcow2",
                )
            ]
        else:
            vms[i].unmigratable = [
                Unmigratable(code=UnmigratableReason.HOST_DEVICE, detail="hostdev 0000:3b:00.0")
            ]

    cluster = Cluster(
        api_version=API_VERSION,
        kind="Cluster",
        metadata=ClusterMetadata(name=f"bench-{p.seed}"),
        spec=ClusterSpec(
            defaults=Defaults(
                reserve=Reserve(memory=DEFAULT_RESERVE_MEMORY, cpus=DEFAULT_RESERVE_CPUS)
            ),
            hosts=[
                Host(
                    name=h.name,
                    uri=f"qemu+ssh://root@{h.name}.example/system",
                    labels={"rack": h.rack, "room": "a" if i % 2 == 0 else "b"},
                    reserve=Reserve(memory=h.reserve_memory) if h.override_reserve else Reserve(),
                )
                for i, h in enumerate(hosts)
            ],
        ),
    )
    policy = BalancePolicy(
        api_version=API_VERSION,
        kind="BalancePolicy",
        metadata=Metadata(name="default"),
        spec=BalancePolicySpec(
            score=ScoreWeights(cpu=0.5, memory=0.5),
            basis=p.basis,
            threshold=p.threshold,
            margin=p.margin,
            hold_rounds=2,
            host_limit=p.host_limit,
            cpu_overcommit=p.cpu_overcommit,
            batch=1000,
        ),
    )
    desired = DesiredState(
        cluster=cluster,
        policy=policy,
        rules=PlacementRules(
            api_version=API_VERSION,
            kind="PlacementRules",
            metadata=Metadata(name="default"),
            spec=PlacementRulesSpec(rules=rules),
        ),
        placement=Placement(
            api_version=API_VERSION, kind="Placement", metadata=Metadata(name="default")
        ),
    )
    used_cpu = [0.0] * p.hosts
    used_mem = [0] * p.hosts
    for vm in vms:
        used_cpu[vm.host] += vm.cpu_used
        used_mem[vm.host] += vm.memory_used
    snapshot = Snapshot(
        cluster=cluster.metadata.name,
        taken_at=NOW,
        hosts=[
            HostState(
                name=HostName(h.name),
                uri=f"qemu+ssh://root@{h.name}.example/system",
                reachable=True,
                uuid=f"00000000-0000-4000-8000-{i + 1:012d}",
                hostname=f"{h.name}.example",
                arch=h.arch,
                cpu_model="generic",
                cpus=h.cpus,
                memory_total=h.memory,
                memory_free=max(0, h.memory - used_mem[i]),
                cpu_utilisation=min(100.0, round(100.0 * used_cpu[i] / h.cpus, 3)),
                hypervisor="QEMU",
            )
            for i, h in enumerate(hosts)
        ],
        vms=[
            VmState(
                name=VmName(vm.name),
                uuid=VmUuid(f"10000000-0000-4000-8000-{k + 1:012d}"),
                host=HostName(hosts[vm.host].name),
                state=VmRunState.RUNNING,
                vcpus=vm.vcpus,
                memory_max=vm.memory,
                memory_current=vm.memory,
                cpu_used=vm.cpu_used,
                memory_used=vm.memory_used,
                uptime=10 * 86400.0,
                labels=vm.labels,
                migratable=vm.migratable,
                unmigratable=vm.unmigratable,
            )
            for k, vm in enumerate(vms)
        ],
    )
    history = History(imbalance_rounds={a: 2 for a in ARCHES})
    return Case(
        params=p,
        desired=desired,
        snapshot=snapshot,
        history=history,
        now=NOW,
        hot_hosts=frozenset(hosts[i].name for i in hot),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--vms-per-host", type=float, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--basis", choices=[b.value for b in Basis], default="used")
    ap.add_argument("--broken", type=float, default=0.0, help="fraction of groups broken")
    args = ap.parse_args()
    params = GenParams(args.hosts, args.vms_per_host, args.seed, Basis(args.basis))
    case = generate(replace(params, broken_groups=args.broken))
    print(f"case {case.name}: {len(case.snapshot.hosts)} hosts, {len(case.snapshot.vms)} VMs")
    per_host: dict[str, int] = {}
    for vm in case.snapshot.vms:
        per_host[vm.host] = per_host.get(vm.host, 0) + 1
    for h in case.snapshot.hosts:
        hot = "hot" if h.name in case.hot_hosts else ""
        print(
            f"  {h.name} {h.arch:8} {h.cpus:4} CPUs {(h.memory_total or 0) // GIB:5} GiB "
            f"{per_host.get(h.name, 0):3} VMs {hot}"
        )
    for r in case.desired.rules.spec.rules:
        print(f"  rule {r.name} ({r.type})")


if __name__ == "__main__":
    main()
