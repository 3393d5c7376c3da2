"""A small world that carries out rollout decisions: hosts, VMs, commands, reboots, crashes.

It stands for the engine and the cluster in tests of :mod:`reconciler.core.rollout`: it asks
``next_actions`` what to do, does it (drains by the real planner's evacuation moves), records
each step as the engine would (the start before, the outcome after), and logs what happened
in the world itself (which VMs ran where while each command ran), so the tests judge the
rollout from the world, not from its records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from reconciler.core import planner
from reconciler.core.rollout import (
    BeginDrain,
    CheckReady,
    Decision,
    Record,
    RunCommand,
    ShutDown,
    StartVms,
    next_actions,
)
from reconciler.core.rollout_vms import with_hosts_out
from reconciler.model.base import API_VERSION
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.rollout import Rollout
from reconciler.model.rollout_progress import StepOutcome, StepRecord
from reconciler.model.snapshot import VmRunState, VmState
from tests.core.builders import NOW, host_state, snapshot

TICK = timedelta(seconds=10)


def rollout(spec: Mapping[str, Any], name: str = "r") -> Rollout:
    """A Rollout from its YAML fields."""
    return Rollout.model_validate(
        {"apiVersion": API_VERSION, "kind": "Rollout", "metadata": {"name": name}, "spec": spec}
    )


def command(name: str, *, safe: bool = True, timeout: str = "1m") -> dict[str, Any]:
    return {"name": name, "argv": ["true", "{host}"], "timeout": timeout, "safeToRepeat": safe}


@dataclass
class Ran:
    """One command as the world saw it run."""

    host: str | None
    step: str
    at: datetime
    running_on_host: tuple[str, ...]
    out_hosts: tuple[str, ...]


@dataclass
class World:
    desired: DesiredState
    rollout: Rollout
    vms: list[VmState]
    now: datetime = NOW
    records: list[StepRecord] = field(default_factory=list)
    ran: list[Ran] = field(default_factory=list)
    down_until: dict[str, datetime] = field(default_factory=dict)
    """Hosts rebooting: unreachable until then."""
    failing_checks: set[str] = field(default_factory=set)
    """Hosts whose ready checks fail."""
    failing_steps: set[tuple[str | None, str]] = field(default_factory=set)
    crash_at: set[int] = field(default_factory=set)
    """Numbers of commands (counted from 0) during which the reconciler dies: the start is
    recorded, the outcome never is."""
    commands_begun: int = 0
    instance: str = "a"
    decisions: list[Decision] = field(default_factory=list)
    shut_off: set[str] = field(default_factory=set)
    max_out_seen: int = 0

    def reachable(self, host: str) -> bool:
        until = self.down_until.get(host)
        return until is None or self.now >= until

    def snapshot(self) -> Any:
        hosts = [
            host_state(h.name, reachable=self.reachable(h.name))
            for h in self.desired.cluster.spec.hosts
        ]
        seen = [v for v in self.vms if self.reachable(v.host)]
        return snapshot(hosts, seen).model_copy(update={"taken_at": self.now})

    def record(
        self,
        host: str | None,
        step: str,
        outcome: StepOutcome,
        detail: str = "",
        vms: tuple[str, ...] = (),
    ) -> None:
        self.records.append(
            StepRecord(
                host=host,
                step=step,
                outcome=outcome,
                at=self.now,
                by=self.instance,
                detail=detail,
                vms=list(vms),
            )
        )

    def running_on(self, host: str) -> tuple[str, ...]:
        return tuple(
            sorted(v.name for v in self.vms if v.host == host and v.state is not VmRunState.SHUTOFF)
        )

    def evacuate(self, decision: Decision) -> None:
        """The round's moves: the real planner's plan with the hosts out drained."""
        if not any(v.host in decision.out for v in self.vms):
            return  # nothing to take off the hosts out: the plan would move none of theirs
        desired = with_hosts_out(self.desired, decision.out)
        plan = planner.plan(desired, self.snapshot(), History(), now=self.now)
        where = {m.vm: m.target for m in (*plan.moves, *plan.deferred) if m.source in decision.out}
        self.vms = [
            v.model_copy(update={"host": where[v.name]}) if v.name in where else v for v in self.vms
        ]

    def carry_out(self, decision: Decision) -> bool:
        """Do the decision's actions in order; False when the reconciler died."""
        for action in decision.actions:
            if isinstance(action, BeginDrain):
                self.record(action.host, action.step, StepOutcome.STARTED)
            elif isinstance(action, Record):
                self.record(action.host, action.step, action.outcome, action.detail, action.vms)
            elif isinstance(action, RunCommand):
                if not self.run(action):
                    return False
            elif isinstance(action, ShutDown):
                self.record(action.host, action.step, StepOutcome.STARTED, vms=action.vms)
                self.set_state(action.vms, VmRunState.SHUTOFF)
                self.record(action.host, action.step, StepOutcome.SUCCEEDED, vms=action.vms)
            elif isinstance(action, StartVms):
                self.record(action.host, action.step, StepOutcome.STARTED, vms=action.vms)
                self.set_state(action.vms, VmRunState.RUNNING)
                self.record(action.host, action.step, StepOutcome.SUCCEEDED, vms=action.vms)
            elif isinstance(action, CheckReady):
                if action.begin:
                    self.record(action.host, action.step, StepOutcome.STARTED)
                ok = self.reachable(action.host) and action.host not in self.failing_checks
                if ok:
                    done = StepOutcome.SUCCEEDED if action.final else StepOutcome.PASSED
                    self.record(action.host, action.step, done)
                elif action.final:
                    self.record(action.host, action.step, StepOutcome.FAILED, "checks failed")
            self.count_out()
        return True

    def set_state(self, names: tuple[str, ...], state: VmRunState) -> None:
        self.vms = [
            v.model_copy(update={"state": state}) if v.name in names else v for v in self.vms
        ]

    def count_out(self) -> None:
        out = set()
        for r in self.records:
            if r.host is None:
                continue
            if r.step == "drain" and r.outcome is StepOutcome.STARTED:
                out.add(r.host)
            if r.step == "undrain" and r.outcome is StepOutcome.SUCCEEDED:
                out.discard(r.host)
        self.max_out_seen = max(self.max_out_seen, len(out))

    def run(self, action: RunCommand) -> bool:
        self.record(action.host, action.step, StepOutcome.STARTED)
        number = self.commands_begun
        self.commands_begun += 1
        out = self.decisions[-1].out if self.decisions else ()
        self.ran.append(
            Ran(
                action.host,
                action.step,
                self.now,
                self.running_on(action.host) if action.host else (),
                out,
            )
        )
        if number in self.crash_at:
            return False
        if action.step == "reboot" and action.host is not None:
            self.down_until[action.host] = self.now + 3 * TICK
        outcome = (
            StepOutcome.FAILED
            if (action.host, action.step) in self.failing_steps
            else StepOutcome.SUCCEEDED
        )
        detail = "exit 1" if outcome is StepOutcome.FAILED else "exit 0"
        self.record(action.host, action.step, outcome, detail)
        return True

    def decide(self) -> Decision:
        decision = next_actions(
            self.rollout, self.desired, self.snapshot(), self.records, now=self.now
        )
        self.decisions.append(decision)
        return decision

    def tick(self) -> Decision:
        """One round: decide, evacuate, carry out; time goes on."""
        decision = self.decide()
        self.evacuate(decision)
        alive = self.carry_out(decision)
        if not alive:
            self.instance = "b" if self.instance == "a" else "a"
            self.now += timedelta(minutes=5)  # a standby takes over later
        self.now += TICK
        return decision

    def run_until_settled(self, ticks: int = 400) -> Decision:
        """Ticks until the rollout is done or stopped, or ``ticks`` have passed."""
        decision = self.tick()
        for _ in range(ticks):
            if decision.phase.value in ("Done", "Stopped") and not decision.actions:
                break
            decision = self.tick()
        return decision
