"""Usable host capacity, per-VM load figures, host scores and the spread of one architecture.

Figures are plain numbers prepared once per plan so the search loops do arithmetic only.

- *Hard capacity*: the sum of guests' ``memory_max`` must fit the host's memory minus its
  reserve, and the sum of vCPUs must fit ``(cpus - reserved cpus) * cpuOvercommit``.
- *Utilisation* (the basis of scores and ``hostLimit``): with ``basis: used`` CPU is the cores
  the guests use (``cpu_used``; when unknown, the guest's fair share ``vcpus / cpuOvercommit``)
  over usable cores, memory is ``memory_used`` (else ``memory_current``) over usable memory;
  with ``basis: allocated`` CPU is vCPUs over ``usable cores * cpuOvercommit`` and memory is
  ``memory_max`` over usable memory.
- *Score*: ``(w_cpu * cpu% + w_mem * mem%) / (w_cpu + w_mem)``, 0-100 on a healthy host.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from reconciler.core.load_range import in_range
from reconciler.model.policy import BalancePolicySpec, Basis
from reconciler.model.snapshot import MigrationClass, VmRunState, VmState

# A host whose usable capacity is zero or less but carries load reads as this full.
SATURATED = 999.0

INACTIVE_STATES = frozenset({VmRunState.SHUTOFF, VmRunState.CRASHED})


@dataclass(frozen=True, slots=True)
class HostInfo:
    """One cluster host as the planner sees it."""

    index: int
    name: str
    known: bool
    """Reachable and observed; unknown hosts carry no figures and take or give no VM."""
    arch: str | None
    maintenance: bool
    labels: Mapping[str, str]
    usable_cpus: float
    usable_memory: int
    vcpu_capacity: float
    """usable_cpus * cpuOvercommit: the most vCPUs the host may carry."""
    cpu_den: float
    """Denominator of CPU utilisation (cores for ``used``, vCPU capacity for ``allocated``)."""
    max_outbound: int
    max_inbound: int
    cpu_extra: float = 0.0
    """CPU load the host carries besides its guests (its pressure, in ``cpu_den`` units)."""
    page_room: Mapping[int, int] | None = None
    """Page size in KiB -> huge pages the VMs on it may hold (:mod:`reconciler.core.hugepages`);
    None: not limited (no VM uses huge pages, or the host reported none)."""

    @property
    def accepts(self) -> bool:
        """Known and not in maintenance: may receive VMs."""
        return self.known and not self.maintenance


class VmInfo(NamedTuple):
    """One observed VM with its load figures.

    A named tuple, immutable like the frozen dataclasses around it but three times cheaper to
    build, which counts at 100,000 VMs a plan.
    """

    index: int  # type: ignore[assignment]  # shadows tuple.index(), which nothing calls
    name: str
    labels: Mapping[str, str]
    vcpus: int
    memory: int
    """memory_max in bytes: what a host must be able to hold."""
    cpu_load: float
    """Numerator of CPU utilisation on the policy basis (cores or vCPUs)."""
    mem_load: float
    """Numerator of memory utilisation on the policy basis (bytes)."""
    in_flight: bool
    migratable: bool
    """May the planner move it: its migration class under the policy (``core.movable``)."""
    shadow: bool = False
    """A second sighting of an in-flight VM: load on that host, not a rule member."""
    fixed: str = ""
    """Why it may not move, when not ``migratable``."""
    copy_bytes: int = 0
    """Bytes a move copies: guest memory (when running) plus local disk allocation."""
    migration_class: MigrationClass = MigrationClass.SHARED
    disks: tuple[str, ...] = ()
    """Its local disks (guest devices), copied by a move."""
    disk_bytes: int = 0
    refused_by: tuple[tuple[str, str], ...] = ()
    """(host, why) for each host that would refuse it (CPU, machine type)."""
    page_kib: int = 0
    """Its huge page size in KiB when backed by huge pages and active, else 0."""
    pages: int = 0
    """Huge pages of ``page_kib`` it holds."""
    dirty_rate: int | None = None
    """Bytes per second it writes to its memory, when measured and it runs."""


@dataclass(frozen=True, slots=True)
class Weights:
    cpu: float
    memory: float
    host_limit: float


def weights_of(spec: BalancePolicySpec) -> Weights:
    total = spec.score.cpu + spec.score.memory
    return Weights(spec.score.cpu / total, spec.score.memory / total, float(spec.host_limit))


def vm_loads(vm: VmState, spec: BalancePolicySpec) -> tuple[int, int, float, float]:
    """(vcpus, memory, cpu_load, mem_load) of ``vm``; zero when the guest is not active."""
    if vm.state in INACTIVE_STATES:
        return 0, 0, 0.0, 0.0
    if spec.basis is Basis.ALLOCATED:
        return vm.vcpus, vm.memory_max, float(vm.vcpus), float(vm.memory_max)
    used = vm.cpu_used  # out of range (load_range): not a measurement, read as none
    cpu = used if used is not None and in_range(used, vm.vcpus) else vm.vcpus / spec.cpu_overcommit
    mem = vm.memory_used if vm.memory_used is not None else vm.memory_current
    return vm.vcpus, vm.memory_max, cpu, float(mem)


def pct(load: float, den: float) -> float:
    """Utilisation in percent; a host without usable capacity is saturated when loaded."""
    if den <= 0:
        return 0.0 if load <= 0 else SATURATED
    return 100.0 * load / den


def score(cpu_pct: float, mem_pct: float, w: Weights) -> float:
    return w.cpu * cpu_pct + w.memory * mem_pct


def spread(scores: list[float]) -> float:
    """Max minus min of ``scores``; 0 for fewer than two hosts."""
    return max(scores) - min(scores) if len(scores) > 1 else 0.0
