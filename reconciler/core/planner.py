"""``plan()``: the moves that bring a cluster toward its desired state, explained.

The planner is a pure function of the desired state, a snapshot, the history and ``now``:

1. mandatory moves (:mod:`reconciler.core.mandatory`): drift, required rules, maintenance,
   hostLimit;
2. balance moves per CPU architecture (:mod:`reconciler.core.balance`) once the score spread
   has exceeded the threshold for ``holdRounds`` rounds;
3. waves (:mod:`reconciler.core.waves`) and the batch split: the first ``batch`` moves in
   simulation order (mandatory first) are this round's, the rest are deferred.

See ``docs/planner.md`` for the rules it follows and the reasons it gives.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime

from reconciler.core import backoff, convergence, headroom, intents, load_plan, load_view
from reconciler.core.balance import BalanceSettings, plan_balance, spread_of
from reconciler.core.capacity import VmInfo
from reconciler.core.feasibility import EPSILON
from reconciler.core.identity import plan_id
from reconciler.core.joint import ArchGoal, improve
from reconciler.core.load_view import NOTHING_UNKNOWN, Unknown
from reconciler.core.mandatory import Mandatory, plan_mandatory
from reconciler.core.state import Model, State, build
from reconciler.core.steps import Step
from reconciler.core.vm_facts import balance_holds
from reconciler.core.waves import assign_waves
from reconciler.model.base import HostName, VmName, fields_of
from reconciler.model.cluster import Host
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.plan import (
    ArchSpread,
    HostLoad,
    Move,
    Plan,
    Unsatisfiable,
    UnsatisfiableCode,
)
from reconciler.model.policy import Basis, Drift
from reconciler.model.snapshot import MigrationClass, Snapshot, VmState

MAX_BALANCE_FACTOR = 10
"""Balance moves planned per round (moves plus deferred): at most this many batches..."""
MIN_BALANCE_MOVES = 50
"""...but never fewer than this, so a small batch still sees where balancing leads."""


def plan(desired: DesiredState, snapshot: Snapshot, history: History, *, now: datetime) -> Plan:
    """The plan for ``snapshot`` under ``desired``; never raises for infeasible states."""
    with collector_paused():
        return _plan(desired, snapshot, history, now)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off for the block, then as it was.

    A plan makes hundreds of thousands of short-lived objects, and every collection they set
    off walks the whole input too (25,000 VMs at 1,000 hosts): a quarter to a third of the
    plan's time. What a plan drops is freed by reference counting as it goes; a cycle, if
    any, by the first collection after it. The plan itself does not change.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _plan(desired: DesiredState, snapshot: Snapshot, history: History, now: datetime) -> Plan:
    spec = desired.policy.spec
    noted = of_note(snapshot)
    if noted.vms:  # as a round's resolution leaves them (none ended so when none is of note)
        held = intents.out_of_sight_held(snapshot)
        if held is not snapshot:
            snapshot, noted = held, of_note(held)
    model, state = build(desired, snapshot)
    before = state.copy()

    max_unit = min(spec.parallel.cluster, spec.batch)
    mandatory = plan_mandatory(state, desired.placement.spec.vms, spec.drift, max_unit)
    used = spec.basis is Basis.USED
    unknown = load_view.unknown(snapshot, model.out_of_range) if used else NOTHING_UNKNOWN
    blocked = load_plan.unknown_hosts(model, unknown)
    movable = _balance_movable(
        model, state, snapshot, history, mandatory.moved, now, desired, unknown, blocked
    )
    checked = load_plan.may_go_back(model, noted, spec.cooldown, now, movable)
    # A guest that would not converge is never moved for balance; one that needs help only
    # when no guest that converges on its own fixes the same imbalance (core.convergence).
    calm, helped = busy_guests(model, desired, movable)
    again = checked or helped != calm
    after_mandatory = state.copy() if again else state
    while True:
        state = after_mandatory.copy() if again else after_mandatory
        found = _balance(desired, history, model, before, state, mandatory, calm, blocked, unknown)
        if helped != calm and _excess(found) > EPSILON:
            more = _balance(
                desired,
                history,
                model,
                before,
                after_mandatory.copy(),
                mandatory,
                helped,
                blocked,
                unknown,
            )
            if _excess(more) < _excess(found) - EPSILON:
                found = more
        steps, state, rounds, goals, optimal, reserve = found
        back = load_plan.going_back(model, steps, snapshot, spec.cooldown, now) if checked else ()
        if not back:
            break
        for v in back:  # within its doubled backoff: plan again without moving it
            movable[v] = calm[v] = helped[v] = False
    spreads = [
        ArchSpread(
            arch=g.arch,
            before=round(spread_of(before, g.hosts), 3),
            after=round(spread_of(state, g.hosts), 3),
            threshold=spec.threshold,
            rounds_over=rounds[g.arch],
            hold_rounds=spec.hold_rounds,
            balancing=g.balancing,
        )
        for g in goals
    ]

    waves = assign_waves(steps, model, spec.parallel.cluster)
    hosts_by_name = {h.name: h for h in desired.cluster.spec.hosts}
    moves = [
        _move(model, step, wave, desired, hosts_by_name)
        for step, wave in zip(steps, waves, strict=True)
    ]
    placement = dict(desired.placement.spec.vms)
    placement.update(mandatory.adopted)
    for m in moves:
        placement[m.vm] = m.target
    problems = _dedupe(
        mandatory.problems
        + _headroom(model, before, state, steps, desired)
        + _held(model, reserve)
        + (intents.post_copy_failures(snapshot) if noted.vms else [])
    )
    cut = _batch_cut(steps, spec.batch)
    this_round, deferred = moves[:cut], moves[cut:]
    proposed = {vm: placement[vm] for vm in sorted(placement)}  # names are unique: no pairs
    return Plan(
        plan_id=plan_id(desired, this_round, deferred, problems, proposed),
        cluster=desired.cluster.metadata.name,
        created_at=now,
        observed_at=snapshot.taken_at,
        moves=this_round,
        copy_bytes=sum(m.copy_bytes for m in this_round),
        deferred=deferred,
        unsatisfiable=problems,
        hosts=_host_loads(model, before, state, load_plan.cpu_now(model, snapshot), blocked),
        spreads=spreads,
        imbalance_rounds=rounds,
        placement=proposed,
        optimal=optimal,
        load=load_plan.plan_load(snapshot, unknown, spec.load)
        if spec.basis is Basis.USED
        else None,
        backoff=backoff.held(noted, spec.cooldown, now),
    )


def of_note(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with only the sightings whose record or state says something the plan's
    checks of single sightings look for, in their order: a move with its reason (the backoffs
    and the holds on going back), an intent (a move in flight, or one that ended out of
    sight) or a failed post-copy. Those checks find nothing in any other sighting, so they
    look at these alone: one pass over 125,000 sightings at 5,000 hosts instead of four."""
    few = []
    for vm in snapshot.vms:
        f = fields_of(vm)
        r = fields_of(f["reconciler"])
        if (
            r["last_reason"] is not None
            or r["intent"] is not None
            or f["state_reason"] == intents.POST_COPY_FAILED
        ):
            few.append(vm)
    return snapshot.model_copy(update={"vms": few})


def _balance(
    desired: DesiredState,
    history: History,
    model: Model,
    before: State,
    state: State,
    mandatory: Mandatory,
    movable: list[bool],
    blocked: frozenset[int],
    unknown: Unknown,
) -> tuple[list[Step], State, dict[str, int], list[ArchGoal], bool | None, headroom.Kept]:
    """Balance moves after the mandatory ones in ``state``, the exact plan where better and
    the reserve kept: (steps, the state they leave, imbalance streaks, goals, optimal, what
    the reserve held)."""
    spec = desired.policy.spec
    max_unit = min(spec.parallel.cluster, spec.batch)
    steps: list[Step] = list(mandatory.steps)
    rounds: dict[str, int] = {}
    goals: list[ArchGoal] = []
    exact_goals: list[ArchGoal] = []
    max_balance = max(MAX_BALANCE_FACTOR * spec.batch, MIN_BALANCE_MOVES)
    for arch, all_hosts in model.arches.items():
        hosts = load_plan.balance_hosts(all_hosts, blocked)
        # Over when observed so, or when this plan's mandatory moves would make it so: the
        # next round would otherwise balance what this one could have.
        over = max(spread_of(before, hosts), spread_of(state, hosts)) > spec.threshold
        rounds[arch] = history.imbalance_rounds.get(arch, 0) + 1 if over else 0
        balancing = over and rounds[arch] >= spec.hold_rounds and unknown.hold is None
        goal = ArchGoal(arch, hosts, balancing, float(spec.threshold))
        goals.append(goal)
        if len(hosts) == len(all_hosts):
            exact_goals.append(goal)
        if balancing:
            settings = BalanceSettings(float(spec.threshold), float(spec.margin), max_balance)
            found = plan_balance(state, arch, hosts, movable.__getitem__, settings)
            max_balance -= len(found)
            steps.extend(found)
    optimal: bool | None = None
    if not mandatory.problems and max_unit >= 1 and exact_goals:
        drift = _drift_targets(model, before, desired) if spec.drift is Drift.REVERT else {}
        better, optimal = improve(before, state, steps, exact_goals, movable.__getitem__, drift)
        if better is not steps:  # the same steps leave ``state`` as it is: no replay of them
            steps, state = better, before.copy()
            for s in steps:
                state.move(s.vm, s.target)
    reserve = headroom.keeping_reserve(
        before, steps, spec.recovery.reserve_hosts, float(spec.host_limit)
    )
    if reserve.held:
        steps, optimal = reserve.steps, None
        state = before.copy()
        for s in steps:
            state.move(s.vm, s.target)
    return steps, state, rounds, goals, optimal, reserve


Balanced = tuple[list[Step], State, dict[str, int], list[ArchGoal], bool | None, headroom.Kept]


def _excess(found: Balanced) -> float:
    """How far the balancing architectures stay over their threshold after ``found``."""
    state, goals = found[1], found[3]
    return sum(max(0.0, spread_of(state, g.hosts) - g.threshold) for g in goals if g.balancing)


def busy_guests(
    model: Model, desired: DesiredState, movable: list[bool]
) -> tuple[list[bool], list[bool]]:
    """``movable`` less the guests that need help to converge, and less the guests that would
    not converge even with the help allowed (the same list when there are none of either)."""
    calm, helped = movable, movable
    for vm in model.vms:
        if vm.dirty_rate is None or not movable[vm.index]:
            continue
        allow = convergence.allowed(desired, None, vm.migration_class, _copied(vm))
        guess = convergence.forecast(vm.memory, _disk(vm), vm.dirty_rate, allow)
        if not convergence.needs_help(guess):
            continue
        if calm is movable:
            calm, helped = list(movable), list(movable)
        calm[vm.index] = False
        helped[vm.index] = guess.converges
    return calm, helped


def _disk(vm: VmInfo) -> int:
    return vm.disk_bytes if vm.migration_class is MigrationClass.COPY else 0


def _copied(vm: VmInfo) -> int:
    return vm.memory + _disk(vm)


def _headroom(
    model: Model, before: State, after: State, steps: list[Step], desired: DesiredState
) -> list[Unsatisfiable]:
    """N+k: the cluster after the plan keeps room for the VMs of any reserveHosts hosts;
    when it did before, the mandatory moves that broke it are named (they go regardless)."""
    spec = desired.policy.spec
    k = spec.recovery.reserve_hosts
    if not k:
        return []
    limit = float(spec.host_limit)
    found = headroom.problem(headroom.bins(model, after, limit), k)
    if found is None:
        return []
    if headroom.problem(headroom.bins(model, before, limit), k) is None:
        names = sorted({model.vms[s.vm].name for s in steps if s.mandatory})
        found += (
            f"; it held before this plan's mandatory move(s) of {', '.join(names)}, "
            "which go regardless"
        )
    return [Unsatisfiable(code=UnsatisfiableCode.HEADROOM, message=found)]


def _held(model: Model, reserve: headroom.Kept) -> list[Unsatisfiable]:
    """Balance moves held back to keep the reserve: the spread stays over the threshold."""
    if not reserve.held:
        return []
    first = reserve.held[0]
    move = f"{model.vms[first.vm].name} to {model.hosts[first.target].name}"
    why = f": {reserve.broke}" if reserve.broke else ""
    return [
        Unsatisfiable(
            code=UnsatisfiableCode.HEADROOM,
            vms=sorted({model.vms[s.vm].name for s in reserve.held}),
            message=f"{len(reserve.held)} balance move(s) held back to keep reserveHosts "
            f"(moving {move} would break it{why})",
        )
    ]


def _drift_targets(model: Model, state: State, desired: DesiredState) -> dict[int, int]:
    """VM index -> placement host, for the VMs placed elsewhere that may be reverted."""
    out: dict[int, int] = {}
    for vm_name, host_name in desired.placement.spec.vms.items():
        v, t = model.vm_index.get(vm_name), model.host_index.get(host_name)
        if v is not None and t is not None and state.host_of[v] != t:
            out[v] = t
    return out


def _batch_cut(steps: list[Step], batch: int) -> int:
    """Where this round ends: ``batch`` moves, less when that would split a unit."""
    cut = min(batch, len(steps))
    if 0 < cut < len(steps):
        unit = steps[cut].unit
        while cut > 0 and unit is not None and steps[cut - 1].unit == unit:
            cut -= 1
    return cut


def _balance_movable(
    model: Model,
    state: State,
    snapshot: Snapshot,
    history: History,
    moved: set[int],
    now: datetime,
    desired: DesiredState,
    unknown: Unknown,
    blocked: frozenset[int],
) -> list[bool]:
    """Per VM index: may it move for balance? Not fixed, pinned, just moved, cooling, young,
    of unknown load or on a host of unknown load."""
    spec = desired.policy.spec
    pinned, unknown_vms, observed = model.rules.pinned, unknown.vms, model.observed
    excluded = model.rules.excluded
    hold = balance_holds(spec, history, snapshot.taken_at, now)
    out: list[bool] = []
    for info, obs in zip(model.vms, _sightings(model, snapshot), strict=True):
        v = info.index
        may = not (  # ``units.is_fixed`` inline: in flight, excluded, not migratable
            info.shadow
            or info.in_flight
            or not info.migratable
            or v in excluded
            or v in moved
            or v in pinned
            or info.name in unknown_vms
            or observed[v] in blocked
        )
        if may:  # the sighting's own record last, for the VMs nothing else holds
            may = obs is not None and hold(obs) is None
        out.append(may)
    return out


def _sightings(model: Model, snapshot: Snapshot) -> Sequence[VmState | None]:
    """Per VM index, the sighting whose record holds it back or not: the first of its name
    in (name, host) order. When every sighting made a VM of its own name (no VM seen twice or
    on a host left out), that is the one the model made it from."""
    if len(model.vm_index) == len(snapshot.vms) == len(model.sightings) == len(model.vms):
        return model.sightings
    seen: dict[str, VmState] = {}
    for vm in snapshot.vms:
        other = seen.get(vm.name)
        if other is None or vm.host < other.host:
            seen[vm.name] = vm
    return [seen.get(info.name) for info in model.vms]


def _move(
    model: Model, step: Step, wave: int, desired: DesiredState, hosts: Mapping[str, Host]
) -> Move:
    vm = model.vms[step.vm]
    target = model.hosts[step.target].name
    forecast = None
    if vm.dirty_rate is not None and vm.migration_class in convergence.LIVE:
        allow = convergence.allowed(desired, hosts.get(target), vm.migration_class, _copied(vm))
        forecast = convergence.forecast(vm.memory, _disk(vm), vm.dirty_rate, allow)
    return Move(
        vm=VmName(vm.name),
        source=HostName(model.hosts[step.source].name),
        target=HostName(target),
        memory=vm.memory,
        vcpus=vm.vcpus,
        reason=step.reason,
        rule=step.rule,
        detail=step.detail,
        wave=wave,
        migration_class=vm.migration_class,
        disks=list(vm.disks),
        disk_bytes=vm.disk_bytes,
        copy_bytes=vm.copy_bytes,
        convergence=forecast,
    )


def _dedupe(problems: list[Unsatisfiable]) -> list[Unsatisfiable]:
    seen: dict[tuple[str, str, tuple[str, ...], str], Unsatisfiable] = {}
    for p in problems:
        seen.setdefault((p.code.value, p.rule or "", tuple(p.vms), p.message), p)
    return [seen[k] for k in sorted(seen)]


def _host_loads(
    model: Model,
    before: State,
    after: State,
    cpu_now: Mapping[str, float],
    blocked: frozenset[int],
) -> list[HostLoad]:
    out = []
    for h in model.hosts:
        i = h.index
        if not h.known:
            out.append(HostLoad(host=h.name, arch=h.arch, known=False))
            continue
        out.append(
            HostLoad(
                host=h.name,
                arch=h.arch,
                known=True,
                cpu_before=round(before.cpu_pct(i), 3),
                memory_before=round(before.mem_pct(i), 3),
                score_before=round(before.score(i), 3),
                cpu_after=round(after.cpu_pct(i), 3),
                memory_after=round(after.mem_pct(i), 3),
                score_after=round(after.score(i), 3),
                vms_before=len(before.vms_on[i]),
                vms_after=len(after.vms_on[i]),
                cpu_now=cpu_now.get(h.name),
                load_known=i not in blocked,
            )
        )
    return out
