"""Joint repair and balance, solved exactly on small scopes (MILP, HiGHS via scipy).

A *scope* is one architecture, or several that required anti-affinity groups over a
``topologyKey`` couple: a group whose members run on two architectures whose hosts share
topology values (a rack holding x86_64 and aarch64 hosts) limits both plans at once, so they
are solved together (:func:`scopes`). Groups over hosts never couple: a host has one
architecture.

For a scope of at most ``EXACT_HOSTS`` hosts, ``EXACT_VMS`` VMs and ``EXACT_COLUMNS``
variables, the cheapest plan (moves plus ``PREFERRED_COST`` per VM left on a host one of its
preferred host rules does not permit), then the fewest bytes copied (memory plus local
disks) among plans that cheap, whose final state is one where

- every VM is on a known host out of maintenance of its own architecture, permitted by its
  required host rules and not newly breaking a preferred one; VMs that may not move (in
  flight, excluded, unmigratable, cooling down or young unless a mandatory rule needs them to
  move) stay; a drifted VM under ``drift: revert`` is back on its placement host;
- every host keeps its guests' memory, vCPUs (with cpuOvercommit) and utilisation within
  usable capacity (after reserves) and ``hostLimit``, and their huge pages of each size
  within its room (:mod:`reconciler.core.hugepages`);
- every required antiAffinity holds (one member per host or topology value), counted over all
  its members, whatever their architecture;
- each architecture's score spread is within its own target (the threshold, or what the
  heuristic reached): ``lo[a] <= score[h] <= hi[a]`` for its hosts, ``hi[a] - lo[a] <=
  target[a]``.

Two solves: the cost alone (whole numbers, so the solver's bound rounds up and small models
are proven optimal at the root), then the fewest bytes to copy under that cost, skipped on
models of more than ``MEMORY_COLUMNS`` variables.
``maxOutbound``/``maxInbound`` and disruption budgets limit how many moves run at once, not
where VMs end: the waves keep them (:mod:`reconciler.core.waves`), so they are not
constraints of the final placement.

Interchangeable VMs share one integer variable per host (how many of them end there): VMs
with the same current host, hosts they may end on, memory, vCPUs, CPU and memory load, host
rules and group rules. They are told apart only when the result is read back (by name), so
the model grows with the distinct VMs, not with all of them.

Every solve's work is bounded by a node limit and HiGHS's relative gap, both deterministic: a
solve they stop gives the same plan on any machine, loaded or not, and its best plan found is
used (not proven optimal). The clock is only a safety net far above that work; a solve it cut
off is not used (a first solve: no exact plan; a memory solve: the first solve's plan), since
what it had found depends on the machine's load and the same inputs must give the same plan
and plan id. The result is a final placement; :func:`order` turns it into moves each
feasible in the state the moves before it leave, or None when no such order is found.

Only used when the heuristic met every mandatory item and the scope has no spread, affinity
or preferred group rule (not modelled here); scipy is imported only when it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from reconciler.core.capacity import VmInfo
from reconciler.core.feasibility import check_move
from reconciler.core.state import State

EXACT_HOSTS = 40
EXACT_VMS = 400
EXACT_COLUMNS = 700
"""Largest model solved whole, in (class, host) variables; larger ones (16 hosts x 8 VMs and
up) are rarely proven within the node limit and go to :mod:`reconciler.core.exact_near`."""
NODE_LIMIT = 100
"""Branch-and-bound nodes per solve: the bound of its work. HiGHS's MIP search is serial and
reads no clock for its choices, so its work is a function of the model and these options
(node limit, gap), and a solve they stop ends the same on any machine, loaded or not. The
benchmarks' whole models (``plan_quality.py``) are proven within 13 nodes and 0.7 s of CPU."""
MEMORY_NODE_LIMIT = 100
"""...and for the least memory among plans with the fewest moves."""
GAP = 1e-4
"""Relative gap at which a solve is done (HiGHS's default, given so a new default changes no
plan): far below one move on costs of whole moves."""
TIME_LIMIT = 60.0
"""Seconds per solve: a safety net, not a budget. What a solve the clock cuts off had found
depends on the machine's load, so it is not used (:func:`_stopped_by_clock`); this sits far
above what the node limit lets the benchmarks' models take, even on a machine ten times slower
and loaded."""
MEMORY_COLUMNS = 400
"""The least memory is sought on models of at most this many (class, host) variables."""
PREFERRED_COST = 1.0
"""A VM left on a host a preferred host rule does not permit costs as much as a move."""


@dataclass(frozen=True, slots=True)
class Solution:
    target: dict[int, int]
    """VM -> final host, for the VMs that move."""
    optimal: bool
    """No plan of lower cost (moves and preferred rules) exists; memory is minimised second,
    not proven."""
    preferred: int
    """Preferred host rules broken by the final placement (of the scope's VMs)."""
    columns: int = 0
    """(class, host) variables of the model solved (0: not from a solve)."""


def scopes(state: State, arches: Sequence[str]) -> list[tuple[str, ...]]:
    """``arches`` grouped into the sets required topology anti-affinity couples, in order."""
    model = state.model
    parent = {a: a for a in arches}

    def root(a: str) -> str:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for g in model.rules.groups:
        if g.topology_key is None or not g.required or g.kind != "antiAffinity":
            continue
        found = {
            model.arch_of(state.host_of[m]) for m in g.members if state.host_of[m] >= 0
        } & parent.keys()
        first, *rest = sorted(found) or [""]
        for a in rest:
            parent[root(a)] = root(first)
    out: dict[str, list[str]] = {}
    for a in arches:
        out.setdefault(root(a), []).append(a)
    return [tuple(v) for v in out.values()]


def applicable(
    state: State,
    hosts_of: Mapping[str, Sequence[int]],
    hosts: int | None = None,
    vms_at_most: int | None = None,
) -> bool:
    """Small enough (``EXACT_HOSTS`` and ``EXACT_VMS`` unless given), and every group rule
    touching the scope's VMs modelled."""
    model = state.model
    if not 2 <= sum(len(h) for h in hosts_of.values()) <= (EXACT_HOSTS if hosts is None else hosts):
        return False
    vms = _vms_of(state, hosts_of)
    if len(vms) > (EXACT_VMS if vms_at_most is None else vms_at_most):
        return False
    inside = set(vms)
    for v in vms:
        for gi in model.rules.vm_groups[v]:
            g = model.rules.groups[gi]
            if g.kind != "antiAffinity" or not g.required:
                return False
            # Members elsewhere that share topology values are planned by another scope.
            if g.topology_key is not None and any(m not in inside for m in g.members):
                return False
    return True


def _vms_of(state: State, hosts_of: Mapping[str, Sequence[int]]) -> list[int]:
    model = state.model
    return [
        v.index
        for v in model.vms
        if state.host_of[v.index] >= 0 and model.arch_of(state.host_of[v.index]) in hosts_of
    ]


Classes = dict[tuple[object, ...], tuple[list[int], list[int]]]
"""Key -> (hosts the VMs may end on, the VMs)."""


def solve(
    state: State,
    hosts_of: Mapping[str, Sequence[int]],
    movable: Callable[[int], bool],
    must_be: Mapping[int, int],
    target: Mapping[str, float],
    *,
    narrow: Callable[[int, list[int]], list[int]] | None = None,
    memory: bool = True,
    columns: int | None = None,
    seconds: float | None = None,
    nodes: int | None = None,
) -> Solution | None:
    """The optimum from ``state`` (left unchanged), None when infeasible or not found.

    ``hosts_of``: architecture -> its hosts that may take VMs; ``movable(v)``: may ``v`` move
    at all; ``must_be``: VM -> the host it must end on; ``target``: architecture -> the
    largest spread allowed; ``narrow(v, hosts)``: of the hosts its rules allow a movable VM,
    those it may end on (a neighbourhood, :mod:`reconciler.core.exact_near`); ``memory``:
    minimise the memory moved second; ``columns``: the largest model solved
    (``EXACT_COLUMNS``); ``seconds``: the clock's safety net (``TIME_LIMIT``); ``nodes``: the
    deterministic limit (``NODE_LIMIT``).
    """
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array

    model = state.model
    w = model.weights
    limit = w.host_limit / 100.0
    all_hosts = [h for hosts in hosts_of.values() for h in hosts]
    built = _classes(state, hosts_of, movable, must_be, narrow)
    if built is None or _columns(built[0]) > (EXACT_COLUMNS if columns is None else columns):
        return None
    classes, fixed = built
    if not classes:
        return None
    members = [vs for _, vs in classes.values()]
    # Column i: how many VMs of class cols[i][0] end on host cols[i][1].
    cols = [(c, h) for c, (allowed, _) in enumerate(classes.values()) for h in allowed]
    arch_list = list(hosts_of)
    n = len(cols) + 2 * len(arch_list)  # + lo, hi per architecture
    lo_col = {a: len(cols) + 2 * k for k, a in enumerate(arch_list)}
    cost = np.zeros(n)  # moves and preferred rules: integer, so HiGHS rounds its bound up
    gib = np.zeros(n)
    for i, (c, h) in enumerate(cols):
        v = members[c][0]
        if h != state.host_of[v]:
            cost[i] = 1.0
            gib[i] = model.vms[v].copy_bytes / 2**30  # memory plus local disks
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

    by_class: dict[int, list[int]] = {}
    by_host: dict[int, list[int]] = {h: [] for h in all_hosts}
    for i, (c, h) in enumerate(cols):
        by_class.setdefault(c, []).append(i)
        by_host[h].append(i)
    for c, ids in by_class.items():
        row([(i, 1.0) for i in ids], len(members[c]), len(members[c]))
    # memory, vCPUs, CPU load (from the host's pressure on), mem load
    base = {h: [0.0, 0.0, model.hosts[h].cpu_extra, 0.0] for h in all_hosts}
    staying = [v for v, _ in fixed]
    for h in all_hosts:  # in-flight second sightings still load their host
        staying.extend(v for v in state.vms_on[h] if model.vms[v].shadow)
    base_pages: dict[int, dict[int, int]] = {}  # host -> page size -> pages held by who stays
    for v in staying:
        b = base.get(state.host_of[v])
        if b is not None:
            vm = model.vms[v]
            if vm.pages:
                held = base_pages.setdefault(state.host_of[v], {})
                held[vm.page_kib] = held.get(vm.page_kib, 0) + vm.pages
            b[0] += vm.memory
            b[1] += vm.vcpus
            b[2] += vm.cpu_load
            b[3] += vm.mem_load
    inf = float("inf")
    for a, hosts in hosts_of.items():
        lo_c, hi_c = lo_col[a], lo_col[a] + 1
        for h in hosts:
            host = model.hosts[h]
            ids = by_host[h]
            vm_of = [model.vms[members[cols[i][0]][0]] for i in ids]
            b = base[h]
            row(
                [(i, vm.memory) for i, vm in zip(ids, vm_of, strict=True)],
                -inf,
                host.usable_memory - b[0],
            )
            if host.page_room is not None:
                _page_rows(row, host.page_room, ids, vm_of, base_pages.get(h, {}))
            row(
                [(i, vm.vcpus) for i, vm in zip(ids, vm_of, strict=True)],
                -inf,
                host.vcpu_capacity + 1e-9 - b[1],
            )
            row(
                [(i, vm.cpu_load) for i, vm in zip(ids, vm_of, strict=True)],
                -inf,
                limit * host.cpu_den + 1e-9 - b[2],
            )
            row(
                [(i, vm.mem_load) for i, vm in zip(ids, vm_of, strict=True)],
                -inf,
                limit * host.usable_memory + 1e-9 - b[3],
            )
            # lo <= score[h] <= hi, score linear in the columns
            cpu_k = 100.0 * w.cpu / host.cpu_den if host.cpu_den > 0 else 0.0
            mem_k = 100.0 * w.memory / host.usable_memory if host.usable_memory > 0 else 0.0
            fixed_score = cpu_k * b[2] + mem_k * b[3]
            terms = [
                (i, cpu_k * vm.cpu_load + mem_k * vm.mem_load)
                for i, vm in zip(ids, vm_of, strict=True)
            ]
            row([*terms, (hi_c, -1.0)], -inf, -fixed_score)
            row([*terms, (lo_c, -1.0)], -fixed_score, inf)
        row([(hi_c, 1.0), (lo_c, -1.0)], -inf, target[a])
    variable = {v for vs in members for v in vs}
    class_of = {v: c for c, vs in enumerate(members) for v in vs}
    for g in model.rules.groups:
        if not g.required or g.kind != "antiAffinity":
            continue
        inside = {class_of[m] for m in g.members if m in variable}
        if not inside:
            continue
        per_domain: dict[str, list[int]] = {}
        for i, (c, h) in enumerate(cols):
            d = g.domains[h]
            if c in inside and d is not None:
                per_domain.setdefault(d, []).append(i)
        # Members that do not move here, whatever their architecture, hold their domain.
        fixed_count: dict[str, int] = {}
        for m in g.members:
            h = state.host_of[m]
            d = g.domains[h] if h >= 0 and m not in variable else None
            if d is not None:
                fixed_count[d] = fixed_count.get(d, 0) + 1
        for d, ids in per_domain.items():
            row([(i, 1.0) for i in ids], -inf, 1.0 - fixed_count.get(d, 0))
    a_mat = coo_array(
        (
            np.asarray(vals, dtype=np.float64),
            (np.asarray(rows, dtype=np.int32), np.asarray(cidx, dtype=np.int32)),
        ),
        shape=(len(lo_b), n),
    ).tocsr()
    integrality = np.ones(n)
    lb = np.zeros(n)
    ub = np.zeros(n)
    for i, (c, _) in enumerate(cols):
        ub[i] = len(members[c])
    for a in arch_list:
        for j in (lo_col[a], lo_col[a] + 1):
            integrality[j] = 0
            lb[j], ub[j] = -1e6, 1e6
    constraints = [LinearConstraint(a_mat, np.array(lo_b), np.array(hi_b))]
    bounds = Bounds(lb, ub)
    res = milp(
        cost,
        constraints=constraints,
        integrality=integrality,
        bounds=bounds,
        options=limits(nodes or NODE_LIMIT, seconds or TIME_LIMIT),
    )
    if res.x is None or _stopped_by_clock(res):
        return None
    x = res.x
    # Then the fewest bytes to copy among plans of that cost, on models small enough to finish in a
    # smaller budget (larger ones rarely find a plan in it); the first plan stands otherwise.
    if memory and gib.any() and len(cols) <= MEMORY_COLUMNS:
        cap = LinearConstraint(cost.reshape(1, -1), -np.inf, float(res.fun) + 0.5)
        second = milp(
            gib,
            constraints=[*constraints, cap],
            integrality=integrality,
            bounds=bounds,
            options=limits(MEMORY_NODE_LIMIT, seconds or TIME_LIMIT),
        )
        if second.x is not None and not _stopped_by_clock(second):
            x = second.x
    counts = [round(float(v)) for v in x[: len(cols)]]
    return _read(state, members, cols, counts, fixed, res.status == 0)


def _page_rows(
    row: Callable[[list[tuple[int, float]], float, float], None],
    room: Mapping[int, int],
    ids: Sequence[int],
    vm_of: Sequence[VmInfo],
    held: Mapping[int, int],
) -> None:
    """Per huge page size the columns ending on one host use: their pages fit its room less
    what the VMs that stay there hold."""
    sizes = sorted({vm.page_kib for vm in vm_of if vm.pages})
    for kib in sizes:
        terms = [
            (i, float(vm.pages)) for i, vm in zip(ids, vm_of, strict=True) if vm.page_kib == kib
        ]
        row(terms, -float("inf"), room.get(kib, 0) - held.get(kib, 0))


def limits(nodes: int, seconds: float) -> dict[str, object]:
    """The options of every solve: the work bounded by nodes and gap, the clock a safety net."""
    return {"node_limit": nodes, "mip_rel_gap": GAP, "time_limit": seconds, "presolve": True}


def _columns(classes: Classes) -> int:
    return sum(len(allowed) for allowed, _ in classes.values())


def _classes(
    state: State,
    hosts_of: Mapping[str, Sequence[int]],
    movable: Callable[[int], bool],
    must_be: Mapping[int, int],
    narrow: Callable[[int, list[int]], list[int]] | None,
) -> tuple[Classes, list[tuple[int, int]]] | None:
    """The scope's VMs that may end elsewhere, by class, and those that stay; None when
    some VM has nowhere to go."""
    model = state.model
    classes: Classes = {}
    fixed: list[tuple[int, int]] = []
    for v in _vms_of(state, hosts_of):
        if model.vms[v].shadow:
            continue
        s = state.host_of[v]
        own = hosts_of[model.arch_of(s)]
        if must_be.get(v, -1) in own:
            allowed = [must_be[v]]
        elif not movable(v):
            allowed = [s]
        else:
            allowed = [h for h in own if _permitted(state, v, h)]
            if s in own and s not in allowed and _permitted(state, v, s, preferred=False):
                allowed.append(s)
            if narrow is not None:
                allowed = narrow(v, allowed)
        if allowed == [s]:
            fixed.append((v, s))
            continue
        if not allowed:
            return None
        vm = model.vms[v]
        key = (
            s,
            tuple(allowed),
            vm.memory,
            vm.copy_bytes,
            vm.vcpus,
            vm.cpu_load,
            vm.mem_load,
            model.rules.host_rules[v],
            model.rules.vm_groups[v],
            vm.page_kib,
            vm.pages,
        )
        classes.setdefault(key, (allowed, []))[1].append(v)
    return classes, fixed


def _stopped_by_clock(res: object) -> bool:
    """HiGHS ran out of time: what it had found by then depends on this machine's load, and a
    plan must not (the same inputs give the same plan and plan id), so it is not used."""
    return "time limit" in str(getattr(res, "message", "")).lower()


def _read(
    state: State,
    members: list[list[int]],
    cols: list[tuple[int, int]],
    counts: list[int],
    fixed: list[tuple[int, int]],
    optimal: bool,
) -> Solution:
    """The solution's VM -> host: within a class, VMs in name order stay first, then fill
    the targets in host order."""
    model = state.model
    out: dict[int, int] = {}
    broken = sum(preferred_broken(state, v, h) for v, h in fixed)
    per_class: dict[int, list[tuple[int, int]]] = {}
    for (c, h), k in zip(cols, counts, strict=True):
        if k > 0:
            per_class.setdefault(c, []).append((h, k))
    for c, placed in per_class.items():
        names = sorted(members[c], key=lambda v: model.vms[v].name)
        s = state.host_of[names[0]]
        placed.sort(key=lambda hk: (hk[0] != s, hk[0]))
        it = iter(names)
        for h, k in placed:
            for _ in range(k):
                v = next(it)
                broken += preferred_broken(state, v, h)
                if h != s:
                    out[v] = h
    return Solution(out, optimal, broken, len(cols))


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
