"""The benchmarks' own view of a case: scores, capacity and required rules, computed
independently of ``reconciler.core`` so the planner's output can be checked against it.

Semantics (from the BalancePolicy contract):

* usable capacity of a host = its CPUs and memory minus its effective reserve;
* load on basis ``used`` = sum of the VMs' ``cpu_used`` / ``memory_used``; on ``allocated`` =
  sum of ``vcpus`` / ``memory_max``;
* CPU% = load / usable CPUs * 100 on ``used``, vCPUs / (usable CPUs x cpuOvercommit) * 100 on
  ``allocated``; memory% = load / usable memory * 100; host score = weighted mean of the two;
* spread = max - min score over the known hosts of one CPU architecture;
* capacity: no host that receives a VM may end above ``hostLimit`` (CPU% or memory%), above
  ``cpuOvercommit`` vCPUs per usable CPU, or above its usable memory in guest memory;
* required rules: antiAffinity (per host or per ``topologyKey`` value), pin, exclude, and
  unmigratable VMs stay; no VM changes CPU architecture.
"""

from __future__ import annotations

import fnmatch
import os
import platform
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from reconciler.model.cluster import effective_reserve
from reconciler.model.desired import DesiredState
from reconciler.model.policy import Basis
from reconciler.model.rules import (
    AntiAffinityRule,
    Enforcement,
    ExcludeRule,
    PinRule,
    Selector,
)
from reconciler.model.snapshot import Snapshot, VmState

GIB = 1024**3
EPS = 1e-6
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def revision() -> str:
    """The commit measured, whether reconciler/core has uncommitted changes, and the machine."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "reconciler/core"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        head, dirty = "unknown", ""
    cores = os.cpu_count() or 0
    extra = " (reconciler/core has uncommitted changes)" if dirty else ""
    return f"commit {head}{extra}; Python {platform.python_version()}; {cores} cores"


def _matches(sel: Selector, name: str, labels: dict[str, str]) -> bool:
    if sel.names is not None and not any(fnmatch.fnmatchcase(name, g) for g in sel.names):
        return False
    return sel.labels is None or all(labels.get(k) == v for k, v in sel.labels.items())


@dataclass(frozen=True)
class AntiGroup:
    name: str
    members: tuple[int, ...]
    domain: tuple[int, ...]
    """Domain (host index or topology value index) of every host; -1 = host lacks the key."""


@dataclass
class Instance:
    """Arrays of one case; hosts and VMs by index."""

    host_names: list[str]
    host_arch: list[str]
    cpu_cap: FloatArray  # usable CPUs
    cpu_den: FloatArray  # denominator of CPU% (usable CPUs, or x cpuOvercommit on allocated)
    mem_cap: FloatArray  # usable bytes
    vm_names: list[str]
    home: IntArray  # host index each VM starts on
    cpu: FloatArray  # basis CPU load of each VM (cores or vCPUs)
    mem: FloatArray  # basis memory load (bytes)
    vcpus: FloatArray
    mem_max: FloatArray
    movable: npt.NDArray[np.bool_]
    allowed: list[list[int]]  # hosts each VM may end on
    groups: list[AntiGroup]
    wc: float
    wm: float
    threshold: float
    host_limit: float
    overcommit: float
    why_fixed: dict[int, str]

    @property
    def n_hosts(self) -> int:
        return len(self.host_names)

    @property
    def n_vms(self) -> int:
        return len(self.vm_names)

    def arches(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for h, a in enumerate(self.host_arch):
            out.setdefault(a, []).append(h)
        return out

    def score_coef(self) -> FloatArray:
        """coef[v, h]: score points VM v adds to host h."""
        w = self.wc + self.wm
        return np.asarray(
            100.0
            * (
                self.wc * self.cpu[:, None] / self.cpu_den[None, :]
                + self.wm * self.mem[:, None] / self.mem_cap[None, :]
            )
            / w,
            dtype=np.float64,
        )

    def sums(self, assign: IntArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """Per host: basis CPU, basis memory, vCPUs, guest memory."""
        n = self.n_hosts

        def total(w: FloatArray) -> FloatArray:
            return np.asarray(np.bincount(assign, weights=w, minlength=n), dtype=np.float64)

        return total(self.cpu), total(self.mem), total(self.vcpus), total(self.mem_max)

    def scores(self, assign: IntArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per host: CPU%, memory%, score."""
        c, m, _, _ = self.sums(assign)
        cpu_pct = 100.0 * c / self.cpu_den
        mem_pct = 100.0 * m / self.mem_cap
        score = (self.wc * cpu_pct + self.wm * mem_pct) / (self.wc + self.wm)
        return cpu_pct, mem_pct, score

    def spreads(self, assign: IntArray) -> dict[str, float]:
        _, _, s = self.scores(assign)
        return {a: float(s[hs].max() - s[hs].min()) for a, hs in self.arches().items()}

    def capacity_rhs(self) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """Upper bounds per host of basis CPU, basis memory, vCPUs and guest memory."""
        lim = self.host_limit / 100.0
        return (
            lim * self.cpu_den,
            lim * self.mem_cap,
            self.overcommit * self.cpu_cap,
            self.mem_cap.copy(),
        )

    def host_fits(self, sums: Sequence[float], h: int) -> bool:
        c, m, vc, mm = sums
        rc, rm, rv, rmm = self.capacity_rhs()
        return bool(
            c <= rc[h] + EPS and m <= rm[h] + EPS and vc <= rv[h] + EPS and mm <= rmm[h] + 1
        )

    def capacity_violations(self, assign: IntArray) -> list[str]:
        """Hosts that received a VM and end above a capacity limit."""
        out = []
        c, m, vc, mm = self.sums(assign)
        receivers = {int(h) for h in assign[assign != self.home]}
        for h in sorted(receivers):
            if not self.host_fits((c[h], m[h], vc[h], mm[h]), h):
                out.append(f"{self.host_names[h]} over capacity")
        return out

    def rule_violations(self, assign: IntArray) -> list[str]:
        """Required-rule violations of a final state (anti-affinity, pins, fixed VMs, arch)."""
        out = []
        for v in range(self.n_vms):
            h = int(assign[v])
            if h not in self.allowed[v]:
                why = self.why_fixed.get(v, "architecture or pin")
                out.append(f"{self.vm_names[v]} on {self.host_names[h]} ({why})")
        for g in self.groups:
            seen: dict[int, int] = {}
            for v in g.members:
                d = g.domain[int(assign[v])]
                if d < 0:
                    continue
                if d in seen:
                    out.append(
                        f"{g.name}: {self.vm_names[seen[d]]} and {self.vm_names[v]} share a domain"
                    )
                seen[d] = v
        return out


def build_instance(desired: DesiredState, snapshot: Snapshot) -> Instance:
    """Independent arrays of a case; every host must be known (the generator's are)."""
    spec = desired.policy.spec
    hosts = {h.name: h for h in desired.cluster.spec.hosts}
    names: list[str] = [h.name for h in snapshot.hosts]
    index = {n: i for i, n in enumerate(names)}
    cpu_cap = np.zeros(len(names))
    mem_cap = np.zeros(len(names))
    for i, hs in enumerate(snapshot.hosts):
        mem_r, cpu_r = effective_reserve(desired.cluster, hosts[hs.name])
        cpu_cap[i] = float(hs.cpus or 0) - cpu_r
        mem_cap[i] = float(hs.memory_total or 0) - mem_r
    arch = [hs.arch or "unknown" for hs in snapshot.hosts]
    vms: list[VmState] = snapshot.vms
    used = spec.basis == Basis.USED
    home = np.array([index[vm.host] for vm in vms], dtype=np.int64)
    cpu = np.array([(vm.cpu_used or 0.0) if used else vm.vcpus for vm in vms], dtype=np.float64)
    mem = np.array(
        [(vm.memory_used or 0) if used else vm.memory_max for vm in vms], dtype=np.float64
    )
    why_fixed: dict[int, str] = {}
    pinned_to: dict[int, set[int]] = {}
    groups: list[AntiGroup] = []
    for rule in desired.rules.spec.rules:
        members = [v for v, vm in enumerate(vms) if _matches(rule.vms, vm.name, vm.labels)]
        if isinstance(rule, ExcludeRule):
            for v in members:
                why_fixed[v] = f"excluded by {rule.name}"
        elif isinstance(rule, PinRule):
            targets = {
                index[h.name]
                for h in desired.cluster.spec.hosts
                if h.name in index and _matches(rule.hosts, h.name, h.labels)
            }
            for v in members:
                pinned_to.setdefault(v, set(targets))
                pinned_to[v] &= targets
        elif isinstance(rule, AntiAffinityRule) and rule.enforcement == Enforcement.REQUIRED:
            key = rule.topology_key
            values: dict[str, int] = {}
            domain = []
            for i, n in enumerate(names):
                if key is None:
                    domain.append(i)
                else:
                    val = hosts[n].labels.get(key)
                    domain.append(-1 if val is None else values.setdefault(val, len(values)))
            groups.append(AntiGroup(rule.name, tuple(members), tuple(domain)))
    for v, vm in enumerate(vms):
        if not vm.migratable:
            why_fixed[v] = "unmigratable"
    allowed: list[list[int]] = []
    movable = np.zeros(len(vms), dtype=np.bool_)
    for v in range(len(vms)):
        h0 = int(home[v])
        if v in why_fixed:
            allowed.append([h0])
            continue
        cand = [h for h in range(len(names)) if arch[h] == arch[h0]]
        if v in pinned_to:
            cand = [h for h in cand if h in pinned_to[v]]
            if h0 in cand:
                why_fixed[v] = "pinned"
                cand = [h0]
        allowed.append(cand)
        movable[v] = len(cand) > 1 or (len(cand) == 1 and cand[0] != h0)
    return Instance(
        host_names=names,
        host_arch=arch,
        cpu_cap=cpu_cap,
        cpu_den=cpu_cap if used else cpu_cap * spec.cpu_overcommit,
        mem_cap=mem_cap,
        vm_names=[vm.name for vm in vms],
        home=home,
        cpu=cpu,
        mem=mem,
        vcpus=np.array([vm.vcpus for vm in vms], dtype=np.float64),
        mem_max=np.array([vm.memory_max for vm in vms], dtype=np.float64),
        movable=movable,
        allowed=allowed,
        groups=groups,
        wc=spec.score.cpu,
        wm=spec.score.memory,
        threshold=spec.threshold,
        host_limit=spec.host_limit,
        overcommit=spec.cpu_overcommit,
        why_fixed=why_fixed,
    )


@dataclass(frozen=True)
class Outcome:
    """A method's result on one case, judged by the benchmark's own model."""

    method: str
    moves: int  # VMs whose final host differs from their start
    gib: float  # guest memory of those VMs
    spreads: dict[str, float]
    rule_violations: list[str]
    capacity_violations: list[str]
    seconds: float
    steps: int = 0  # migrations issued (a VM moved twice counts twice)
    step_violations: int = 0  # steps after which capacity or a required rule broke
    note: str = ""

    @property
    def max_spread(self) -> float:
        return max(self.spreads.values(), default=0.0)

    def reaches(self, threshold: float) -> bool:
        return self.max_spread <= threshold + 1e-6


def judge(
    inst: Instance,
    method: str,
    assign: IntArray,
    seconds: float,
    steps: int | None = None,
    step_violations: int = 0,
    note: str = "",
) -> Outcome:
    moved = assign != inst.home
    return Outcome(
        method=method,
        moves=int(moved.sum()),
        gib=float(inst.mem_max[moved].sum() / GIB),
        spreads=inst.spreads(assign),
        rule_violations=inst.rule_violations(assign),
        capacity_violations=inst.capacity_violations(assign),
        seconds=seconds,
        steps=int(moved.sum()) if steps is None else steps,
        step_violations=step_violations,
        note=note,
    )
