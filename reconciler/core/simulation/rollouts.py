"""The cluster's rollouts played in simulated time, as ``run`` carries them out in a round.

What a rollout does next is ``core.rollout.next_actions_all``, the decision ``run``'s engine
(``engine/rollouts.py``) asks; this module carries its actions out on the simulated world
the way the engine does, in the same order, and asks again until nothing more can be done
now:

- a drain begins (recorded); the round's plan then empties the host (``RolloutHolds.out``:
  drained as in maintenance, within ``batch``, ``parallel`` and cooldown), and a later round
  finds it empty and records the drain's end, as the engine's next look does;
- a command, the reboot, a step before or after is not run: it takes ``step`` seconds of
  simulated time (or its ``timeout`` when shorter: a command never runs longer) and
  succeeds; like ``run``, which carries them out one after the other before it plans, the
  round's moves start once they are over;
- ``ready`` passes at its first look (the host is back once its reboot is over), then waits
  its ``settle`` time; a shutdown of VMs that cannot leave and their start take no time;
- the round then plans with what the rollouts hold out and keep out of balance, exactly as
  ``run`` does (``core.next_actions``'s ``rollouts``).

Rounds come every ``spec.interval`` (at least one trace step): what a rollout waits for (a
drain, a settle time, a window) is looked at again at the next round, where ``run`` would
look sooner. A round that does not act (outside the policy's windows) only reads where the
rollouts stand, as in ``run``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from reconciler.core.next_actions import RolloutHolds
from reconciler.core.rollout import (
    Action,
    BeginDrain,
    CheckReady,
    Decision,
    Record,
    RunCommand,
    ShutDown,
    StartVms,
    next_actions_all,
)
from reconciler.core.simulation.world import World
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Reason
from reconciler.model.rollout_progress import StepOutcome, StepRecord
from reconciler.model.simulation import RolloutFigures
from reconciler.model.snapshot import Snapshot, VmRunState
from reconciler.model.status import MoveOutcome, MoveResult

BY = "simulate"
"""The instance the simulated records name."""
MAX_STEPS = 200
"""Decisions carried out in one round at most, as in the engine."""
DEFAULT_STEP = 600.0
"""Seconds a step that runs a command takes, by default (``--rollout-step 10m``)."""


@dataclass
class RolloutPlay:
    """The records of every rollout of one policy's replay, and what they add up to."""

    step: float = DEFAULT_STEP
    records: dict[str, list[StepRecord]] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)
    """The last round's decisions."""
    moves: dict[str, int] = field(default_factory=dict)
    """Per rollout, the completed Maintenance moves off the hosts it held out."""
    _held: dict[str, str] = field(default_factory=dict)
    """Host -> the rollout holding it out in the round being carried out."""

    def round(
        self, desired: DesiredState, snapshot: Snapshot, world: World, now: datetime, *, act: bool
    ) -> tuple[RolloutHolds, float]:
        """The rollouts carried on at ``now`` (only looked at unless ``act``); what they hold
        for the round's plan, and the seconds their steps took (the plan comes after)."""
        clock = now
        decisions = self._decide(desired, snapshot, clock)
        if act:
            for _ in range(MAX_STEPS):
                acted = False
                for decision in decisions:
                    for action in decision.actions:
                        clock, snapshot, did = self._carry_out(
                            decision.rollout, action, world, snapshot, clock
                        )
                        acted |= did
                if not acted:
                    break
                decisions = self._decide(desired, snapshot, clock)
        self.decisions = decisions
        out = tuple(dict.fromkeys(h for d in decisions for h in d.out))
        keep = tuple(dict.fromkeys(h for d in decisions for h in d.keep_out))
        self._held = {h: d.rollout for d in decisions for h in d.out}
        holds = RolloutHolds(snapshot=snapshot, out=out, keep_out=keep)
        return holds, (clock - now).total_seconds()

    def after(self, results: Sequence[MoveResult]) -> None:
        """The round's moves counted against the rollout that made them: Maintenance moves
        that completed, off a host it held out."""
        for r in results:
            rollout = self._held.get(r.source)
            if (
                rollout is not None
                and r.reason == Reason.MAINTENANCE.value
                and r.outcome is MoveOutcome.SUCCEEDED
            ):
                self.moves[rollout] = self.moves.get(rollout, 0) + 1

    def figures(self, start: datetime) -> list[RolloutFigures]:
        """Each rollout as the period leaves it, by name."""
        out = []
        for d in self.decisions:
            records = self.records.get(d.rollout, [])
            standing = d.standing
            rolled = sum(1 for h in standing.hosts if h.done) if standing is not None else 0
            began = (records[0].at - start).total_seconds() if records else None
            ended = (records[-1].at - start).total_seconds() if records else None
            out.append(
                RolloutFigures(
                    rollout=d.rollout,
                    phase=d.phase.value,
                    hosts=len(d.hosts),
                    rolled=rolled,
                    began=began,
                    ended=ended,
                    seconds=(ended - began) if began is not None and ended is not None else 0.0,
                    moves=self.moves.get(d.rollout, 0),
                )
            )
        return out

    def _decide(self, desired: DesiredState, snapshot: Snapshot, now: datetime) -> list[Decision]:
        return next_actions_all(desired, snapshot, self.records, now=now)

    def _record(
        self,
        rollout: str,
        host: str | None,
        step: str,
        outcome: StepOutcome,
        at: datetime,
        detail: str = "",
        vms: Sequence[str] = (),
    ) -> None:
        record = StepRecord(
            host=host, step=step, outcome=outcome, at=at, by=BY, detail=detail, vms=list(vms)
        )
        self.records.setdefault(rollout, []).append(record)

    def _carry_out(
        self, rollout: str, action: Action, world: World, snapshot: Snapshot, clock: datetime
    ) -> tuple[datetime, Snapshot, bool]:
        """Do one action at ``clock``: the clock after it, the snapshot after it, and whether
        it recorded something (so the next decision differs)."""
        if isinstance(action, BeginDrain):
            self._record(rollout, action.host, action.step, StepOutcome.STARTED, clock)
        elif isinstance(action, Record):
            self._record(
                rollout, action.host, action.step, action.outcome, clock, action.detail, action.vms
            )
        elif isinstance(action, RunCommand):
            self._record(rollout, action.host, action.step, StepOutcome.STARTED, clock)
            seconds = min(self.step, action.command.timeout.total_seconds())
            clock += timedelta(seconds=seconds)
            detail = f"simulated: took {seconds:g} s"
            self._record(rollout, action.host, action.step, StepOutcome.SUCCEEDED, clock, detail)
        elif isinstance(action, ShutDown | StartVms):
            on = isinstance(action, StartVms)
            self._record(
                rollout, action.host, action.step, StepOutcome.STARTED, clock, vms=action.vms
            )
            at = (clock - world.trace.start).total_seconds()
            (world.started if on else world.shut_off)(action.vms, at)
            snapshot = switched(snapshot, action.vms, on=on)
            done = ("started: " if on else "shut down: ") + ", ".join(action.vms)
            self._record(
                rollout,
                action.host,
                action.step,
                StepOutcome.SUCCEEDED,
                clock,
                done if action.vms else "no VM",
                action.vms,
            )
        elif isinstance(action, CheckReady):
            if action.begin:
                self._record(rollout, action.host, action.step, StepOutcome.STARTED, clock)
            outcome = StepOutcome.SUCCEEDED if action.final else StepOutcome.PASSED
            self._record(rollout, action.host, action.step, outcome, clock, "simulated: ready")
        return clock, snapshot, True


def switched(snapshot: Snapshot, names: Sequence[str], *, on: bool) -> Snapshot:
    """``snapshot`` with the VMs ``names`` running (``on``) or shut off, using nothing."""
    if not names:
        return snapshot
    wanted = set(names)
    state = VmRunState.RUNNING if on else VmRunState.SHUTOFF
    vms = [
        v.model_copy(update={"state": state, "cpu_used": v.cpu_used if on else 0.0})
        if v.name in wanted
        else v
        for v in snapshot.vms
    ]
    return snapshot.model_copy(update={"vms": vms})


__all__ = ["DEFAULT_STEP", "RolloutPlay", "switched"]
