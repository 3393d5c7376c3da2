"""Mandatory moves: what must change whatever the balance, simulated one move at a time.

Phases, in this order: drift (revert), required host rules (pin, hostAffinity,
hostAntiAffinity), maintenance drains, required group rules (antiAffinity, affinity, spread),
hosts over ``hostLimit``. Every move is checked against the state left by the moves before it,
so no intermediate state overcommits a host or breaks a required rule that held. The phases
run again, all of them, until a round moves nothing (a repair may need room a later phase
frees); only then is what is still unmet reported, once per item, as
:class:`~reconciler.model.plan.Unsatisfiable` data. A VM moves at most once per plan, so this
takes at most one round per VM.

A VM in a required affinity group moves with the members sharing its host (a *unit*, see
:mod:`reconciler.core.units`); a pin, drift revert or drain whose host is full may first move
another VM off it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from reconciler.core.capacity import pct
from reconciler.core.feasibility import Refusal
from reconciler.core.groups import groups
from reconciler.core.rules import REASONS, describe_kind
from reconciler.core.state import State
from reconciler.core.steps import Step, summarise, unsatisfiable
from reconciler.core.units import (
    CAPACITY,
    ROOM_HOSTS,
    Limits,
    Ranking,
    best_target,
    best_unit_target,
    candidate_hosts,
    check_unit,
    fixed_reason,
    room_for,
    unit_of,
)
from reconciler.model.plan import Reason, Unsatisfiable, UnsatisfiableCode
from reconciler.model.policy import Drift

__all__ = ["Mandatory", "best_target", "candidate_hosts", "fixed_reason", "plan_mandatory"]

Code = UnsatisfiableCode


@dataclass(slots=True)
class Mandatory:
    """Moves, problems and adopted placements found by :func:`plan_mandatory`."""

    steps: list[Step] = field(default_factory=list)
    problems: list[Unsatisfiable] = field(default_factory=list)
    adopted: dict[str, str] = field(default_factory=dict)
    moved: set[int] = field(default_factory=set)


class _Planner:
    def __init__(self, state: State, limits: Limits) -> None:
        self.state = state
        self.model = state.model
        self.limits = limits
        self.out = Mandatory()
        self.report = False
        """False while rounds run to a fixpoint; True for the last round, which reports."""
        self.reported: set[int] = set()
        """VMs with a relocation or drift problem reported: one reason per VM."""
        self.units = 0
        self.placement: Mapping[str, str] = {}
        self.resolved: (
            tuple[Mapping[str, str], list[tuple[str, str, int | None, int | None]]] | None
        ) = None
        self._ranking: Ranking | None = None

    @property
    def ranking(self) -> Ranking:
        """The hosts by score now, made on the first VM to place and kept with the state."""
        if self._ranking is None:
            self._ranking = Ranking(self.state)
        return self._ranking

    def name(self, v: int) -> str:
        return self.model.vms[v].name

    def host(self, h: int) -> str:
        return self.model.hosts[h].name

    def problem(
        self, code: Code, message: str, vms: Iterable[int] = (), rule: str | None = None
    ) -> None:
        if self.report:
            self.out.problems.append(
                unsatisfiable(code, message, [self.name(v) for v in vms], rule)
            )

    def vm_problem(self, v: int, code: Code, message: str, rule: str | None = None) -> None:
        """A problem about VM ``v`` alone: at most one per VM and plan."""
        if self.report and v not in self.reported:
            self.reported.add(v)
            self.problem(code, message, [v], rule)

    def blocked(self, v: int, why: str, rule: str | None) -> bool:
        """Report and return True when ``v`` may not move; ``why`` says what needs the move."""
        if v in self.out.moved:
            return True
        fixed = fixed_reason(self.state, v)
        if fixed is None:
            return False
        code, text = fixed
        if rule is None and code is Code.EXCLUDED:
            rule = self.model.rules.excluded.get(v)
        self.vm_problem(v, code, f"{why}, but {text}", rule)
        return True

    def apply(self, v: int, t: int, reason: Reason, rule: str | None, detail: str) -> None:
        self.apply_unit((v,), t, reason, rule, detail)

    def apply_unit(
        self, unit: Sequence[int], t: int, reason: Reason, rule: str | None, detail: str
    ) -> None:
        """Move every VM of ``unit`` to ``t``; two or more share one wave."""
        uid = None
        if len(unit) > 1:
            self.units += 1
            uid = self.units
            together = ", ".join(self.name(m) for m in unit)
            detail = f"{detail} ({together} move together: a required affinity holds them)"
        for v in unit:
            s = self.state.host_of[v]
            if s == t:
                continue
            self.out.steps.append(Step(v, s, t, reason, rule, detail, True, uid))
            self.out.moved.add(v)
            self.state.move(v, t)

    def movable_unit(self, v: int, why: str, rule: str | None) -> tuple[int, ...] | None:
        """The unit of ``v``, None (reported) when one of its VMs may not move."""
        unit = unit_of(self.state, v)
        for m in unit:
            if self.blocked(m, why, rule):
                return None
        return unit

    def place_unit(
        self, unit: Sequence[int], hosts: Sequence[int], reason: Reason, rule: str | None, why: str
    ) -> list[Refusal] | None:
        """Move ``unit`` to its best host among ``hosts``, making room when none fits; None
        when done, else the refusals."""
        t, refusals = best_unit_target(self.state, unit, hosts, self.limits, self.ranking)
        if t is not None:
            names = " and ".join(self.name(m) for m in unit)
            self.apply_unit(unit, t, reason, rule, f"{why}; {names} moves to {self.host(t)}.")
            return None
        roomy = sorted(
            (h for h in hosts if self.model.hosts[h].accepts),
            key=lambda h: (self.state.memory[h] - self.model.hosts[h].usable_memory, self.host(h)),
        )
        for h in roomy[:ROOM_HOSTS]:
            if self.make_room(unit, h, reason, rule, why):
                return None
        return refusals

    def make_room(
        self, unit: Sequence[int], t: int, reason: Reason, rule: str | None, why: str
    ) -> bool:
        """Move other VMs off ``t`` so ``unit`` fits, then ``unit``; False when it cannot."""
        may = {
            u
            for u in self.state.vms_on[t]
            if u not in self.out.moved
            and not self.model.vms[u].shadow
            and fixed_reason(self.state, u) is None
            and unit_of(self.state, u) == (u,)
        }
        hosts_of = {u: candidate_hosts(self.state, u) for u in may}
        evictions = room_for(self.state, unit, t, self.limits, may, hosts_of, self.ranking)
        if evictions is None:
            return False
        names = " and ".join(self.name(m) for m in unit)
        for u, h in evictions:
            self.apply(
                u,
                h,
                reason,
                rule,
                f"{why}; {self.host(t)} is full, so {self.name(u)} moves to {self.host(h)} "
                f"to make room for {names}.",
            )
        self.apply_unit(unit, t, reason, rule, f"{why}; {names} moves to {self.host(t)}.")
        return True

    def relocate(self, v: int, reason: Reason, rule: str | None, why: str) -> bool:
        """Move ``v`` (and its unit) to its best feasible host; report why not when none."""
        unit = self.movable_unit(v, why, rule)
        if unit is None:
            return False
        hosts = candidate_hosts(self.state, v)
        refusals = self.place_unit(unit, hosts, reason, rule, why)
        if refusals is None:
            return True
        unreachable = self._unreachable_allowed(v)
        if unreachable and not refusals:
            self.vm_problem(
                v,
                Code.HOST_UNKNOWN,
                f"{why}, but {unreachable} {'is' if ', ' not in unreachable else 'are'} "
                "unreachable",
                rule,
            )
            return False
        self.vm_problem(
            v,
            Code.NO_FEASIBLE_HOST,
            f"{why}, but no host can take {self.name(v)}: {summarise(refusals)}",
            rule,
        )
        return False

    def _unreachable_allowed(self, v: int) -> str:
        """The unreachable hosts a required allow-rule of ``v`` confines it to, or ''."""
        allow = [r.hosts for r in self.model.rules.host_rules[v] if r.required and r.allow]
        if not allow:
            return ""
        smallest: frozenset[int] = min(allow, key=len)
        names = sorted(self.host(h) for h in smallest if not self.model.hosts[h].known)
        return ", ".join(names)

    def relocate_all(self, pending: list[tuple[int, Reason, str | None, str]]) -> None:
        for v, reason, rule, why in pending:
            if v not in self.out.moved:
                self.relocate(v, reason, rule, why)

    def revert(self, v: int, t: int, why: str) -> Refusal | None:
        """Move ``v`` (with its unit) back to ``t`` and return None, else why it cannot now."""
        unit = unit_of(self.state, v)
        if len(unit) > 1:
            # Partners go along only when placement wants them on ``t`` too.
            want = self.host(t)
            unit = tuple(m for m in unit if self.placement.get(self.name(m), want) == want)
        for m in unit:
            if m != v and fixed_reason(self.state, m) is not None:
                return Refusal("fixed", f"{self.name(m)}, which must stay with it, may not move")
        refusal = check_unit(self.state, unit, t, self.limits)
        if refusal is None:
            self.apply_unit(unit, t, Reason.DRIFT, None, f"{why}; drift: revert moves it back.")
            return None
        if refusal.category in CAPACITY and self.make_room(
            unit, t, Reason.DRIFT, None, f"{why}; drift: revert moves it back"
        ):
            return None
        return refusal

    def run(self, placement: Mapping[str, str], mode: Drift) -> None:
        """Rounds of every phase until one moves nothing, then a reporting round."""
        self.placement = placement
        for _ in range(len(self.model.vms) + 1):
            before = len(self.out.steps)
            self.round(placement, mode)
            if len(self.out.steps) == before:
                break
        self.report = True
        self.round(placement, mode)

    def round(self, placement: Mapping[str, str], mode: Drift) -> None:
        self.drift(placement, mode)
        self.host_rules()
        self.maintenance()
        groups(self)
        self.host_limit()

    # -- drift -------------------------------------------------------------------------------

    def drift(self, placement: Mapping[str, str], mode: Drift) -> None:
        pending: list[tuple[int, int, str]] = []
        if self.resolved is None or self.resolved[0] is not placement:
            # Every round reads the same placement: look its names up once.
            vm_index, host_index = self.model.vm_index, self.model.host_index
            self.resolved = (
                placement,
                [
                    (vm_name, host_name, vm_index.get(vm_name), host_index.get(host_name))
                    for vm_name, host_name in sorted(placement.items())
                ],
            )
        host_of = self.state.host_of
        for vm_name, host_name, v, t in self.resolved[1]:
            if v is not None and host_of[v] == t:
                continue
            if t is None:
                if self.report:
                    self.out.problems.append(
                        unsatisfiable(
                            Code.HOST_UNKNOWN,
                            f"placement puts {vm_name} on {host_name}, which is not a host of "
                            "the cluster",
                            [vm_name],
                        )
                    )
                continue
            if v is None:
                if self.report:
                    where = "" if self.model.hosts[t].known else f" ({host_name} is unreachable)"
                    self.out.problems.append(
                        unsatisfiable(
                            Code.VM_NOT_FOUND,
                            f"placement names {vm_name}, which was not observed on any "
                            f"reachable host{where}",
                            [vm_name],
                        )
                    )
                continue
            s = self.state.host_of[v]
            if s == t or self.model.vms[v].in_flight:
                continue
            if mode is Drift.ADOPT:
                self.out.adopted[vm_name] = self.host(s)
                continue
            why = f"{vm_name} runs on {self.host(s)} but placement puts it on {host_name}"
            if self.blocked(v, why, None):
                continue
            if not self.model.hosts[t].known:
                self.vm_problem(v, Code.HOST_UNKNOWN, f"{why}, which is unreachable")
                continue
            pending.append((v, t, why))
        # Reverts blocked by another drifted VM (e.g. its anti-affinity partner still on the
        # desired host) are retried at once while others move; the rest wait for next round.
        refusals: dict[int, Refusal] = {}
        while pending:
            left = []
            for v, t, why in pending:
                if v in self.out.moved:
                    continue
                refusal = self.revert(v, t, why)
                if refusal is not None:
                    refusals[v] = refusal
                    left.append((v, t, why))
            if len(left) == len(pending):
                if not self._park(left):
                    break
                left = [item for item in left if item[0] not in self.out.moved]
            pending = left
        for v, _, why in pending:
            if v not in self.out.moved:
                self.vm_problem(
                    v, Code.NO_FEASIBLE_HOST, f"{why}; it cannot go back: {refusals[v].text}"
                )

    def _park(self, pending: list[tuple[int, int, str]]) -> bool:
        """Unblock one revert by moving a drifted VM in its way to a free host for now.

        Reverts that block each other (a swap of two VMs kept apart by a required
        anti-affinity, their desired hosts each taken by the other) have no direct order. One
        of them parks on a third host that keeps every rule; the other then reverts, and the
        parked VM reaches its own desired host in the next round (a VM moves once per plan).
        True when a parking move and the revert it unblocks were made.
        """
        for v, t, why in pending:
            if v in self.out.moved:
                continue
            unit_v = unit_of(self.state, v)
            for w, target_w, why_w in pending:
                if w == v or w in self.out.moved or unit_of(self.state, w) != (w,):
                    continue
                avoid = {t, target_w, self.state.host_of[w], self.state.host_of[v]}
                parks = [h for h in candidate_hosts(self.state, w) if h not in avoid]
                for h in sorted(parks, key=self.host):
                    if check_unit(self.state, (w,), h, self.limits) is not None:
                        continue
                    trial = self.state.copy()
                    trial.move(w, h)
                    if check_unit(trial, unit_v, t, self.limits) is not None:
                        continue
                    self.apply(
                        w,
                        h,
                        Reason.DRIFT,
                        None,
                        f"{why_w}; it waits on {self.host(h)} so that {self.name(v)} can take "
                        f"its place first (no direct order keeps the rules), and goes to "
                        f"{self.host(target_w)} in the next round.",
                    )
                    return self.revert(v, t, why) is None
        return False

    # -- host rules ----------------------------------------------------------------------------

    def host_rules(self) -> None:
        pending: list[tuple[int, Reason, str | None, str]] = []
        for v, rules in enumerate(self.model.rules.host_rules):
            if not rules:  # most VMs: no rule to look at, nor the VM itself
                continue
            vm = self.model.vms[v]
            s = self.state.host_of[v]
            if vm.shadow or s < 0:
                continue
            for r in rules:
                if not r.required or r.permits(s):
                    continue
                kind = describe_kind(r.kind)
                why = f"{kind} {r.name} keeps {vm.name} off {self.host(s)}"
                if r.allow:
                    why = f"{kind} {r.name} does not allow {vm.name} on {self.host(s)}"
                if not self.blocked(v, why, r.name):
                    pending.append((v, REASONS[r.kind], r.name, why))
                break
        self.relocate_all(pending)

    # -- maintenance ---------------------------------------------------------------------------

    def maintenance(self) -> None:
        pending: list[tuple[int, Reason, str | None, str]] = []
        for host in self.model.hosts:
            if not (host.maintenance and host.known):
                continue
            vms = sorted(
                (v for v in self.state.vms_on[host.index] if not self.model.vms[v].shadow),
                key=lambda v: (-self.model.vms[v].memory, self.name(v)),
            )
            why = f"{host.name} is in maintenance"
            for v in vms:
                if not self.blocked(v, f"{why} and {self.name(v)} must leave it", None):
                    pending.append((v, Reason.MAINTENANCE, None, why))
        self.relocate_all(pending)

    # -- host limit ----------------------------------------------------------------------------

    def host_limit(self) -> None:
        limit = self.model.weights.host_limit
        for host in self.model.hosts:
            if not host.accepts:
                continue
            h = host.index
            for _ in range(len(self.state.vms_on[h]) + 1):
                cpu, mem = self.state.cpu_pct(h), self.state.mem_pct(h)
                if cpu <= limit and mem <= limit:
                    break
                why = (
                    f"{host.name} is at CPU {cpu:.0f}% and memory {mem:.0f}%, over hostLimit "
                    f"{limit:g}%"
                )
                movable = sorted(
                    (
                        v
                        for v in self.state.vms_on[h]
                        if not self.model.vms[v].shadow
                        and v not in self.out.moved
                        and fixed_reason(self.state, v) is None
                    ),
                    key=lambda v: self._relief_key(h, v, limit),
                )
                moved = False
                refused: list[Refusal] = []
                for v in movable:
                    # A VM with required affinity partners on ``h`` leaves with all of them.
                    unit = unit_of(self.state, v)
                    stuck = [m for m in unit if m in self.out.moved or fixed_reason(self.state, m)]
                    if stuck:
                        refused.append(
                            Refusal(
                                "unit",
                                f"{self.name(v)} must move with {self.name(stuck[0])} (a "
                                "required affinity holds them together), which may not move",
                            )
                        )
                        continue
                    hosts = candidate_hosts(self.state, v)
                    if len(unit) == 1:
                        t, refusals = best_target(self.state, v, hosts, ranking=self.ranking)
                    else:
                        t, refusals = best_unit_target(
                            self.state, unit, hosts, self.limits, self.ranking
                        )
                    refused.extend(refusals)
                    if t is not None:
                        names = " and ".join(self.name(m) for m in unit)
                        self.apply_unit(
                            unit,
                            t,
                            Reason.HOST_LIMIT,
                            None,
                            f"{why}; {names} moves to {self.host(t)}.",
                        )
                        moved = True
                        break
                if not moved:
                    because = f": {summarise(refused)}" if refused else ""
                    self.problem(
                        Code.NO_FEASIBLE_HOST,
                        f"{why}, and no VM on it can move elsewhere{because}",
                        sorted(self.state.vms_on[h]),
                    )
                    break

    def _relief_key(self, h: int, v: int, limit: float) -> tuple[int, float, str]:
        """VMs whose departure brings ``h`` under the limit first (smallest), then biggest."""
        vm = self.model.vms[v]
        host = self.model.hosts[h]
        cpu = pct(self.state.cpu_load[h] - vm.cpu_load, host.cpu_den)
        mem = pct(self.state.mem_load[h] - vm.mem_load, host.usable_memory)
        if cpu <= limit and mem <= limit:
            return 0, float(vm.memory), vm.name
        return (
            1,
            -(vm.cpu_load / max(host.cpu_den, 1e-9) + vm.mem_load / max(host.usable_memory, 1)),
            vm.name,
        )


def plan_mandatory(
    state: State, placement: Mapping[str, str], drift: Drift, max_unit: int = 1_000_000
) -> Mandatory:
    """Mandatory moves in simulation order; applies them to ``state`` as it goes.

    ``max_unit``: the most migrations one wave and batch allow, the largest unit that can move.
    """
    p = _Planner(state, Limits(max_unit))
    p.run(placement, drift)
    return p.out
