"""Carrying out the cluster's rollouts in a round that holds the cluster.

The core decides (``reconciler.core.rollout.next_actions_all``); this module does what it
decides, through the rollout ports, and asks again, until nothing more can be done now:

- a step's start is recorded before the step runs (its intent; for a state repository a
  commit, pushed); its outcome after, with what the command said;
- before a command or reboot runs on a host, the host is looked at again: a VM running there
  (started since the round's observation) holds the command back;
- no step begins once the hold on the cluster is no longer valid, or a stop was asked;
- before a step begins, the desired state is read again (``RolloutPorts.desired``): a pause,
  a host removed, a command added, merged while the previous step ran, counts from the next
  step on; a desired state that cannot be read then begins nothing more this round;
- evacuations are not done here: the hosts a rollout holds out are drained by the round's own
  plan (``RolloutRound.out``), and balance keeps off ``RolloutRound.keep_out``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from reconciler.core.rollout import (
    Action,
    BeginDrain,
    CheckReady,
    Decision,
    Phase,
    Record,
    RunCommand,
    ShutDown,
    StartVms,
    next_actions_all,
)
from reconciler.core.rollout_steps import step_title
from reconciler.core.rollout_vms import with_fresh_look
from reconciler.engine.ports import Clock, HostControl, Observer, RolloutCommands, RolloutRecords
from reconciler.errors import ReconcilerError
from reconciler.model.desired import DesiredState
from reconciler.model.rollout_progress import (
    CommandOutcome,
    RolloutProgress,
    StepOutcome,
    StepRecord,
    Target,
)
from reconciler.model.snapshot import Snapshot
from reconciler.model.status import RolloutState

log = logging.getLogger(__name__)

MAX_STEPS = 200
"""Decisions carried out in one round at most: a bound, never reached by a real rollout."""


@dataclass
class RolloutPorts:
    records: RolloutRecords
    commands: RolloutCommands
    hosts: HostControl
    observer: Observer
    clock: Clock
    desired: Callable[[], DesiredState] | None = None
    """The desired state as its source holds it now (ReconcilerError: it cannot be read
    now); None: the round's desired state is the latest (a test's, built in code)."""


@dataclass
class RolloutRound:
    """What the rollouts did in one round, and what the round's plan must respect."""

    decisions: list[Decision] = field(default_factory=list)
    recorded: list[tuple[str, StepRecord]] = field(default_factory=list)
    """(rollout, record) written this round, in order."""
    snapshot: Snapshot | None = None
    """The round's snapshot with the looks taken since (hosts looked at again)."""
    error: ReconcilerError | None = None

    @property
    def out(self) -> tuple[str, ...]:
        """Hosts held out by a rollout: the plan drains them and moves none to them."""
        return tuple(dict.fromkeys(h for d in self.decisions for h in d.out))

    @property
    def keep_out(self) -> tuple[str, ...]:
        """Hosts no balance move may fill: out, and those the rollout takes next."""
        return tuple(dict.fromkeys(h for d in self.decisions for h in d.keep_out))

    @property
    def wake_at(self) -> datetime | None:
        times = [d.wake_at for d in self.decisions if d.wake_at is not None]
        return min(times, default=None)

    @property
    def stopped(self) -> list[Decision]:
        return [d for d in self.decisions if d.phase is Phase.STOPPED]

    def states(self) -> list[RolloutState]:
        """Each rollout as the round leaves it, for the round's status."""
        out = []
        for d in self.decisions:
            host, step = d.stopped_at if d.stopped_at is not None else (None, None)
            out.append(
                RolloutState(
                    rollout=d.rollout,
                    phase=d.phase.value,
                    out=list(d.out),
                    stopped_host=host,
                    stopped_step=step,
                    message=d.notes[0] if d.notes else "",
                    next_look=d.wake_at,
                )
            )
        return out


class _Carrier:
    def __init__(
        self,
        desired: DesiredState,
        snapshot: Snapshot,
        ports: RolloutPorts,
        instance: str,
        may_act: Callable[[], str | None],
    ) -> None:
        self.desired = desired
        self.snapshot = snapshot
        self.ports = ports
        self.instance = instance
        self.may_act = may_act
        self.progress: dict[str, RolloutProgress] = {}
        self.uris = {h.name: h.uri for h in desired.cluster.spec.hosts}
        self.out = RolloutRound()
        self.not_ready: set[str] = set()
        """Hosts found not ready in this round: looked at again in a later one."""

    def record(
        self,
        rollout: str,
        host: str | None,
        step: str,
        outcome: StepOutcome,
        detail: str = "",
        *,
        vms: Sequence[str] = (),
        log_path: str | None = None,
        output: str = "",
    ) -> None:
        record = StepRecord(
            host=host,
            step=step,
            outcome=outcome,
            at=self.ports.clock.now(),
            by=self.instance,
            detail=detail,
            vms=list(vms),
            log=log_path,
        )
        self.progress[rollout] = self.ports.records.append(
            self.progress[rollout], record, output=output
        )
        self.out.recorded.append((rollout, record))
        log.info(
            "rollout %s: %s %s%s",
            rollout,
            step_title(host, step),
            outcome.value,
            f": {detail}" if detail else "",
        )

    def read_again(self) -> bool:
        """The desired state read again before a step begins; True when it changed (the
        decisions must be made again). ReconcilerError when it cannot be read."""
        if self.ports.desired is None:
            return False
        fresh = self.ports.desired()
        if fresh == self.desired:
            return False
        log.info("rollouts: the desired state changed during the round; deciding again")
        self.desired = fresh
        self.uris = {h.name: h.uri for h in fresh.cluster.spec.hosts}
        for rollout in fresh.rollouts:
            name = rollout.metadata.name
            if name not in self.progress:
                self.progress[name] = self.ports.records.load(name)
        return True

    def decide(self) -> list[Decision]:
        records = {name: p.records for name, p in self.progress.items()}
        return next_actions_all(self.desired, self.snapshot, records, now=self.ports.clock.now())

    def look_again(self, host: str) -> None:
        fresh = self.ports.observer.observe_hosts([host])
        self.snapshot = with_fresh_look(self.snapshot, fresh)

    def run(self, stop: threading.Event) -> None:
        for rollout in self.desired.rollouts:
            name = rollout.metadata.name
            self.progress[name] = self.ports.records.load(name)
        decisions = self.decide()
        for _ in range(MAX_STEPS):
            acted = self.carry_out_all(decisions, stop)
            if acted is None:
                return
            if not acted:
                break
            decisions = self.decide()
        self.out.decisions = decisions

    def carry_out_all(self, decisions: list[Decision], stop: threading.Event) -> bool | None:
        """The actions of ``decisions``, in order. True when one recorded something, or when
        the desired state read before a step changed (the rest is decided again on it); False
        when nothing was done; None when the carrying out ends here (no step may begin)."""
        acted = False
        for decision in decisions:
            for action in decision.actions:
                why = "a stop was asked" if stop.is_set() else self.may_act()
                if why is None and begins(action):
                    try:
                        if self.read_again():
                            return True  # decided again on what is there now
                    except ReconcilerError as err:
                        why = f"the desired state could not be read again: {err}"
                if why is not None:
                    log.warning("rollout %s: not going on: %s", decision.rollout, why)
                    self.out.decisions = decisions
                    return None
                acted |= self.carry_out(decision.rollout, action)
        return acted

    def carry_out(self, rollout: str, action: Action) -> bool:
        """Do one action; True when it recorded something (so the next decision differs)."""
        if isinstance(action, BeginDrain):
            self.record(rollout, action.host, action.step, StepOutcome.STARTED)
        elif isinstance(action, Record):
            self.record(
                rollout, action.host, action.step, action.outcome, action.detail, vms=action.vms
            )
        elif isinstance(action, RunCommand):
            return self.run_command(rollout, action)
        elif isinstance(action, ShutDown):
            self.shut_down(rollout, action)
        elif isinstance(action, StartVms):
            self.start(rollout, action)
        elif isinstance(action, CheckReady):
            if action.host in self.not_ready:
                return False
            return self.check_ready(rollout, action)
        return True

    def run_command(self, rollout: str, action: RunCommand) -> bool:
        target = None
        if action.host is not None:
            self.look_again(action.host)
            again = self.decide()
            if not any(a == action for d in again for a in d.actions):
                return False  # the fresh look holds it back (a VM runs there); next round
            target = Target(host=action.host, uri=self.uris.get(action.host, ""))
        title = step_title(action.host, action.step)
        self.record(
            rollout,
            action.host,
            action.step,
            StepOutcome.STARTED,
            "run again: it was interrupted and is safe to repeat" if action.again else "",
        )
        done: CommandOutcome = self.ports.commands.run(
            rollout, action.step, action.command, target=target
        )
        outcome = StepOutcome.SUCCEEDED if done.ok else StepOutcome.FAILED
        if not done.ok:
            log.error("rollout %s: %s failed: %s", rollout, title, done.detail)
        self.record(
            rollout,
            action.host,
            action.step,
            outcome,
            done.detail,
            log_path=done.log,
            output=done.output,
        )
        return True

    def shut_down(self, rollout: str, action: ShutDown) -> None:
        self.record(rollout, action.host, action.step, StepOutcome.STARTED, vms=action.vms)
        left = (
            self.ports.hosts.shut_down(action.host, action.vms, action.timeout)
            if action.vms
            else {}
        )
        if left:
            detail = "; ".join(f"{vm}: {why}" for vm, why in sorted(left.items()))
            self.record(
                rollout, action.host, action.step, StepOutcome.FAILED, detail, vms=action.vms
            )
            return
        detail = f"shut down: {', '.join(action.vms)}" if action.vms else "no VM to shut down"
        self.record(
            rollout, action.host, action.step, StepOutcome.SUCCEEDED, detail, vms=action.vms
        )
        self.look_again(action.host)

    def start(self, rollout: str, action: StartVms) -> None:
        self.record(rollout, action.host, action.step, StepOutcome.STARTED, vms=action.vms)
        failed = self.ports.hosts.start(action.host, action.vms) if action.vms else {}
        if failed:
            detail = "; ".join(f"{vm}: {why}" for vm, why in sorted(failed.items()))
            self.record(
                rollout, action.host, action.step, StepOutcome.FAILED, detail, vms=action.vms
            )
            return
        detail = f"started: {', '.join(action.vms)}" if action.vms else "no VM to start"
        self.record(
            rollout, action.host, action.step, StepOutcome.SUCCEEDED, detail, vms=action.vms
        )

    def check_ready(self, rollout: str, action: CheckReady) -> bool:
        recorded = False
        if action.begin:
            self.record(rollout, action.host, action.step, StepOutcome.STARTED)
            recorded = True
        why = self.ports.hosts.answers(action.host).why
        if why is None:
            target = Target(host=action.host, uri=self.uris.get(action.host, ""))
            for check in action.checks:
                done = self.ports.commands.run(rollout, f"ready/{check.name}", check, target=target)
                if not done.ok:
                    why = f"check {check.name}: {done.detail}"
                    break
        if why is None:
            outcome = StepOutcome.SUCCEEDED if action.final else StepOutcome.PASSED
            detail = "libvirt answers" + (
                f" and {len(action.checks)} check(s) pass" if action.checks else ""
            )
            self.record(rollout, action.host, action.step, outcome, detail)
            return True
        log.info("rollout %s: %s is not ready yet: %s", rollout, action.host, why)
        self.not_ready.add(action.host)
        if action.final:
            self.record(
                rollout,
                action.host,
                action.step,
                StepOutcome.FAILED,
                f"ready, then not ready after the settle time: {why}",
            )
            return True
        return recorded


def begins(action: Action) -> bool:
    """Whether ``action`` begins a step (rather than ending one, or looking again)."""
    if isinstance(action, BeginDrain | RunCommand | ShutDown | StartVms):
        return True
    if isinstance(action, CheckReady):
        return action.begin
    return isinstance(action, Record) and action.outcome is StepOutcome.STARTED


def look(
    desired: DesiredState, snapshot: Snapshot, records: RolloutRecords, now: datetime
) -> RolloutRound:
    """What the rollouts would do, without doing anything: for a round that does not act.
    ReconcilerError when their records cannot be read."""
    progress = {r.metadata.name: records.load(r.metadata.name).records for r in desired.rollouts}
    return RolloutRound(
        decisions=next_actions_all(desired, snapshot, progress, now=now), snapshot=snapshot
    )


def carry_out(
    desired: DesiredState,
    snapshot: Snapshot,
    ports: RolloutPorts,
    *,
    instance: str,
    may_act: Callable[[], str | None] = lambda: None,
    stop: threading.Event | None = None,
) -> RolloutRound:
    """Carry the cluster's rollouts as far as they go now; what they hold out for the plan.

    ``may_act`` is asked before each action: a reason not to act (the hold lost, the
    policy's mode) stops here. An error (records that could not be read or written, a host
    that could not be looked at) ends the carrying out and is in ``error``: no step runs
    whose start could not be recorded, and the caller must not act on rollouts it could not
    read (``decisions`` may then be incomplete).
    """
    carrier = _Carrier(desired, snapshot, ports, instance, may_act)
    try:
        carrier.run(stop or threading.Event())
    except ReconcilerError as err:
        log.error("rollouts: %s", err)
        carrier.out.error = err
        if all(r.metadata.name in carrier.progress for r in carrier.desired.rollouts):
            carrier.out.decisions = carrier.decide()  # every record read: what holds
    carrier.out.snapshot = carrier.snapshot
    return carrier.out


__all__ = ["RolloutPorts", "RolloutRound", "carry_out", "look"]
