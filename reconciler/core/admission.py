"""``admit()``: is a move planned earlier still valid now, and may it start now?

A plan is computed from one observation; moves run later, one after another. Just before a
move starts, the executor asks ``admit`` with a fresh look at the cluster and the moves in
progress. Each move gets one verdict:

- ``admit``: start it now;
- ``wait``: valid, but a limit is full (``parallel.cluster``, ``maxOutbound``, ``maxInbound``,
  a disruptionBudget) or the room or rule it needs is being freed by a move in progress or by
  an earlier move of the list that has not started;
- ``skip``: stale, never forced: the VM is gone, shut off, moved by someone else, in flight,
  unmigratable; a host is unreachable or in maintenance; the target is full or a required
  rule would break even after every move in progress ends.

Moves earlier in the list that are admitted count as started, not finished, for the later
ones: a move that needs one of them to end (the room it frees, a partner leaving, a member of
its required group) waits until that migration has ended, and is judged again then (if it
failed, the dependent move is stale and skipped). Those that wait count as planned: a later
move may rely on them for staleness, not for starting. Migrations libvirt shows in flight
that the caller did not start (a VM seen on two hosts) count against every limit, and a VM
in flight is counted once, on its source. The members
of one required affinity group that move together (same rule, same wave) are judged together:
the rule is checked before and after the group, not between its members.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum

from reconciler.core.admission_view import AdmissionView
from reconciler.core.feasibility import check_move
from reconciler.core.hugepages import need_of, used_after
from reconciler.core.rules import domain_of
from reconciler.core.state import Journal, Model, build
from reconciler.model.base import Frozen
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Move, Reason
from reconciler.model.snapshot import MigrationClass, Snapshot, VmRunState, VmState


class Verdict(StrEnum):
    ADMIT = "admit"
    WAIT = "wait"
    SKIP = "skip"


class AdmitCode(StrEnum):
    ADMITTED = "Admitted"
    VM_GONE = "VmGone"
    MOVED_ELSEWHERE = "MovedElsewhere"
    ALREADY_ON_TARGET = "AlreadyOnTarget"
    NOT_RUNNING = "NotRunning"
    UNMIGRATABLE = "Unmigratable"
    IN_FLIGHT = "InFlight"
    SOURCE_UNREACHABLE = "SourceUnreachable"
    TARGET_UNREACHABLE = "TargetUnreachable"
    TARGET_MAINTENANCE = "TargetMaintenance"
    NO_ROOM = "NoRoom"
    RULE_BROKEN = "RuleBroken"
    LIMIT = "Limit"
    DEPENDS_ON_RUNNING = "DependsOnRunning"


class Admission(Frozen):
    move: Move
    verdict: Verdict
    code: AdmitCode
    message: str


def admit(
    desired: DesiredState,
    snapshot: Snapshot,
    moves: Sequence[Move],
    in_progress: Sequence[Move],
    now: datetime,
) -> list[Admission]:
    """A verdict for each of ``moves``, in order, against ``snapshot`` taken just before ``now``.

    ``in_progress`` are the migrations running now: they count against every limit, and the
    room and rule counts they will change are taken as changed only for judging staleness.
    """
    del now  # the verdicts depend on what is observed, not on the clock; kept for the contract
    return judge(AdmissionView(desired, snapshot), moves, in_progress)


def judge(
    view: AdmissionView,
    moves: Sequence[Move],
    in_progress: Sequence[Move],
    *,
    until_full: bool = False,
) -> list[Admission]:
    """:func:`admit` on ``view``, which keeps its model from one call to the next.

    ``until_full``: stop once ``parallel.cluster`` migrations run or are admitted; the moves
    after that get no verdict (none of them could start, and each verdict depends only on
    the moves before it), so a pass costs what it starts, not the length of the queue.
    """
    desired = view.desired
    if view.settled:
        # nothing in flight: no foreign migration, no VM counted twice
        model, base_future, base_current = view.model()
        foreign: list[Move] = []
    else:
        snapshot = view.snapshot()
        sightings: dict[str, list[VmState]] = {}
        for vm in snapshot.vms:
            sightings.setdefault(vm.name, []).append(vm)
        foreign = _foreign_moves(sightings, view.in_flight, in_progress)
        model, base_future = build(
            desired, _counted_once(snapshot, sightings, in_progress, foreign)
        )
        base_current = base_future.copy()
    future, current = Journal(base_future), Journal(base_current)
    try:
        return _verdicts(view, model, future, current, moves, [*in_progress, *foreign], until_full)
    finally:
        future.undo()
        current.undo()


def _verdicts(
    view: AdmissionView,
    model: Model,
    future: Journal,
    current: Journal,
    moves: Sequence[Move],
    started: list[Move],
    until_full: bool,
) -> list[Admission]:
    # ``future``: every running move and every earlier move still planned has happened; a
    # move refused there is stale. ``current``: only what runs or was just admitted; a move
    # refused there waits for a migration in progress or for an earlier planned move.
    in_flight = view.in_flight
    limits = _Limits(view.desired, model)
    for m in started:
        _apply(future, model, m)
        _apply(current, model, m)
        limits.take(m)

    out: list[Admission] = []
    for i, m in enumerate(moves):
        if until_full and limits.cluster >= max(1, limits.parallel):
            break
        stale = _stale(m, model, view.sightings(m.vm), in_flight)
        if stale is not None:
            out.append(Admission(move=m, verdict=Verdict.SKIP, code=stale[0], message=stale[1]))
            continue
        v, t = model.vm_index[m.vm], model.host_index[m.target]
        group = _group_of(m, moves, i + 1)
        refusal = _refusal(future, model, v, t, group)
        if refusal is not None:
            code, text = refusal
            out.append(Admission(move=m, verdict=Verdict.SKIP, code=code, message=text))
            continue
        _apply(future, model, m)
        full = limits.full(m)
        if full is not None:
            out.append(Admission(move=m, verdict=Verdict.WAIT, code=AdmitCode.LIMIT, message=full))
            continue
        waiting = _refusal_while_running(current, model, v, t, started, group)
        if waiting is not None:
            out.append(
                Admission(
                    move=m,
                    verdict=Verdict.WAIT,
                    code=AdmitCode.DEPENDS_ON_RUNNING,
                    message=f"waits for an earlier move: {waiting[1]}",
                )
            )
            continue
        _apply(current, model, m)
        limits.take(m)
        started.append(m)  # started, not ended: later moves that depend on it wait
        out.append(
            Admission(move=m, verdict=Verdict.ADMIT, code=AdmitCode.ADMITTED, message="admitted")
        )
    return out


def _foreign_moves(
    sightings: dict[str, list[VmState]], in_flight: set[str], in_progress: Sequence[Move]
) -> list[Move]:
    """Migrations in flight that the caller did not start, as moves from source to target.

    The source is where the VM runs; the target holds the incoming copy (paused).
    """
    ours = {m.vm for m in in_progress}
    out = []
    for name in sorted(in_flight - ours):
        seen = sightings.get(name, [])
        if len(seen) < 2:
            continue
        ordered = sorted(seen, key=lambda v: (v.state is not VmRunState.RUNNING, v.host))
        src, dst = ordered[0], ordered[1]
        out.append(
            Move(
                vm=src.name,
                source=src.host,
                target=dst.host,
                memory=src.memory_max,
                vcpus=src.vcpus,
                reason=Reason.BALANCE,
                detail="a migration started by someone else",
                wave=0,
            )
        )
    return out


def _counted_once(
    snapshot: Snapshot,
    sightings: dict[str, list[VmState]],
    in_progress: Sequence[Move],
    foreign: Sequence[Move],
) -> Snapshot:
    """``snapshot`` with each VM in flight seen once, on its source: the move in progress puts
    it on its target, so the incoming copy must not be counted there as well."""
    sources = {m.vm: m.source for m in [*in_progress, *foreign]}
    doubled = {n for n, s in sightings.items() if len({v.host for v in s}) > 1 and n in sources}
    if not doubled:
        return snapshot
    vms = [v for v in snapshot.vms if v.name not in doubled or v.host == sources[v.name]]
    # The incoming copy holds its huge pages on the target already; the move counts them
    # there once it is applied, so they count as free, else the target's room loses them.
    freed: dict[str, list[tuple[int, int]]] = {}
    for v in snapshot.vms:
        need = need_of(v)
        if v.name in doubled and v.host != sources[v.name] and need is not None:
            freed.setdefault(v.host, []).append(need)
    hosts = [
        h.model_copy(update={"hugepages_free": used_after(h.hugepages_free, freed[h.name])})
        if h.name in freed and h.hugepages_free is not None
        else h
        for h in snapshot.hosts
    ]
    return snapshot.model_copy(update={"vms": vms, "hosts": hosts})


def _apply(journal: Journal, model: Model, m: Move) -> None:
    v, t = model.vm_index.get(m.vm), model.host_index.get(m.target)
    if v is not None and t is not None:
        journal.move(v, t)


def _refusal_while_running(
    current: Journal,
    model: Model,
    v: int,
    t: int,
    in_progress: Sequence[Move],
    group: Sequence[Move],
) -> tuple[AdmitCode, str] | None:
    """The refusal of ``v`` to ``t`` with the running moves it depends on put back on their
    source: until such a move ends, the room it frees is not free and the rule not settled.

    It depends on a running move that frees room on ``t`` or that moves a member of one of its
    required group rules.
    """
    rules = model.rules
    groups = {g for g in rules.vm_groups[v] if rules.groups[g].required}
    back = []
    for m in in_progress:
        s, u = model.host_index.get(m.source), model.vm_index.get(m.vm)
        if s is None or u is None:
            continue
        if s == t or groups.intersection(rules.vm_groups[u]):
            back.append((u, s))
    if not back:
        return _refusal(current, model, v, t, group)
    mark = current.mark()
    try:
        for u, s in back:
            current.move(u, s)
        return _refusal(current, model, v, t, group)
    finally:
        current.undo(mark)


def _stale(
    m: Move, model: Model, seen: Sequence[VmState], in_flight: set[str]
) -> tuple[AdmitCode, str] | None:
    if not seen:
        source = model.host_index.get(m.source)
        if source is not None and not model.hosts[source].known:
            return AdmitCode.SOURCE_UNREACHABLE, f"{m.source} is unreachable"
        return AdmitCode.VM_GONE, f"{m.vm} is no longer seen on any host"
    if len(seen) > 1 or m.vm in in_flight:
        hosts = ", ".join(sorted(s.host for s in seen))
        return AdmitCode.IN_FLIGHT, f"{m.vm} is being migrated (seen on {hosts})"
    vm = seen[0]
    if vm.host != m.source:
        if vm.host == m.target:
            return AdmitCode.ALREADY_ON_TARGET, f"{m.vm} already runs on {m.target}"
        return AdmitCode.MOVED_ELSEWHERE, f"{m.vm} now runs on {vm.host}, not on {m.source}"
    cold = m.migration_class is MigrationClass.COLD
    if vm.state is not (VmRunState.SHUTOFF if cold else VmRunState.RUNNING):
        wanted = "shut off" if cold else "running"
        return AdmitCode.NOT_RUNNING, f"{m.vm} is {vm.state.value}, not {wanted}"
    why = _unmovable(m, vm, model)
    if why is not None:
        return AdmitCode.UNMIGRATABLE, why
    t = model.host_index.get(m.target)
    if t is None or not model.hosts[t].known:
        return AdmitCode.TARGET_UNREACHABLE, f"{m.target} is unreachable"
    if model.hosts[t].maintenance:
        return AdmitCode.TARGET_MAINTENANCE, f"{m.target} is in maintenance"
    if m.vm not in model.vm_index:
        return AdmitCode.SOURCE_UNREACHABLE, f"{m.source} is unreachable"
    return None


def _unmovable(m: Move, vm: VmState, model: Model) -> str | None:
    """Why ``m`` may not start: its VM's class changed since planning, or the policy forbids it."""
    if vm.migration_class is not m.migration_class:
        return f"{m.vm} is now of class {vm.migration_class.value}, planned as {m.migration_class}"
    v = model.vm_index.get(m.vm)
    if v is not None and not model.vms[v].migratable:
        return model.vms[v].fixed or f"{m.vm} cannot be moved"
    if v is None and not vm.migratable:
        why = "; ".join(u.detail for u in vm.unmigratable) or "not live-migratable"
        return f"{m.vm} cannot be live-migrated: {why}"
    return None


def _group_of(m: Move, moves: Sequence[Move], after: int) -> list[Move]:
    """Later moves of the same required affinity group in the same wave: they move together."""
    if m.reason is not Reason.AFFINITY or m.rule is None:
        return []
    return [
        o for o in moves[after:] if o.rule == m.rule and o.wave == m.wave and o.reason is m.reason
    ]


def _refusal(
    journal: Journal, model: Model, v: int, t: int, group: Sequence[Move]
) -> tuple[AdmitCode, str] | None:
    # Plans keep units whole; the group rules of a unit's members are judged just below.
    refusal = check_move(journal.state, v, t, alone=False)
    if refusal is None:
        return None
    if refusal.category.startswith("rule ") and group and _group_fits(journal, model, v, t, group):
        return None
    code = AdmitCode.RULE_BROKEN if refusal.category.startswith("rule ") else AdmitCode.NO_ROOM
    return code, refusal.text


def _group_fits(journal: Journal, model: Model, v: int, t: int, group: Sequence[Move]) -> bool:
    """Moving ``v`` and the rest of its group together keeps every required group measure,
    and every later member still has room where it goes (else the group would end split)."""
    rules = model.rules
    touched = {g for g in rules.vm_groups[v] if rules.groups[g].required}
    counts = journal.state.counts
    before = {g: counts[g].measure() for g in touched}
    mark = journal.mark()
    try:
        journal.move(v, t)
        for m in group:
            w, u = model.vm_index.get(m.vm), model.host_index.get(m.target)
            if w is None or u is None:
                return False
            refusal = check_move(journal.state, w, u, alone=False)
            if refusal is not None and not refusal.category.startswith("rule "):
                return False
            journal.move(w, u)
        return all(
            domain_of(rules.groups[g], t) is None or counts[g].measure() <= before[g]
            for g in touched
        )
    finally:
        journal.undo(mark)


class _Limits:
    """Migrations counted against parallel.cluster, maxOutbound/maxInbound and budgets."""

    def __init__(self, desired: DesiredState, model: Model) -> None:
        self.model = model
        self.parallel = desired.policy.spec.parallel.cluster
        self.cluster = 0
        self.outbound: Counter[int] = Counter()
        self.inbound: Counter[int] = Counter()
        self.budget: Counter[int] = Counter()

    def _indices(self, m: Move) -> tuple[int | None, int | None, int | None]:
        model = self.model
        return (
            model.host_index.get(m.source),
            model.host_index.get(m.target),
            model.vm_index.get(m.vm),
        )

    def take(self, m: Move) -> None:
        s, t, v = self._indices(m)
        self.cluster += 1
        if s is not None:
            self.outbound[s] += 1
        if t is not None:
            self.inbound[t] += 1
        if v is not None:
            for b in self.model.rules.vm_budgets[v]:
                self.budget[b] += 1

    def full(self, m: Move) -> str | None:
        s, t, v = self._indices(m)
        hosts = self.model.hosts
        if self.cluster >= self.parallel:
            return f"parallel.cluster {self.parallel} migrations already run"
        if s is not None and self.outbound[s] >= hosts[s].max_outbound:
            return f"maxOutbound {hosts[s].max_outbound} of {m.source} reached"
        if t is not None and self.inbound[t] >= hosts[t].max_inbound:
            return f"maxInbound {hosts[t].max_inbound} of {m.target} reached"
        if v is not None:
            for b in self.model.rules.vm_budgets[v]:
                budget = self.model.rules.budgets[b]
                if self.budget[b] >= budget.max_concurrent:
                    return f"disruptionBudget {budget.name} allows {budget.max_concurrent} at once"
        return None
