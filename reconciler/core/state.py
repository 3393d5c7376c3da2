"""The planner's working state: where every VM is and what every host carries.

:func:`build` turns the desired state and a snapshot into a static :class:`Model` (hosts, VMs
and rules as indices, computed once) and a :class:`State` (VM -> host, per-host totals and
per-rule domain counters) that moves update incrementally in O(rules of the VM).
A :class:`State` is only ever changed by the planner function that owns it; callers get copies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from reconciler.core.capacity import (
    INACTIVE_STATES,
    HostInfo,
    VmInfo,
    Weights,
    pct,
    score,
    weights_of,
)
from reconciler.core.hugepages import need_of, rooms
from reconciler.core.load_range import OVER_CORES, PER_VCPU, pressure_in_range
from reconciler.core.movable import why_fixed
from reconciler.core.rules import CompiledRules, DomainCounts, compile_rules, domain_of, new_counts
from reconciler.model.base import Frozen, fields_of
from reconciler.model.cluster import Host, effective_migration_limits, effective_reserve
from reconciler.model.desired import DesiredState
from reconciler.model.policy import BalancePolicySpec, Basis
from reconciler.model.snapshot import (
    HostState,
    MigrationClass,
    Snapshot,
    UnmigratableReason,
    VmState,
)

UNKNOWN_ARCH = "unknown"


class NewVm(Frozen):
    """A VM that does not exist yet, for :func:`reconciler.core.placer.place`."""

    name: str
    vcpus: int
    memory: int
    labels: dict[str, str]
    hugepage_kib: int | None = None
    """Page size in KiB when its memory is to be backed by huge pages."""
    hugepages: int = 0
    """Pages of that size it takes."""


@dataclass(frozen=True, slots=True)
class Model:
    """Everything about one planning problem that moves do not change."""

    hosts: Sequence[HostInfo]
    """Tuples from :func:`build`; the admission view keeps lists it updates in place."""
    vms: Sequence[VmInfo]
    rules: CompiledRules
    weights: Weights
    host_index: Mapping[str, int]
    vm_index: Mapping[str, int]
    """Name -> index of each VM (its first sighting when in flight)."""
    observed: Sequence[int]
    """Host index of each VM as observed, -1 for a VM that does not exist yet."""
    arches: Mapping[str, tuple[int, ...]]
    """Architecture -> known hosts that are not in maintenance."""
    paged: bool = False
    """Some VM is backed by huge pages: states count pages per host and size."""
    sightings: Sequence[VmState] = ()
    """The observed VM each index was made from (a VM that does not exist yet has none)."""
    out_of_range: Sequence[VmState] = ()
    """Running VMs whose CPU figure is out of range, read as never measured (basis used)."""

    def arch_of(self, host: int) -> str:
        return self.hosts[host].arch or UNKNOWN_ARCH


class State:
    """VM -> host and per-host totals, updated move by move."""

    __slots__ = (
        "counts",
        "cpu_load",
        "host_of",
        "mem_load",
        "memory",
        "model",
        "pages",
        "vcpus",
        "vms_on",
    )

    def __init__(self, model: Model, host_of: list[int]) -> None:
        self.model = model
        self.host_of = host_of
        n = len(model.hosts)
        self.vms_on: list[set[int]] = [set() for _ in range(n)]
        self.memory = [0] * n
        self.vcpus = [0] * n
        self.cpu_load = [h.cpu_extra for h in model.hosts]
        self.mem_load = [0.0] * n
        self.pages: list[dict[int, int]] | None = [{} for _ in range(n)] if model.paged else None
        """Host -> page size in KiB -> huge pages its VMs hold (None: no VM uses them)."""
        if self.pages is not None:
            for vm in model.vms:
                h = host_of[vm.index]
                if h >= 0:
                    self._add(vm, h, 1)
        else:  # ``_add`` of every VM, its steps inline: once per VM of every plan
            vms_on, memory, vcpus = self.vms_on, self.memory, self.vcpus
            cpu_load, mem_load = self.cpu_load, self.mem_load
            for vm in model.vms:
                h = host_of[vm.index]
                if h >= 0:
                    vms_on[h].add(vm.index)
                    memory[h] += vm.memory
                    vcpus[h] += vm.vcpus
                    cpu_load[h] += vm.cpu_load
                    mem_load[h] += vm.mem_load
        self.counts: list[DomainCounts] = [new_counts(g, host_of) for g in model.rules.groups]

    def _add(self, vm: VmInfo, h: int, sign: int) -> None:
        if sign > 0:
            self.vms_on[h].add(vm.index)
        else:
            self.vms_on[h].discard(vm.index)
        self.memory[h] += sign * vm.memory
        self.vcpus[h] += sign * vm.vcpus
        self.cpu_load[h] += sign * vm.cpu_load
        self.mem_load[h] += sign * vm.mem_load
        if vm.pages and self.pages is not None:
            held = self.pages[h]
            held[vm.page_kib] = held.get(vm.page_kib, 0) + sign * vm.pages

    def copy(self) -> State:
        new = State.__new__(State)
        new.model = self.model
        new.host_of = list(self.host_of)
        new.vms_on = [set(s) for s in self.vms_on]
        new.memory = list(self.memory)
        new.vcpus = list(self.vcpus)
        new.cpu_load = list(self.cpu_load)
        new.mem_load = list(self.mem_load)
        new.pages = None if self.pages is None else [dict(p) for p in self.pages]
        new.counts = [c.copy() for c in self.counts]
        return new

    def move(self, v: int, target: int) -> None:
        """Put VM ``v`` on host ``target`` (-1 removes it); rule counters follow."""
        vm = self.model.vms[v]
        source = self.host_of[v]
        if source == target:
            return
        if source >= 0:
            self._add(vm, source, -1)
        if target >= 0:
            self._add(vm, target, 1)
        self.host_of[v] = target
        groups = self.model.rules.groups
        for gi in self.model.rules.vm_groups[v]:
            g = groups[gi]
            a, b = domain_of(g, source), domain_of(g, target)
            if a != b:
                self.counts[gi].shift(a, -1)
                self.counts[gi].shift(b, 1)

    def cpu_pct(self, h: int) -> float:
        return pct(self.cpu_load[h], self.model.hosts[h].cpu_den)

    def mem_pct(self, h: int) -> float:
        return pct(self.mem_load[h], self.model.hosts[h].usable_memory)

    def score(self, h: int) -> float:
        return score(self.cpu_pct(h), self.mem_pct(h), self.model.weights)

    def score_with(self, h: int, v: int, sign: int) -> float:
        """Score of host ``h`` if VM ``v`` were added (sign 1) or removed (sign -1)."""
        vm = self.model.vms[v]
        host = self.model.hosts[h]
        c = pct(self.cpu_load[h] + sign * vm.cpu_load, host.cpu_den)
        m = pct(self.mem_load[h] + sign * vm.mem_load, host.usable_memory)
        return score(c, m, self.model.weights)


Totals = tuple[int, int, float, float]


class Journal:
    """Moves on a :class:`State` that are taken back exactly, totals included.

    A probe on the state itself instead of on a copy of it: the cost is that of the moves,
    not of the cluster. Undoing puts back the very totals (no float drift) and placements.
    """

    __slots__ = ("_steps", "state")

    def __init__(self, state: State) -> None:
        self.state = state
        self._steps: list[tuple[int, int, int, Totals | None, Totals | None]] = []

    def move(self, v: int, target: int) -> None:
        source = self.state.host_of[v]
        if source == target:
            return
        self._steps.append((v, source, target, self._totals(source), self._totals(target)))
        self.state.move(v, target)

    def mark(self) -> int:
        """Where :meth:`undo` stops to take back only the moves made after now."""
        return len(self._steps)

    def undo(self, mark: int = 0) -> None:
        state = self.state
        while len(self._steps) > mark:
            v, source, target, before_source, before_target = self._steps.pop()
            state.move(v, source)
            self._restore(source, before_source)
            self._restore(target, before_target)

    def _totals(self, h: int) -> Totals | None:
        s = self.state
        return (s.memory[h], s.vcpus[h], s.cpu_load[h], s.mem_load[h]) if h >= 0 else None

    def _restore(self, h: int, totals: Totals | None) -> None:
        if totals is not None:
            s = self.state
            s.memory[h], s.vcpus[h], s.cpu_load[h], s.mem_load[h] = totals


def host_info(desired: DesiredState, host: Host, index: int, obs: HostState | None) -> HostInfo:
    """Host ``index`` of a model: ``host``'s limits under ``desired``, as ``obs`` saw it."""
    spec = desired.policy.spec
    reserve_mem, reserve_cpus = effective_reserve(desired.cluster, host)
    out, inn = effective_migration_limits(desired.cluster, host)
    known = (
        obs is not None and obs.reachable and obs.cpus is not None and obs.memory_total is not None
    )
    cpus = float(obs.cpus or 0) if obs is not None and known else 0.0
    mem = (obs.memory_total or 0) if obs is not None and known else 0
    usable_cpus = max(0.0, cpus - reserve_cpus)
    usable_mem = max(0, mem - reserve_mem)
    vcpu_cap = usable_cpus * spec.cpu_overcommit
    return HostInfo(
        index=index,
        name=host.name,
        known=known,
        arch=obs.arch if obs is not None else None,
        maintenance=host.maintenance,
        labels=host.labels,
        usable_cpus=usable_cpus,
        usable_memory=usable_mem,
        vcpu_capacity=vcpu_cap,
        cpu_den=vcpu_cap if spec.basis is Basis.ALLOCATED else usable_cpus,
        max_outbound=out,
        max_inbound=inn,
    )


def vm_info(
    vm: VmState, spec: BalancePolicySpec, index: int, *, in_flight: bool, shadow: bool
) -> VmInfo:
    """The model's view of one observed VM (one sighting of it)."""
    return vm_infos(spec)(vm, fields_of(vm), index, in_flight, shadow)


def vm_infos(
    spec: BalancePolicySpec, flagged: list[VmState] | None = None
) -> Callable[[VmState, dict[str, Any], int, bool, bool], VmInfo]:
    """:func:`vm_info` of one VM after another under ``spec`` (every VM of every plan,
    125,000 at 5,000 hosts): what does not depend on the VM worked out once, the loads of
    :func:`capacity.vm_loads` inline, fields by position, and what most VMs lack (local
    disks, refusals, a reason to stay) not looked into. It is given the VM's fields too
    (:func:`fields_of`), read once by its caller: reading them from that dict costs about half
    of reading them as attributes of a pydantic model. A running VM whose CPU figure is out of
    range (:mod:`reconciler.core.load_range`) counts as one never measured, and goes into
    ``flagged``: found where the figure is read anyway, not by another pass."""
    allocated = spec.basis is Basis.ALLOCATED
    overcommit = spec.cpu_overcommit
    per_vcpu, over = PER_VCPU, OVER_CORES  # load_range.in_range, inline
    new = tuple.__new__
    shared = MigrationClass.SHARED  # an enum's member read from its class costs ~0.15 µs

    def make(vm: VmState, f: dict[str, Any], index: int, in_flight: bool, shadow: bool) -> VmInfo:
        vcpus, memory = f["vcpus"], f["memory_max"]
        if f["state"] in INACTIVE_STATES:
            vcpus, memory, cpu, mem = 0, 0, 0.0, 0.0
        elif allocated:
            cpu, mem = float(vcpus), float(memory)
        else:
            used, mem_used = f["cpu_used"], f["memory_used"]
            if used is None:
                cpu = vcpus / overcommit
            elif 0.0 <= used <= vcpus * per_vcpu + over:
                cpu = used
            else:  # out of range (load_range): no measurement, read as none
                cpu = vcpus / overcommit
                if flagged is not None:
                    flagged.append(vm)
            mem = float(mem_used if mem_used is not None else f["memory_current"])
        klass = f["migration_class"]
        fixed = None if klass is shared and f["migratable"] else why_fixed(vm, spec)
        disks, refused, disk_bytes = f["disks"], f["refused_by"], f["disk_bytes"]
        info = new(  # ``VmInfo(...)`` without the Python frame of its generated ``__new__``
            VmInfo,
            (
                index,
                f["name"],
                f["labels"],
                vcpus,
                memory,
                cpu,
                mem,
                in_flight,
                fixed is None,
                shadow,
                fixed or "",
                memory + disk_bytes,  # ``movable.copy_bytes``
                klass,
                tuple(d.target for d in disks if not d.shared) if disks else (),
                disk_bytes,
                tuple(sorted(refused.items())) if refused else (),
                0,
                0,
                f["dirty_rate"] if memory else None,
            ),
        )
        if f["hugepage_kib"] is None:  # the common case: nothing more to look at
            return info
        need = need_of(vm)
        return info if need is None else info._replace(page_kib=need[0], pages=need[1])

    return make


def _in_order(seen: Sequence[VmState], twice: set[str]) -> list[VmState]:
    """``seen`` in (name, host) order; adds to ``twice`` the names seen more than once.

    Sorted by name alone, then each run of one name by host: names repeat only for a VM in
    flight (or a duplicate), and a key of plain names sorts 125,000 VMs faster than one of pairs.
    """
    ordered = sorted(seen, key=attrgetter("name"))
    names = [vm.name for vm in ordered]
    if len(set(names)) == len(names):
        return ordered
    k = 1
    while k < len(names):
        if names[k] != names[k - 1]:
            k += 1
            continue
        start = k - 1
        while k < len(names) and names[k] == names[start]:
            k += 1
        ordered[start:k] = sorted(ordered[start:k], key=attrgetter("host"))
        twice.add(names[start])
    return ordered


_last_built: list[tuple[DesiredState, Snapshot, Model, State]] = []
"""The last model built without a new VM, with its initial state untouched (one entry)."""


def build(
    desired: DesiredState, snapshot: Snapshot, new_vm: NewVm | None = None
) -> tuple[Model, State]:
    """The model and initial state of ``snapshot`` under ``desired``.

    Hosts are indexed in name order and VMs in (name, host) order, so the result does not
    depend on the order of any input list. VMs seen on a host that is not in the Cluster are
    left out. ``new_vm`` adds a VM placed nowhere (index last) for placement questions.

    The inputs are frozen, so the model of the same two objects is the same: the last one is
    kept and given again with a state of its own (a round's plan and the admission of its
    moves, in ``simulate``, read one observation). The model is shared, never changed.
    """
    if new_vm is None:
        for last in list(_last_built):  # a copy: another thread may replace the entry
            if last[0] is desired and last[1] is snapshot:
                return last[2], last[3].copy()
    model, state = _build(desired, snapshot, new_vm)
    if new_vm is None:
        _last_built[:] = [(desired, snapshot, model, state.copy())]
    return model, state


def _build(desired: DesiredState, snapshot: Snapshot, new_vm: NewVm | None) -> tuple[Model, State]:
    spec = desired.policy.spec
    observed: dict[str, HostState] = {h.name: h for h in snapshot.hosts}
    hosts: list[HostInfo] = []
    for host in sorted(desired.cluster.spec.hosts, key=lambda h: h.name):
        hosts.append(host_info(desired, host, len(hosts), observed.get(host.name)))
    host_index = {h.name: h.index for h in hosts}
    in_flight = {f.name for f in snapshot.in_flight}
    twice: set[str] = set()
    ordered = _in_order(snapshot.vms, twice)
    in_flight |= twice
    if in_flight:  # a duplicate is not a migration: it says why it stays (``core.duplicates``)
        in_flight -= {
            v.name
            for v in snapshot.vms
            if v.name in in_flight
            and any(u.code is UnmigratableReason.DUPLICATE for u in v.unmigratable)
        }
    vms: list[VmInfo] = []
    sightings: list[VmState] = []
    observed_host: list[int] = []
    vm_index: dict[str, int] = {}
    flagged: list[VmState] = []
    make = vm_infos(spec, flagged)
    for vm in ordered:
        f = fields_of(vm)
        h = host_index.get(f["host"])
        if h is None or not hosts[h].known:
            continue
        name = f["name"]
        shadow = name in vm_index
        info = make(vm, f, len(vms), name in in_flight, shadow)
        if not shadow:
            vm_index[name] = info.index
        vms.append(info)
        sightings.append(vm)
        observed_host.append(h)
    if new_vm is not None:
        # A new VM has no measured use: on basis ``used`` it counts its fair CPU share.
        cpu = (
            float(new_vm.vcpus)
            if spec.basis is Basis.ALLOCATED
            else new_vm.vcpus / spec.cpu_overcommit
        )
        vms.append(
            VmInfo(
                index=len(vms),
                name=new_vm.name,
                labels=new_vm.labels,
                vcpus=new_vm.vcpus,
                memory=new_vm.memory,
                cpu_load=cpu,
                mem_load=float(new_vm.memory),
                in_flight=False,
                migratable=True,
                page_kib=new_vm.hugepage_kib or 0,
                pages=new_vm.hugepages if new_vm.hugepage_kib else 0,
            )
        )
        observed_host.append(-1)
    pressure = snapshot.load.pressure if snapshot.load is not None else {}
    if pressure and spec.basis is Basis.USED:
        pressure = {h: p for h, p in pressure.items() if pressure_in_range(p)}
        hosts = [
            dataclasses.replace(h, cpu_extra=pressure[h.name] / 100.0 * h.cpu_den)
            if h.name in pressure and h.known
            else h
            for h in hosts
        ]
    paged = any(vm.pages for vm in vms)
    if paged:
        room = rooms(snapshot.hosts, snapshot.vms)
        hosts = [
            dataclasses.replace(h, page_room=room[h.name]) if h.name in room and h.known else h
            for h in hosts
        ]
    arches: dict[str, list[int]] = {}
    for hi in hosts:
        if hi.accepts:
            arches.setdefault(hi.arch or UNKNOWN_ARCH, []).append(hi.index)
    model = Model(
        hosts=tuple(hosts),
        vms=tuple(vms),
        rules=compile_rules(
            desired.rules.spec.rules, hosts, vms, vm_index if new_vm is None else None
        ),
        weights=weights_of(spec),
        host_index=host_index,
        vm_index=vm_index,
        observed=tuple(observed_host),
        arches={a: tuple(v) for a, v in sorted(arches.items())},
        paged=paged,
        sightings=tuple(sightings),
        out_of_range=tuple(flagged),
    )
    return model, State(model, list(observed_host))
