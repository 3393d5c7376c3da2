"""The simulation loop: the trace played step by step, a round every ``spec.interval``.

Each round of the product's policy is decided by ``core.next_actions`` exactly as ``run``
decides it (the same two functions, never a copy): observed facts from the world's snapshot,
then the plan, whether to act and what; its moves are carried out in time
(:mod:`.moves`), the VMs' records written as the engine writes them, the status (the streak
``holdRounds`` counts) as ``core.rounds.round_status`` makes it, and placement.yaml follows
the moves as the round's record makes it follow them. Like ``run``, the next round starts
once the round's moves have ended. A reference policy that is not the product's (the
literature's heuristics, in the benchmarks) plugs in as another :class:`Decider`.

Memory stays flat in the number of rounds: the figures are running totals, and the timeline
keeps at most :data:`MAX_TIMELINE` points (past that, each point stands for two, then four
rounds, ...: :class:`Timeline`). The replay holds Python's cyclic garbage collector off, as the
planner does (a round makes hundreds of thousands of short-lived objects, and each collection
they set off walks the whole cluster again), and collects every :data:`COLLECT_EVERY`
rounds.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from reconciler.core import backoff, load_view, rounds
from reconciler.core.hugepages import started
from reconciler.core.next_actions import (
    ObservedFacts,
    RolloutHolds,
    first_seen_stamps,
    next_actions,
    observed_facts,
)
from reconciler.core.placer import place
from reconciler.core.planner import collector_paused
from reconciler.core.power import HostFacts, power_next
from reconciler.core.simulation.meter import Meter
from reconciler.core.simulation.moves import Flight, flights
from reconciler.core.simulation.trace import Trace
from reconciler.core.simulation.world import UPTIME, World
from reconciler.core.windows import mode_now
from reconciler.model.base import HostName, VmName, VmUuid
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Move
from reconciler.model.policy import Basis, Mode
from reconciler.model.power import PowerBook, PowerMode
from reconciler.model.simulation import (
    MAX_MOVES_LISTED,
    HostKind,
    PolicyFigures,
    SimulatedMove,
    TimelinePoint,
)
from reconciler.model.snapshot import (
    FailedMove,
    HostState,
    Snapshot,
    VmRunState,
    VmState,
)
from reconciler.model.status import MoveOutcome, MoveResult, ReconcileStatus

if TYPE_CHECKING:  # a cluster without rollouts never loads the rollout modules
    from reconciler.core.simulation.rollouts import RolloutPlay

ACTOR = "simulate"
"""The actor the simulated rounds name on their intents and moves."""

MAX_TIMELINE = 4096
"""Points of a policy's timeline, at most: two weeks of rounds every 5 minutes one a round."""
COLLECT_EVERY = 64
"""Rounds between two collections of cyclic garbage during a replay."""


@dataclass(frozen=True)
class Decision:
    """What one round of a policy decided."""

    moves: list[Move]
    desired: DesiredState
    """The desired state the moves are admitted under."""
    snapshot: Snapshot
    spread: float | None = None
    """The largest score spread the round saw, where the policy computes one."""
    unknown: bool = False
    """A VM's load was unknown to the round."""
    busy: float = 0.0
    """Seconds the round's rollout steps took before it planned: its moves start after."""


class Decider(Protocol):
    name: str
    admitted: bool
    """Its moves pass the product's admission and parallel limits."""

    def decide(self, world: World, now: datetime) -> Decision: ...

    def after(self, results: list[MoveResult], now: datetime) -> None: ...


@dataclass
class RunDecider:
    """The product's policy: each round what ``run`` would decide, power saving included
    (``core.power``: hosts emptied, powered off and on; a boot takes ``boot_seconds``)."""

    desired: DesiredState
    name: str = "policy"
    admitted: bool = True
    status: ReconcileStatus | None = None
    boot_seconds: float = 300.0
    book: PowerBook = field(default_factory=PowerBook)
    power_offs: int = 0
    power_ons: int = 0
    rollout_step: float = 600.0
    """Seconds a rollout's step that runs a command takes (``--rollout-step``)."""
    rollouts: RolloutPlay | None = None
    """The rollouts of ``desired`` as played so far (made at the first round)."""
    _last: Decision | None = None

    def decide(self, world: World, now: datetime) -> Decision:
        snapshot = world.snapshot(now)
        seconds = (now - world.trace.start).total_seconds()
        holds = None
        if self.desired.policy.spec.power.mode is not PowerMode.OFF or self.book.standby:
            holds = self._power(world, snapshot, now, seconds)
        facts = observed_facts(
            self.desired, snapshot, self.status, now=now, actor=ACTOR, placement_changed_at=None
        )
        act = self._acts(now)
        busy = 0.0
        if self.desired.rollouts:
            holds, busy = self._rollouts(facts, world, now, act, holds)
        actions = next_actions(
            facts, act=act, holds=True, confirm=False, actor=ACTOR, now=now, rollouts=holds
        )
        world.stamped(first_seen_stamps(actions.snapshot, facts.history, now))
        plan = actions.plan
        spread = max((s.before for s in plan.spreads), default=None)
        if actions.planned.policy.spec.basis is Basis.USED:  # the plan looked: its own list
            unknown = plan.load is not None and bool(plan.load.unknown_vms)
        else:
            unknown = bool(load_view.unknown(actions.snapshot).vms)
        moves = plan.moves if actions.act else []
        self._last = Decision(moves, actions.planned, actions.snapshot, spread, unknown, busy)
        self._plan = plan
        return self._last

    def _rollouts(
        self,
        facts: ObservedFacts,
        world: World,
        now: datetime,
        act: bool,
        power: RolloutHolds | None,
    ) -> tuple[RolloutHolds, float]:
        """The rollouts carried on as ``run`` carries them in a round that acts on a cluster
        observed completely once (else only looked at); power saving's hosts join what they
        hold out, as in ``run``. What they hold, and the seconds their steps took."""
        from reconciler.core.simulation.rollouts import RolloutPlay

        if self.rollouts is None:
            self.rollouts = RolloutPlay(step=self.rollout_step)
        acts = act and facts.history.observed_since is not None
        held, busy = self.rollouts.round(facts.desired, facts.snapshot, world, now, act=acts)
        if power is not None and power.out:
            held = replace(held, out=tuple(dict.fromkeys((*held.out, *power.out))))
        return held, busy

    def _acts(self, now: datetime) -> bool:
        """Whether a round at ``now`` may move VMs: as ``run`` in apply mode decides it (only
        inside the policy's windows, when it has any)."""
        spec = self.desired.policy.spec.model_copy(update={"mode": Mode.APPLY})
        return mode_now(spec, now) is Mode.APPLY

    def _power(
        self, world: World, snapshot: Snapshot, now: datetime, seconds: float
    ) -> RolloutHolds:
        """The round's power decision carried out on the world; the hosts the plan keeps
        empty (being emptied, asleep, booting)."""
        booted = world.booted(seconds)
        if booted:
            booting = {h: t for h, t in self.book.booting.items() if h not in booted}
            self.book = self.book.model_copy(update={"booting": booting})
        facts = {
            h: HostFacts(idle_watts=k.power.curve()[0])
            for h, k in zip(world.hosts, world.kinds, strict=False)
        }
        decided = power_next(self.desired, snapshot, self.book, now, facts=facts)
        self.book = decided.book
        if self.desired.policy.spec.power.mode is PowerMode.APPLY or self.book.standby:
            for host in decided.power_off:
                world.power_off(host)
                self.power_offs += 1
            for host in decided.power_on:
                world.power_on(host, seconds + self.boot_seconds)
                self.power_ons += 1
        else:  # propose: nothing switched, nothing emptied
            self.book = self.book.model_copy(update={"emptying": {}, "standby": {}})
            return RolloutHolds()
        out = (*self.book.emptying, *self.book.standby, *self.book.booting)
        return RolloutHolds(out=tuple(sorted(set(out))))

    def after(self, results: list[MoveResult], now: datetime) -> None:
        assert self._last is not None
        if self.rollouts is not None:
            self.rollouts.after(results)
        facts = rounds.RoundFacts(
            plan=self._plan,
            snapshot=self._last.snapshot,
            results=results,
            acted=bool(self._last.moves),
        )
        self.status = rounds.round_status(
            self.desired,
            self.status,
            facts,
            started=self._last.snapshot.taken_at,
            finished=now,
            trigger="schedule",
            revision=None,
        )
        writes, _ = rounds.placement_updates(self.desired, self._plan, results)
        if writes:
            placement = self.desired.placement
            vms = {**placement.spec.vms, **writes}
            spec = placement.spec.model_copy(update={"vms": vms})
            self.desired = self.desired.model_copy(
                update={"placement": placement.model_copy(update={"spec": spec})}
            )


class Timeline:
    """A policy's points, one a round until :data:`MAX_TIMELINE`; then two neighbours merge
    into one (the first's time, the larger spread and hot count, the migrations summed, the
    fewer hosts powered), so that each point stands for twice as many rounds as before."""

    def __init__(self, limit: int = MAX_TIMELINE) -> None:
        self.limit = max(2, limit - limit % 2)
        self.points: list[TimelinePoint] = []
        self.per_point = 1
        """Rounds each point stands for."""
        self._open: TimelinePoint | None = None
        self._in_open = 0

    def add(self, point: TimelinePoint) -> None:
        if self.per_point == 1:
            self.points.append(point)
        else:
            self._open = point if self._open is None else merged(self._open, point)
            self._in_open += 1
            if self._in_open < self.per_point:
                return
            self.points.append(self._open)
            self._open, self._in_open = None, 0
        if len(self.points) >= self.limit:
            pairs = zip(self.points[0::2], self.points[1::2], strict=False)
            self.points = [merged(a, b) for a, b in pairs]
            self.per_point *= 2

    def all(self) -> list[TimelinePoint]:
        """The points, the last one standing for fewer rounds where the period ended so."""
        return self.points if self._open is None else [*self.points, self._open]


def merged(a: TimelinePoint, b: TimelinePoint) -> TimelinePoint:
    spreads = [s for s in (a.spread, b.spread) if s is not None]
    return TimelinePoint(
        at=a.at,
        spread=max(spreads) if spreads else None,
        hot=max(a.hot, b.hot),
        migrations=a.migrations + b.migrations,
        powered=min(a.powered, b.powered),
    )


@dataclass
class Tally:
    rounds: int = 0
    migrations: int = 0
    moved_back: int = 0
    aborted: int = 0
    unknown_rounds: int = 0
    spread_peak: float = 0.0
    spread_sum: float = 0.0
    spread_rounds: int = 0
    timeline: Timeline = field(default_factory=Timeline)
    moves: list[SimulatedMove] = field(default_factory=list)
    """The first ``MAX_MOVES_LISTED`` moves, in the order they began."""

    def move(self, f: Flight) -> None:
        if len(self.moves) < MAX_MOVES_LISTED:
            m = f.move
            self.moves.append(
                SimulatedMove(
                    at=f.start,
                    vm=m.vm,
                    source=m.source,
                    target=m.target,
                    reason=m.reason.value,
                    seconds=f.end - f.start,
                    aborted=f.aborted,
                )  # fmt: skip
            )

    def spread(self, value: float) -> None:
        self.spread_peak = value if self.spread_rounds == 0 else max(self.spread_peak, value)
        self.spread_sum += value
        self.spread_rounds += 1


def replay(
    world: World,
    decider: Decider,
    meter: Meter,
    *,
    interval: timedelta,
    steps: int | None = None,
) -> PolicyFigures:
    """Play ``world``'s trace through ``decider``'s rounds; the figures of the period."""
    with collector_paused():
        return _replay(world, decider, meter, interval, steps)


def _replay(
    world: World, decider: Decider, meter: Meter, interval: timedelta, steps: int | None
) -> PolicyFigures:
    trace = world.trace
    tick = trace.step
    total = trace.steps if steps is None else min(steps, trace.steps)
    curves = [k.power.curve() for k in world.kinds]
    dirty = {v.name: v.dirty for v in trace.vms}
    tally = Tally()
    next_round = 0.0
    running: list[tuple[Flight, int, int, int]] = []  # (flight, vm, source, target)
    for k in range(total):
        t0, t1 = k * tick, (k + 1) * tick
        if t0 >= next_round:
            now = trace.start + timedelta(seconds=t0)
            decision = decider.decide(world, now)
            tally.rounds += 1
            tally.unknown_rounds += decision.unknown
            if decision.spread is not None:
                tally.spread(decision.spread)
            begins = t0 + decision.busy
            planned = flights(
                decision.desired,
                decision.snapshot,
                decision.moves,
                begins,
                dirty,
                admitted=decider.admitted,
            )
            results = [_result(world, f, trace.start, tally) for f in planned]
            running += [_where(world, f) for f in planned]
            ends = max((f.end for f in planned), default=begins)
            decider.after(results, trace.start + timedelta(seconds=ends))
            next_round = max(t0 + interval.total_seconds(), ends)
            demand = world.demand(t0)
            hot = _hot(world, demand, meter.limit)
            tally.timeline.add(
                TimelinePoint(
                    at=t0,
                    spread=decision.spread,
                    hot=hot,
                    migrations=len(planned),
                    powered=len(world.hosts) - len(world.asleep),
                )
            )
            del decision, planned, results
            if tally.rounds % COLLECT_EVERY == 0:
                gc.collect()
        else:
            demand = world.demand(t0)
        meter.interval(t0, t1, demand, world.host_of, world.capacity, curves, running, world.asleep)
        running = _landed(world, running, t1, trace.start)
    figures = _figures(decider.name, tally, meter, total * tick)
    if isinstance(decider, RunDecider):
        played = decider.rollouts.figures(trace.start) if decider.rollouts is not None else []
        figures = figures.model_copy(
            update={
                "power_offs": decider.power_offs,
                "power_ons": decider.power_ons,
                "rollouts": played,
            }
        )
    return figures


def _hot(world: World, demand: Sequence[float], limit: float) -> int:
    """Hosts whose demand is above ``limit`` of their capacity."""
    load = [0.0] * len(world.hosts)
    for vm, d in enumerate(demand):
        load[world.host_of[vm]] += d
    return sum(1 for h, c in enumerate(world.capacity) if c > 0 and load[h] / c > limit)


def _where(world: World, f: Flight) -> tuple[Flight, int, int, int]:
    m = f.move
    return f, world.vm_index[m.vm], world.index[m.source], world.index[m.target]


def _result(world: World, f: Flight, start: datetime, tally: Tally) -> MoveResult:
    m = f.move
    at = start + timedelta(seconds=f.start)
    tally.move(f)
    if f.aborted:
        tally.aborted += 1
        return MoveResult(
            vm=m.vm,
            source=m.source,
            target=m.target,
            outcome=MoveOutcome.FAILED,
            reason=m.reason.value,
            detail="aborted: it would not converge",
            started_at=at,
            seconds=f.end - f.start,
        )
    tally.migrations += 1
    if world.records[world.vm_index[m.vm]].last_moved_from == m.target:
        tally.moved_back += 1
    return MoveResult(
        vm=m.vm,
        source=m.source,
        target=m.target,
        outcome=MoveOutcome.SUCCEEDED,
        reason=m.reason.value,
        detail=m.detail,
        started_at=at,
        seconds=f.end - f.start,
    )


def _landed(
    world: World, running: list[tuple[Flight, int, int, int]], t: float, start: datetime
) -> list[tuple[Flight, int, int, int]]:
    """The moves that ended by ``t`` written into the world (host, record); those still on."""
    left = []
    for f, vm, src, dst in running:
        if f.end > t:
            left.append((f, vm, src, dst))
            continue
        old = world.records[vm]
        at = start + timedelta(seconds=f.end)
        m = f.move
        if f.aborted:
            failure = FailedMove(
                at=at, source=m.source, target=m.target, plan_id=None, error="aborted"
            )
            world.moved(vm, src, old.model_copy(update={"last_failure": failure}))
        else:
            record = backoff.recorded(
                old,
                reason=m.reason.value,
                source=m.source,
                target=m.target,
                at=at,
                plan_id=None,
                actor=ACTOR,
            )
            world.moved(vm, dst, record)
    return left


def _figures(name: str, tally: Tally, meter: Meter, seconds: float) -> PolicyFigures:
    kwh = meter.joules / 3.6e6
    slav = meter.slatah * meter.pdm
    days = seconds / 86400 if seconds else 1.0
    return PolicyFigures(
        policy=name,
        rounds=tally.rounds,
        migrations=tally.migrations,
        migrations_per_day=round(tally.migrations / days, 3),
        moved_back=tally.moved_back,
        aborted=tally.aborted,
        slatah=meter.slatah,
        pdm=meter.pdm,
        slav=slav,
        energy_kwh=kwh,
        esv=kwh * slav,
        host_hours=meter.powered_seconds / 3600,
        hours_over_limit=meter.over_limit_seconds / 3600,
        spread_peak=tally.spread_peak,
        spread_mean=tally.spread_sum / tally.spread_rounds if tally.spread_rounds else 0.0,
        unknown_rounds=tally.unknown_rounds,
        timeline=tally.timeline.all(),
        moves=tally.moves,
    )


def initial_placement(
    desired: DesiredState, trace: Trace, kinds: Mapping[str, HostKind], now: datetime
) -> dict[str, str]:
    """Where the trace's VMs start: each where ``place`` puts a new VM of its size, with the
    VMs placed before it counted; VMs the placement already puts somewhere stay there."""
    listed = desired.placement.spec.vms
    hosts = [
        HostState(
            name=HostName(h.name),
            uri=f"sim:///{h.name}",
            reachable=True,
            arch=kinds[h.name].arch,
            cpus=kinds[h.name].cpus,
            memory_total=kinds[h.name].memory,
            memory_free=kinds[h.name].memory,
        )
        for h in desired.cluster.spec.hosts
    ]
    snapshot = Snapshot(cluster=desired.cluster.metadata.name, taken_at=now, hosts=hosts, vms=[])
    out: dict[str, str] = {}
    for i, vm in enumerate(trace.vms):
        host = listed.get(vm.name)
        if host is None:
            answer = place(
                desired,
                snapshot,
                vcpus=vm.vcpus,
                memory=vm.memory,
                labels=dict(vm.labels),
                name=vm.name,
                now=now,
            )
            if answer.host is None:
                raise ValueError(f"{vm.name} fits on no host at the start: {answer.message}")
            host = answer.host
        out[vm.name] = host
        snapshot = started(
            snapshot,
            VmState(
                name=VmName(vm.name),
                uuid=VmUuid(f"sim-{i:08d}"),
                host=HostName(host),
                state=VmRunState.RUNNING,
                vcpus=vm.vcpus,
                memory_max=vm.memory,
                memory_current=vm.memory,
                cpu_used=0.0,
                uptime=UPTIME,
                labels=dict(vm.labels),
            ),
        )
    return out


def rounds_in(trace: Trace, interval: timedelta) -> int:
    """How many rounds a trace holds at ``interval`` (at least one per step)."""
    per = max(interval.total_seconds(), trace.step)
    return math.ceil(trace.steps * trace.step / per)
