"""The exact optimum of a small case, by mixed-integer linear programming (HiGHS via scipy).

Variables: binary ``x[v,h]`` (VM v ends on host h) for every movable VM and every host it may
use; continuous ``lo[a]``, ``hi[a]`` per CPU architecture. Constraints: each VM on exactly one
host; per host basis CPU and memory <= hostLimit, vCPUs <= cpuOvercommit x usable CPUs, guest
memory <= usable memory (a host already above a limit may keep, not grow, its load); required
anti-affinity per host or topology value; pins, excluded and unmigratable VMs fixed by bounds;
architecture by the variables that exist; ``lo[a] <= score[h] <= hi[a]`` for the hosts of ``a``
and ``hi[a] - lo[a] <= threshold``.

Objective: the fewest moved VMs, then the fewest GiB moved: a move of VM v costs
``1 + GiB(v) / (total GiB + 1)`` so the GiB term never outweighs one move.

Only the final state is modelled, not a sequence of migrations that keeps every intermediate
state feasible, so the optimum is a lower bound on the moves of any planner that migrates one
VM at a time.

When the threshold cannot be reached, ``min_spread`` solves the same model without the spread
bound and minimises the sum over architectures of ``max(0, spread - threshold)`` instead.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from plan_model import GIB, FloatArray, Instance, IntArray
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

TIME_LIMIT = 60.0


@dataclass(frozen=True)
class MilpResult:
    status: str  # optimal | infeasible | timeout | error
    assign: IntArray | None
    objective: float
    seconds: float
    min_moves: int = 0
    """The fewest moves any final state within the threshold can take, as far as the solver
    proved when it stopped (the optimum's moves when optimal)."""


class _Builder:
    """Rows of a sparse constraint matrix."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def add(self, terms: list[tuple[int, float]], lo: float, hi: float) -> None:
        r = len(self.lo)
        for c, val in terms:
            self.rows.append(r)
            self.cols.append(c)
            self.vals.append(val)
        self.lo.append(lo)
        self.hi.append(hi)

    def constraint(self, n: int) -> LinearConstraint:
        rows = np.array(self.rows, dtype=np.int32)
        cols = np.array(self.cols, dtype=np.int32)
        a = coo_array((np.array(self.vals), (rows, cols)), shape=(len(self.lo), n)).tocsr()
        a.indices = a.indices.astype(np.int32)
        a.indptr = a.indptr.astype(np.int32)
        return LinearConstraint(a, np.array(self.lo), np.array(self.hi))


def solve(
    inst: Instance,
    *,
    threshold: float | None,
    time_limit: float = TIME_LIMIT,
    max_moves: int | None = None,
) -> MilpResult:
    """Fewest moves reaching ``spread <= threshold`` per architecture (``threshold`` given), or
    the least total excess of spread over ``inst.threshold`` (``threshold`` None).

    ``max_moves``: a known plan's moves (a planner's), as a bound on the objective. scipy's
    HiGHS takes no starting solution; this bound prunes what such an incumbent would prune,
    and "infeasible" then means no final state needs fewer moves than that plan (or as many,
    the plan being one such state, when it reaches the threshold)."""
    t0 = time.perf_counter()
    n_h, n_v = inst.n_hosts, inst.n_vms
    var: dict[tuple[int, int], int] = {}
    fixed = np.zeros(n_v, dtype=np.bool_)
    for v in range(n_v):
        if len(inst.allowed[v]) == 1 and inst.allowed[v][0] == inst.home[v]:
            fixed[v] = True
            continue
        for h in inst.allowed[v]:
            var[(v, h)] = len(var)
    arches = inst.arches()
    arch_names = sorted(arches)
    lo_var = {a: len(var) + 2 * i for i, a in enumerate(arch_names)}
    hi_var = {a: len(var) + 2 * i + 1 for i, a in enumerate(arch_names)}
    n_x = len(var)
    n = n_x + 2 * len(arch_names)
    excess_var: dict[str, int] = {}
    if threshold is None:
        for a in arch_names:
            excess_var[a] = n
            n += 1

    fa = inst.home[fixed]
    base_c = np.bincount(fa, weights=inst.cpu[fixed], minlength=n_h)
    base_m = np.bincount(fa, weights=inst.mem[fixed], minlength=n_h)
    base_vc = np.bincount(fa, weights=inst.vcpus[fixed], minlength=n_h)
    base_mm = np.bincount(fa, weights=inst.mem_max[fixed], minlength=n_h)
    start_c, start_m, start_vc, start_mm = inst.sums(inst.home)
    rc, rm, rv, rmm = inst.capacity_rhs()
    coef = inst.score_coef()
    w = inst.wc + inst.wm
    base_score = 100.0 * (inst.wc * base_c / inst.cpu_den + inst.wm * base_m / inst.mem_cap) / w

    by_host: dict[int, list[tuple[int, int]]] = {h: [] for h in range(n_h)}
    by_vm: dict[int, list[tuple[int, int]]] = {}
    for (v, h), j in var.items():
        by_host[h].append((v, j))
        by_vm.setdefault(v, []).append((h, j))

    b = _Builder()
    for _v, hs in by_vm.items():
        b.add([(j, 1.0) for _h, j in hs], 1.0, 1.0)
    for h in range(n_h):
        members = by_host[h]
        if not members:
            continue
        for load, base, cap, start in (
            (inst.cpu, base_c, rc, start_c),
            (inst.mem, base_m, rm, start_m),
            (inst.vcpus, base_vc, rv, start_vc),
            (inst.mem_max, base_mm, rmm, start_mm),
        ):
            b.add(
                [(j, float(load[v])) for v, j in members], -np.inf, max(cap[h], start[h]) - base[h]
            )
    for a in arch_names:
        for h in arches[a]:
            terms: list[tuple[int, float]] = [(j, float(coef[v, h])) for v, j in by_host[h]]
            # score[h] - hi <= 0 ; score[h] - lo >= 0
            b.add([*terms, (hi_var[a], -1.0)], -np.inf, -float(base_score[h]))
            b.add([*terms, (lo_var[a], -1.0)], -float(base_score[h]), np.inf)
        if threshold is None:
            b.add(
                [(hi_var[a], 1.0), (lo_var[a], -1.0), (excess_var[a], -1.0)],
                -np.inf,
                inst.threshold,
            )
        else:
            b.add([(hi_var[a], 1.0), (lo_var[a], -1.0)], -np.inf, threshold)
    for g in inst.groups:
        per_domain: dict[int, list[int]] = {}
        count: dict[int, int] = {}
        for v in g.members:
            if fixed[v]:
                d = g.domain[int(inst.home[v])]
                if d >= 0:
                    count[d] = count.get(d, 0) + 1
                continue
            for h, j in by_vm.get(v, []):
                d = g.domain[h]
                if d >= 0:
                    per_domain.setdefault(d, []).append(j)
        for d, js in per_domain.items():
            b.add([(j, 1.0) for j in js], -np.inf, 1.0 - count.get(d, 0))
    if max_moves is not None:  # VMs that stay >= movable VMs - max_moves
        stay = [(j, 1.0) for (v, h), j in var.items() if h == inst.home[v]]
        b.add(stay, float(len(by_vm) - max_moves), np.inf)

    c = np.zeros(n)
    total_gib = float(inst.mem_max.sum() / GIB)
    for (v, h), j in var.items():
        if h == inst.home[v]:
            cost = 1.0 + float(inst.mem_max[v] / GIB) / (total_gib + 1.0)
            c[j] = -cost
    if threshold is None:
        big = 1000.0 * (n_v + 1)
        for a in arch_names:
            c[excess_var[a]] = big
    integrality = np.zeros(n)
    integrality[:n_x] = 1
    lb = np.zeros(n)
    ub = np.ones(n)
    ub[n_x:] = np.inf
    lb[n_x : n_x + 2 * len(arch_names)] = -np.inf
    cons = [b.constraint(n)] if b.lo else []
    res = milp(
        c,
        constraints=cons,
        integrality=integrality,
        bounds=Bounds(lb, ub),
        options={"time_limit": time_limit, "disp": False},
    )
    seconds = time.perf_counter() - t0
    if res.status == 2:
        return MilpResult("infeasible", None, float("nan"), seconds)
    if res.x is None:
        status = "timeout" if res.status == 1 else "error"
        return MilpResult(status, None, float("nan"), seconds, _min_moves(res, c, by_vm))
    x: FloatArray = res.x
    assign = inst.home.copy()
    for (v, h), j in var.items():
        if x[j] > 0.5:
            assign[v] = h
    status = "optimal" if res.status == 0 else "timeout"
    return MilpResult(status, assign, float(res.fun), seconds, _min_moves(res, c, by_vm))


def _min_moves(res: object, c: FloatArray, by_vm: dict[int, list[tuple[int, int]]]) -> int:
    """Moves proven necessary from the solver's dual bound. The objective is minus the cost of
    the VMs that stay, each ``1 + f`` with ``0 < f``, all ``f`` together below 1; so moved
    cost = all VMs' cost + objective, and moves > moved cost - 1."""
    bound = getattr(res, "mip_dual_bound", None)
    if bound is None or not np.isfinite(bound):
        return 0
    total, must = 0.0, 0  # VMs that may stay: their cost; VMs that may not: counted apart
    for hs in by_vm.values():
        stay = max(-float(c[j]) for _h, j in hs)
        total += stay
        must += stay == 0.0
    return must + max(0, math.ceil(total + float(bound) - 1.0 + 1e-6))
