"""Joint repair and balance, solved exactly on small architectures (MILP, HiGHS via scipy).

For an architecture of at most ``EXACT_HOSTS`` hosts and ``EXACT_VMS`` VMs, the fewest moves
(then the least memory moved) that reach a final state where

- every VM is on a known host out of maintenance of its architecture, permitted by its
  required host rules and not newly breaking a preferred one; VMs that may not move (in
  flight, excluded, unmigratable, cooling down or young unless a mandatory rule needs them to
  move) stay; a drifted VM under ``drift: revert`` is back on its placement host;
- every host keeps its guests' memory, vCPUs (with cpuOvercommit) and utilisation within
  usable capacity and ``hostLimit``;
- every required antiAffinity holds (one member per host or topology value);
- the score spread is within ``target`` (the threshold, or what the heuristic reached).

Objective: moves, then memory moved (less than one move in all), plus ``PREFERRED_COST`` per
VM on a host one of its preferred host rules does not permit.

Binary ``x[v,h]`` per movable VM and allowed host; ``lo <= score[h] <= hi``, ``hi - lo <=
target``. The solver gets a node limit (deterministic) and a time limit (a safety net). The
result is a final placement; :func:`order` turns it into moves each feasible in the state the
moves before it leave, or None when no such order is found.

Only used when the heuristic met every mandatory item and the architecture has no spread,
affinity or preferred group rule (not modelled here); scipy is imported only when it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from reconciler.core.feasibility import check_move
from reconciler.core.state import State

EXACT_HOSTS = 40
EXACT_VMS = 400
TIME_LIMIT = 2.0
"""Seconds per solve, a safety net: the node limit ends small problems first."""
NODE_LIMIT = 20_000
PREFERRED_COST = 1.0
"""A VM left on a host a preferred host rule does not permit costs as much as a move."""


@dataclass(frozen=True, slots=True)
class Solution:
    target: dict[int, int]
    """VM -> final host, for the VMs that move."""
    optimal: bool
    preferred: int
    """Preferred host rules broken by the final placement (of this architecture's VMs)."""


def applicable(state: State, arch: str, hosts: Sequence[int]) -> bool:
    """Small enough, and every group rule touching the architecture modelled."""
    model = state.model
    if not 2 <= len(hosts) <= EXACT_HOSTS:
        return False
    vms = _vms_of(state, arch)
    if len(vms) > EXACT_VMS:
        return False
    inside = set(vms)
    for v in vms:
        for gi in model.rules.vm_groups[v]:
            g = model.rules.groups[gi]
            if g.kind != "antiAffinity" or not g.required:
                return False
            # Per-host domains of other architectures never meet this one's; shared topology
            # values would couple the two plans.
            if g.topology_key is not None and any(m not in inside for m in g.members):
                return False
    return True


def _vms_of(state: State, arch: str) -> list[int]:
    model = state.model
    return [
        v.index
        for v in model.vms
        if state.host_of[v.index] >= 0 and model.arch_of(state.host_of[v.index]) == arch
    ]


def solve(
    state: State,
    arch: str,
    hosts: Sequence[int],
    movable: Callable[[int], bool],
    must_be: Mapping[int, int],
    target: float,
) -> Solution | None:
    """The optimum from ``state`` (left unchanged), None when infeasible or not found.

    ``movable(v)``: may ``v`` move at all; ``must_be``: VM -> the host it must end on.
    """
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array

    model = state.model
    w = model.weights
    limit = w.host_limit / 100.0
    vms = [v for v in _vms_of(state, arch) if not model.vms[v].shadow]
    host_set = set(hosts)
    cols: list[tuple[int, int]] = []
    fixed: list[tuple[int, int]] = []
    for v in vms:
        s = state.host_of[v]
        if v in must_be:
            allowed = [must_be[v]]
        elif not movable(v):
            allowed = [s]
        else:
            allowed = [h for h in hosts if _permitted(state, v, h)]
            if s in host_set and s not in allowed and _permitted(state, v, s, preferred=False):
                allowed.append(s)
        if allowed == [s]:
            fixed.append((v, s))
            continue
        if not allowed:
            return None
        cols.extend((v, h) for h in allowed)
    if not cols:
        return None
    n = len(cols) + 2  # + lo, hi
    lo_c, hi_c = n - 2, n - 1
    total_gib = sum(model.vms[v].memory for v in vms) / 2**30 + 1.0
    cost = np.zeros(n)
    for i, (v, h) in enumerate(cols):
        if h != state.host_of[v]:
            cost[i] = 1.0 + model.vms[v].memory / 2**30 / total_gib
        cost[i] += PREFERRED_COST * preferred_broken(state, v, h)
    rows: list[int] = []
    cidx: list[int] = []
    vals: list[float] = []
    lo_b: list[float] = []
    hi_b: list[float] = []

    def row(terms: list[tuple[int, float]], lo: float, hi: float) -> None:
        r = len(lo_b)
        for c, val in terms:
            rows.append(r)
            cidx.append(c)
            vals.append(val)
        lo_b.append(lo)
        hi_b.append(hi)

    by_vm: dict[int, list[int]] = {}
    by_host: dict[int, list[int]] = {h: [] for h in hosts}
    for i, (v, h) in enumerate(cols):
        by_vm.setdefault(v, []).append(i)
        by_host.setdefault(h, []).append(i)
    for ids in by_vm.values():
        row([(i, 1.0) for i in ids], 1.0, 1.0)
    base_mem = dict.fromkeys(hosts, 0.0)
    base_vcpu = dict.fromkeys(hosts, 0.0)
    base_cpu = dict.fromkeys(hosts, 0.0)
    base_load = dict.fromkeys(hosts, 0.0)
    for v, h in fixed:
        if h in host_set:
            vm = model.vms[v]
            base_mem[h] += vm.memory
            base_vcpu[h] += vm.vcpus
            base_cpu[h] += vm.cpu_load
            base_load[h] += vm.mem_load
    for h in hosts:  # in-flight second sightings still load their host
        for v in state.vms_on[h]:
            if model.vms[v].shadow:
                vm = model.vms[v]
                base_mem[h] += vm.memory
                base_vcpu[h] += vm.vcpus
                base_cpu[h] += vm.cpu_load
                base_load[h] += vm.mem_load
    inf = float("inf")
    for h in hosts:
        host = model.hosts[h]
        ids = by_host[h]
        vm_of = [cols[i][0] for i in ids]
        row(
            [(i, model.vms[v].memory) for i, v in zip(ids, vm_of, strict=True)],
            -inf,
            host.usable_memory - base_mem[h],
        )
        row(
            [(i, model.vms[v].vcpus) for i, v in zip(ids, vm_of, strict=True)],
            -inf,
            host.vcpu_capacity + 1e-9 - base_vcpu[h],
        )
        row(
            [(i, model.vms[v].cpu_load) for i, v in zip(ids, vm_of, strict=True)],
            -inf,
            limit * host.cpu_den + 1e-9 - base_cpu[h],
        )
        row(
            [(i, model.vms[v].mem_load) for i, v in zip(ids, vm_of, strict=True)],
            -inf,
            limit * host.usable_memory + 1e-9 - base_load[h],
        )
        # lo <= score[h] <= hi, score linear in x
        cpu_k = 100.0 * w.cpu / host.cpu_den if host.cpu_den > 0 else 0.0
        mem_k = 100.0 * w.memory / host.usable_memory if host.usable_memory > 0 else 0.0
        base = cpu_k * base_cpu[h] + mem_k * base_load[h]
        terms = [
            (i, cpu_k * model.vms[v].cpu_load + mem_k * model.vms[v].mem_load)
            for i, v in zip(ids, vm_of, strict=True)
        ]
        row([*terms, (hi_c, -1.0)], -inf, -base)
        row([*terms, (lo_c, -1.0)], -base, inf)
    row([(hi_c, 1.0), (lo_c, -1.0)], -inf, target)
    for g in model.rules.groups:
        if not g.required or g.kind != "antiAffinity" or not set(g.members) & set(vms):
            continue
        members = set(g.members)
        per_domain: dict[str, list[int]] = {}
        fixed_count: dict[str, int] = {}
        for i, (v, h) in enumerate(cols):
            d = g.domains[h]
            if v in members and d is not None:
                per_domain.setdefault(d, []).append(i)
        for v, h in fixed:
            d = g.domains[h]
            if v in members and d is not None:
                fixed_count[d] = fixed_count.get(d, 0) + 1
        for d, ids in per_domain.items():
            row([(i, 1.0) for i in ids], -inf, 1.0 - fixed_count.get(d, 0))
    a = coo_array(
        (
            np.asarray(vals, dtype=np.float64),
            (np.asarray(rows, dtype=np.int32), np.asarray(cidx, dtype=np.int32)),
        ),
        shape=(len(lo_b), n),
    ).tocsr()
    integrality = np.ones(n)
    integrality[lo_c] = integrality[hi_c] = 0
    lb = np.zeros(n)
    ub = np.ones(n)
    lb[lo_c] = lb[hi_c] = -1e6
    ub[lo_c] = ub[hi_c] = 1e6
    res = milp(
        cost,
        constraints=LinearConstraint(a, np.array(lo_b), np.array(hi_b)),
        integrality=integrality,
        bounds=Bounds(lb, ub),
        options={"time_limit": TIME_LIMIT, "node_limit": NODE_LIMIT, "presolve": True},
    )
    if res.x is None:
        return None
    out: dict[int, int] = {}
    broken = sum(preferred_broken(state, v, h) for v, h in fixed)
    for i, (v, h) in enumerate(cols):
        if res.x[i] > 0.5:
            broken += preferred_broken(state, v, h)
            if h != state.host_of[v]:
                out[v] = h
    return Solution(out, bool(res.status == 0), broken)


def preferred_broken(state: State, v: int, h: int) -> int:
    """Preferred host rules of ``v`` that do not permit ``h``."""
    return sum(1 for r in state.model.rules.host_rules[v] if not r.required and not r.permits(h))


def _permitted(state: State, v: int, h: int, *, preferred: bool = True) -> bool:
    """Required host rules permit ``h``; with ``preferred``, no preferred one newly breaks."""
    s = state.host_of[v]
    for r in state.model.rules.host_rules[v]:
        if r.required and not r.permits(h):
            return False
        if preferred and not r.required and r.permits(s) and not r.permits(h):
            return False
    return True


def order(
    state: State, targets: Mapping[int, int], first: Callable[[int], bool]
) -> list[tuple[int, int]] | None:
    """The moves to ``targets`` in an order where each is feasible after the ones before it
    (``state`` is left unchanged); VMs for which ``first`` holds go first where they can.
    None when some move is never feasible."""
    work = state.copy()
    pending = sorted(targets, key=lambda v: (not first(v), work.model.vms[v].name))
    out: list[tuple[int, int]] = []
    while pending:
        for i, v in enumerate(pending):
            if check_move(work, v, targets[v]) is None:
                work.move(v, targets[v])
                out.append((v, targets[v]))
                del pending[i]
                break
        else:
            return None
    return out
