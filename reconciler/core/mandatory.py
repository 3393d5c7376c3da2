"""Mandatory moves: what must change whatever the balance, simulated one move at a time.

In this order: drift (revert), required host rules (pin, hostAffinity, hostAntiAffinity),
maintenance drains, required group rules (antiAffinity, affinity, spread), hosts over
``hostLimit``. Every move is checked against the state left by the moves before it, so no
intermediate state overcommits a host or breaks a required rule that held. A drift revert or
relocation that is blocked is retried after the moves that follow it, until a round moves
nothing; what cannot be done then is returned as :class:`~reconciler.model.plan.Unsatisfiable`
data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from reconciler.core.capacity import pct
from reconciler.core.feasibility import Refusal, check_move, preferred_delta
from reconciler.core.rules import REASONS, GroupRule, describe_kind, domain_of
from reconciler.core.state import State
from reconciler.core.steps import Step, summarise, unsatisfiable
from reconciler.model.plan import Reason, Unsatisfiable, UnsatisfiableCode
from reconciler.model.policy import Drift

Code = UnsatisfiableCode


@dataclass(slots=True)
class Mandatory:
    """Moves, problems and adopted placements found by :func:`plan_mandatory`."""

    steps: list[Step] = field(default_factory=list)
    problems: list[Unsatisfiable] = field(default_factory=list)
    adopted: dict[str, str] = field(default_factory=dict)
    moved: set[int] = field(default_factory=set)


def fixed_reason(state: State, v: int) -> tuple[Code, str] | None:
    """Why the planner may not move VM ``v`` at all, or None when it may."""
    model = state.model
    vm = model.vms[v]
    if vm.in_flight:
        return Code.UNMIGRATABLE, f"{vm.name} is being migrated right now (seen on two hosts)"
    rule = model.rules.excluded.get(v)
    if rule is not None:
        return Code.EXCLUDED, f"{vm.name} is excluded by rule {rule}"
    if not vm.migratable:
        return Code.UNMIGRATABLE, f"{vm.name} cannot be live-migrated"
    return None


def candidate_hosts(state: State, v: int) -> list[int]:
    """Hosts that may take ``v`` by architecture, state and required allow-rules."""
    model = state.model
    s = state.host_of[v]
    hosts = model.arches.get(model.arch_of(s), ()) if s >= 0 else tuple(range(len(model.hosts)))
    allow = [r.hosts for r in model.rules.host_rules[v] if r.required and r.allow]
    if allow:
        smallest = min(allow, key=len)
        return [h for h in hosts if h in smallest]
    return list(hosts)


def best_target(
    state: State,
    v: int,
    hosts: Iterable[int],
    accept: Callable[[int], Refusal | None] | None = None,
) -> tuple[int | None, list[Refusal]]:
    """The host that takes ``v`` with fewest preferred rules broken, then lowest score after.

    ``accept`` adds a test (e.g. "repairs this rule") after the feasibility checks.
    """
    best: tuple[int, int, float, str] | None = None
    best_host: int | None = None
    refusals: list[Refusal] = []
    names = state.model.hosts
    for t in hosts:
        refusal = check_move(state, v, t)
        if refusal is None and accept is not None:
            refusal = accept(t)
        if refusal is not None:
            refusals.append(refusal)
            continue
        breaks, repairs = preferred_delta(state, v, t)
        key = (breaks, -repairs, state.score_with(t, v, 1), names[t].name)
        if best is None or key < best:
            best, best_host = key, t
    return best_host, refusals


class _Planner:
    def __init__(self, state: State) -> None:
        self.state = state
        self.model = state.model
        self.out = Mandatory()
        self.waiting_drift: list[tuple[int, int, str]] = []
        """Drift reverts refused so far: (VM, desired host, why), retried by :meth:`settle`."""
        self.waiting: list[tuple[int, Reason, str | None, str]] = []
        """Relocations that found no host so far, retried by :meth:`settle`."""

    def name(self, v: int) -> str:
        return self.model.vms[v].name

    def host(self, h: int) -> str:
        return self.model.hosts[h].name

    def problem(
        self, code: Code, message: str, vms: Iterable[int] = (), rule: str | None = None
    ) -> None:
        self.out.problems.append(unsatisfiable(code, message, [self.name(v) for v in vms], rule))

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
        self.problem(code, f"{why}, but {text}", [v], rule)
        return True

    def apply(self, v: int, t: int, reason: Reason, rule: str | None, detail: str) -> None:
        s = self.state.host_of[v]
        self.out.steps.append(Step(v, s, t, reason, rule, detail, True))
        self.out.moved.add(v)
        self.state.move(v, t)

    def relocate(self, v: int, reason: Reason, rule: str | None, why: str) -> bool:
        """Move ``v`` to its best feasible host; report why not when none."""
        refusals = self.try_relocate(v, reason, rule, why)
        if refusals is None:
            return True
        unreachable = self._unreachable_allowed(v)
        if unreachable and not refusals:
            self.problem(
                Code.HOST_UNKNOWN,
                f"{why}, but {unreachable} {'is' if ', ' not in unreachable else 'are'} "
                "unreachable",
                [v],
                rule,
            )
            return False
        self.problem(
            Code.NO_FEASIBLE_HOST,
            f"{why}, but no host can take {self.name(v)}: {summarise(refusals)}",
            [v],
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

    def try_relocate(
        self, v: int, reason: Reason, rule: str | None, why: str
    ) -> list[Refusal] | None:
        """Move ``v`` to its best feasible host and return None, else the refusals."""
        t, refusals = best_target(self.state, v, candidate_hosts(self.state, v))
        if t is None:
            return refusals
        self.apply(v, t, reason, rule, f"{why}; {self.name(v)} moves to {self.host(t)}.")
        return None

    def relocate_all(self, pending: list[tuple[int, Reason, str | None, str]]) -> None:
        """Relocate each; retry those that did not fit while others make room, then report."""
        while pending:
            left = [p for p in pending if self.try_relocate(*p) is not None]
            if len(left) == len(pending):
                self.waiting.extend(left)
                return
            pending = left

    def try_drift(self, v: int, t: int, why: str) -> Refusal | None:
        """Move ``v`` back to ``t`` and return None, else why it cannot go back now."""
        refusal = check_move(self.state, v, t)
        if refusal is None:
            self.apply(v, t, Reason.DRIFT, None, f"{why}; drift: revert moves it back.")
        return refusal

    def settle(self) -> None:
        """Retry what was blocked until nothing more moves, then report what is still unmet.

        A move refused early (a drift revert onto a host that another member of its
        anti-affinity still holds, a drain onto a full host) may become possible once the later
        mandatory moves are applied. Each round either moves a VM or ends, so this takes at
        most as many rounds as there are waiting items.
        """
        refusals: dict[int, Refusal] = {}
        for _ in range(len(self.waiting_drift) + len(self.waiting) + 1):
            progress = False
            drifts = []
            for v, t, why in self.waiting_drift:
                if v in self.out.moved:
                    if self.state.host_of[v] != t:
                        refusals.setdefault(v, Refusal("moved", f"{self.name(v)} moved already"))
                        drifts.append((v, t, why))
                    continue
                refusal = self.try_drift(v, t, why)
                if refusal is None:
                    progress = True
                else:
                    refusals[v] = refusal
                    drifts.append((v, t, why))
            self.waiting_drift = drifts
            relocations = []
            for item in self.waiting:
                if item[0] in self.out.moved:  # moved by a later rule to a permitted host
                    continue
                if self.try_relocate(*item) is None:
                    progress = True
                else:
                    relocations.append(item)
            self.waiting = relocations
            if not progress:
                break
        for v, _, why in self.waiting_drift:
            self.problem(
                Code.NO_FEASIBLE_HOST, f"{why}; it cannot go back: {refusals[v].text}", [v]
            )
        for item in self.waiting:
            self.relocate(*item)
        self.waiting_drift, self.waiting = [], []

    # -- drift -------------------------------------------------------------------------------

    def drift(self, placement: Mapping[str, str], mode: Drift) -> None:
        pending: list[tuple[int, int, str]] = []
        for vm_name, host_name in sorted(placement.items()):
            t = self.model.host_index.get(host_name)
            v = self.model.vm_index.get(vm_name)
            if t is None:
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
                where = "" if self.model.hosts[t].known else f" ({host_name} is unreachable)"
                self.out.problems.append(
                    unsatisfiable(
                        Code.VM_NOT_FOUND,
                        f"placement names {vm_name}, which was not observed on any reachable "
                        f"host{where}",
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
                self.problem(Code.HOST_UNKNOWN, f"{why}, which is unreachable", [v])
                continue
            pending.append((v, t, why))
        # Reverts blocked by another drifted VM (e.g. its anti-affinity partner still on the
        # desired host) are retried once the others moved; the rest wait for settle().
        while pending:
            left = [p for p in pending if self.try_drift(*p) is not None]
            if len(left) == len(pending):
                self.waiting_drift.extend(left)
                return
            pending = left

    # -- host rules ----------------------------------------------------------------------------

    def host_rules(self) -> None:
        pending: list[tuple[int, Reason, str | None, str]] = []
        for vm in self.model.vms:
            v = vm.index
            s = self.state.host_of[v]
            if vm.shadow or s < 0:
                continue
            for r in self.model.rules.host_rules[v]:
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

    # -- group rules ---------------------------------------------------------------------------

    def groups(self) -> None:
        for g in self.model.rules.groups:
            if not g.required or self.state.counts[g.index].measure() == 0:
                continue
            if g.kind == "antiAffinity" and len(g.members) > len(g.eligible):
                unit = "hosts" if g.topology_key is None else f"values of {g.topology_key}"
                self.problem(
                    Code.TOO_FEW_HOSTS,
                    f"anti-affinity {g.name} needs {len(g.members)} {unit}, "
                    f"{len(g.eligible)} are eligible",
                    g.members,
                    g.name,
                )
            if g.kind == "affinity":
                self.affinity(g)
            else:
                self.repair(g)

    def _members_by_domain(self, g: GroupRule) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for m in g.members:
            d = domain_of(g, self.state.host_of[m])
            if d is not None:
                out.setdefault(d, []).append(m)
        return out

    def repair(self, g: GroupRule) -> None:
        """antiAffinity and spread: move members from crowded to empty or thin domains."""
        counts = self.state.counts[g.index]
        reason = REASONS[g.kind]
        for _ in range(len(g.members) + 1):
            key = counts.key()
            if key[0] == 0:
                return
            by_domain = self._members_by_domain(g)
            values = [counts.count(d) for d in g.eligible] or [0]
            if g.kind == "antiAffinity":
                sources = {d for d, ms in by_domain.items() if len(ms) > 1}
                target_count = 0
            else:
                high = max(counts.counts.values())
                sources = {d for d, ms in by_domain.items() if len(ms) == high}
                target_count = min(values)
            movers: list[int] = []
            stuck: list[int] = []
            for d in sorted(sources):
                for m in by_domain[d]:
                    (
                        stuck if fixed_reason(self.state, m) or m in self.out.moved else movers
                    ).append(m)
            targets = [
                h
                for h in range(len(self.model.hosts))
                if self.model.hosts[h].accepts
                and counts.count(domain_of(g, h)) == target_count
                and domain_of(g, h) is not None
            ]
            best: tuple[int, int, int, float, str, str] | None = None
            choice: tuple[int, int] | None = None
            refusals: list[Refusal] = []
            for m in movers:
                allowed = set(candidate_hosts(self.state, m))

                def improves(t: int, m: int = m, key: tuple[int, int] = key) -> Refusal | None:
                    return _improves(self.state, g, m, t, key)

                t, refs = best_target(self.state, m, [h for h in targets if h in allowed], improves)
                refusals.extend(refs)
                if t is None:
                    continue
                breaks, repairs = preferred_delta(self.state, m, t)
                cand = (
                    breaks,
                    -repairs,
                    self.model.vms[m].memory,
                    self.state.score_with(t, m, 1),
                    self.name(m),
                    self.host(t),
                )
                if best is None or cand < best:
                    best, choice = cand, (m, t)
            if choice is None:
                kind = describe_kind(g.kind)
                if not movers and stuck:
                    names = ", ".join(sorted(self.name(m) for m in stuck))
                    self.problem(
                        Code.UNMIGRATABLE,
                        f"{kind} {g.name} is broken and none of {names} may be moved",
                        stuck,
                        g.name,
                    )
                else:
                    self.problem(
                        Code.NO_FEASIBLE_HOST,
                        f"{kind} {g.name} is broken and no move repairs it: "
                        f"{summarise(refusals)}",
                        movers + stuck,
                        g.name,
                    )
                return
            m, t = choice
            s = self.state.host_of[m]
            d_from, d_to = domain_of(g, s), domain_of(g, t)
            if g.kind == "antiAffinity":
                where = self.host(s) if g.topology_key is None else f"{d_from}"
                to = self.host(t) if g.topology_key is None else f"{self.host(t)} ({d_to})"
                detail = (
                    f"anti-affinity {g.name}: {self.name(m)} shares {where} with another "
                    f"member; {to} holds none."
                )
            else:
                detail = (
                    f"spread {g.name}: {d_from} holds {counts.count(d_from)} members and "
                    f"{d_to} {counts.count(d_to)} (maxSkew {g.max_skew}); "
                    f"{self.name(m)} moves to {self.host(t)}."
                )
            self.apply(m, t, reason, g.name, detail)

    def affinity(self, g: GroupRule) -> None:
        """Bring all members of ``g`` onto one host, the one already holding most of them."""
        by_host: dict[int, list[int]] = {}
        for m in g.members:
            by_host.setdefault(self.state.host_of[m], []).append(m)
        fixed_hosts = {
            h for h, ms in by_host.items() if any(fixed_reason(self.state, m) for m in ms)
        }
        if len(fixed_hosts) > 1:
            names = ", ".join(sorted(self.host(h) for h in fixed_hosts))
            self.problem(
                Code.UNMIGRATABLE,
                f"affinity {g.name} needs its members on one host, but members that may not "
                f"move run on {names}",
                g.members,
                g.name,
            )
            return
        high = max(len(ms) for ms in by_host.values())
        vms = self.model.vms

        def memory_to_move(h: int) -> int:
            return sum(vms[m].memory for m in g.members if m not in by_host[h])

        # Equal in moves: the host that needs the least memory moved, then the least loaded.
        options = sorted(fixed_hosts) or sorted(
            (h for h, ms in by_host.items() if len(ms) == high and h >= 0),
            key=lambda h: (memory_to_move(h), self.state.score(h), self.host(h)),
        )
        last = "no host holds a member"
        for h in options:
            done: list[tuple[int, int]] = []
            failure: str | None = None
            for m in sorted(set(g.members) - set(by_host[h])):
                refusal = check_move(self.state, m, h) if m not in self.out.moved else None
                if m in self.out.moved or fixed_reason(self.state, m):
                    failure = f"{self.name(m)} may not move"
                elif refusal is not None:
                    failure = refusal.text
                if failure:
                    break
                done.append((m, self.state.host_of[m]))
                self.state.move(m, h)
            for m, source in reversed(done):
                self.state.move(m, source)
            if failure is None:
                for m, _ in done:
                    self.apply(
                        m,
                        h,
                        Reason.AFFINITY,
                        g.name,
                        f"affinity {g.name} keeps its members together on {self.host(h)}.",
                    )
                return
            last = failure
        self.problem(
            Code.NO_FEASIBLE_HOST,
            f"affinity {g.name} is broken and its members cannot be brought together: {last}",
            g.members,
            g.name,
        )

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
                for v in movable:
                    t, _ = best_target(self.state, v, candidate_hosts(self.state, v))
                    if t is not None:
                        self.apply(
                            v,
                            t,
                            Reason.HOST_LIMIT,
                            None,
                            f"{why}; {self.name(v)} moves to {self.host(t)}.",
                        )
                        moved = True
                        break
                if not moved:
                    self.problem(
                        Code.NO_FEASIBLE_HOST,
                        f"{why}, and no VM on it can move elsewhere",
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


def _improves(state: State, g: GroupRule, m: int, t: int, key: tuple[int, int]) -> Refusal | None:
    """Accept ``t`` only when moving ``m`` there strictly lowers ``g``'s (measure, sumsq)."""
    dc = state.counts[g.index]
    a, b = domain_of(g, state.host_of[m]), domain_of(g, t)
    if dc.key_if_moved(a, b) < key:
        return None
    return Refusal(
        f"rule {g.name}", f"moving it to {state.model.hosts[t].name} does not repair {g.name}"
    )


def plan_mandatory(state: State, placement: Mapping[str, str], drift: Drift) -> Mandatory:
    """Mandatory moves in simulation order; applies them to ``state`` as it goes."""
    p = _Planner(state)
    p.drift(placement, drift)
    p.host_rules()
    p.maintenance()
    p.groups()
    p.host_limit()
    p.settle()
    return p.out
