"""Where a rollout stands, worked out from its records alone.

Each host goes through the same steps in order (:func:`host_steps`): drain, shutdown (when
immovable VMs are shut down), its commands, reboot, ready, start, undrain. A step is done when
a record says it succeeded; the host's current step is the first one not done. Records of
steps the rollout no longer has are ignored, so an edit of the file takes effect at the next
step: a command added runs next, one removed is not run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from reconciler.model.rollout import Command, ImmovableAction, Rollout, Step, Then
from reconciler.model.rollout_progress import (
    AFTER_PREFIX,
    BEFORE_PREFIX,
    COMMAND_PREFIX,
    DRAIN,
    READY,
    REBOOT,
    SHUTDOWN,
    START,
    UNDRAIN,
    StepOutcome,
    StepRecord,
)

BRING_BACK = frozenset({READY, START, UNDRAIN})
"""Steps that only return a host to service: they go on when the rollout is paused, stopped
elsewhere or out of its windows."""
SAFE_STEPS = frozenset({DRAIN, SHUTDOWN, READY, START, UNDRAIN})
"""Steps the reconciler itself carries out, each safe to take up again after an interruption."""


def host_steps(rollout: Rollout) -> list[str]:
    """The steps of every host, in order."""
    spec = rollout.spec
    shutdown = spec.immovable.action is ImmovableAction.SHUTDOWN
    steps = [DRAIN]
    if shutdown:
        steps.append(SHUTDOWN)
    steps += [COMMAND_PREFIX + c.name for c in spec.each_host.commands]
    if spec.each_host.reboot is not None:
        steps.append(REBOOT)
    steps.append(READY)
    if shutdown:
        steps.append(START)
    steps.append(UNDRAIN)
    return steps


def command_of(rollout: Rollout, step: str) -> Command | None:
    """The command a step runs: a command, the reboot, a step before or after; else None."""
    spec = rollout.spec
    if step == REBOOT:
        return spec.each_host.reboot
    for prefix, steps in (
        (COMMAND_PREFIX, spec.each_host.commands),
        (BEFORE_PREFIX, spec.before),
        (AFTER_PREFIX, spec.after),
    ):
        if step.startswith(prefix):
            return _named(steps, step.removeprefix(prefix))
    return None


def _named(steps: Sequence[Step], name: str) -> Step | None:
    return next((s for s in steps if s.name == name), None)


def safe_to_repeat(rollout: Rollout, step: str) -> bool:
    """May ``step`` run again after it was interrupted?"""
    if step in SAFE_STEPS:
        return True
    command = command_of(rollout, step)
    return bool(getattr(command, "safe_to_repeat", False))


@dataclass(frozen=True, slots=True)
class StepState:
    """The records of one step of one host (or of the rollout, for before and after)."""

    step: str
    last: StepRecord | None = None
    """Its latest record; None when it never began."""
    began: datetime | None = None
    """When it last began (its latest ``started`` record)."""
    vms: tuple[str, ...] = ()
    """Every VM its records name (the VMs a shutdown stopped)."""

    @property
    def outcome(self) -> StepOutcome | None:
        return None if self.last is None else self.last.outcome

    @property
    def done(self) -> bool:
        return self.outcome is StepOutcome.SUCCEEDED

    @property
    def failed(self) -> bool:
        return self.outcome is StepOutcome.FAILED


@dataclass(frozen=True, slots=True)
class HostSteps:
    """One host of a rollout: its steps and which one it is at."""

    host: str
    steps: tuple[StepState, ...]

    @property
    def current(self) -> StepState | None:
        """The first step not done; None when the host is done (given back: a step added to
        the rollout later does not take it out again)."""
        if self.state_of(UNDRAIN).done:
            return None
        return next((s for s in self.steps if not s.done), None)

    @property
    def begun(self) -> bool:
        return any(s.last is not None for s in self.steps)

    @property
    def done(self) -> bool:
        return self.current is None

    @property
    def out(self) -> bool:
        """Taken out of service by the rollout: drain begun, undrain not done."""
        return self.begun and not self.done

    def state_of(self, step: str) -> StepState:
        return next((s for s in self.steps if s.step == step), StepState(step))


@dataclass(frozen=True, slots=True)
class Standing:
    """Where a rollout stands: its steps before, its hosts, its steps after."""

    before: tuple[StepState, ...]
    hosts: tuple[HostSteps, ...]
    after: tuple[StepState, ...]
    other_hosts: tuple[HostSteps, ...] = field(default=())
    """Hosts with records that the rollout no longer selects."""

    @property
    def begun(self) -> bool:
        return any(s.last is not None for s in self.before) or any(
            h.begun for h in (*self.hosts, *self.other_hosts)
        )

    @property
    def done(self) -> bool:
        return all(s.done for s in (*self.before, *self.after)) and all(h.done for h in self.hosts)


def _step_state(step: str, records: Sequence[StepRecord]) -> StepState:
    last = records[-1] if records else None
    began = None
    for r in records:
        if r.outcome is StepOutcome.STARTED:
            began = r.at
    vms = tuple(dict.fromkeys(vm for r in records for vm in r.vms))
    return StepState(step=step, last=last, began=began, vms=vms)


def resumed(rollout: Rollout, records: Sequence[StepRecord]) -> list[StepRecord]:
    """``records`` as ``spec.resume`` has them read: a failure a person said to retry is
    forgotten with what came before it of that step (the step begins again); one they said to
    skip reads as succeeded. Each entry matches one failure, by its time."""
    out = list(records)
    for entry in rollout.spec.resume:
        for i, r in enumerate(out):
            if (
                r.outcome is StepOutcome.FAILED
                and r.host == entry.host
                and r.step == entry.step
                and r.at == entry.failed_at
            ):
                if entry.then is Then.SKIP:
                    out[i] = r.model_copy(
                        update={
                            "outcome": StepOutcome.SUCCEEDED,
                            "detail": f"skipped by a person (spec.resume) after: {r.detail}",
                        }
                    )
                else:
                    out = [
                        x
                        for j, x in enumerate(out)
                        if j > i or (x.host, x.step) != (r.host, r.step)
                    ]
                break
    return out


def standing(rollout: Rollout, hosts: Sequence[str], records: Sequence[StepRecord]) -> Standing:
    """Where ``rollout`` over ``hosts`` (in order) stands after ``records`` (oldest first), as
    ``spec.resume`` has them read."""
    records = resumed(rollout, records)
    by_key: dict[tuple[str | None, str], list[StepRecord]] = {}
    for r in records:
        by_key.setdefault((r.host, r.step), []).append(r)
    spec = rollout.spec
    before = tuple(
        _step_state(BEFORE_PREFIX + s.name, by_key.get((None, BEFORE_PREFIX + s.name), []))
        for s in spec.before
    )
    after = tuple(
        _step_state(AFTER_PREFIX + s.name, by_key.get((None, AFTER_PREFIX + s.name), []))
        for s in spec.after
    )
    steps = host_steps(rollout)

    def host_steps_of(name: str) -> HostSteps:
        return HostSteps(
            host=name,
            steps=tuple(_step_state(s, by_key.get((name, s), [])) for s in steps),
        )

    recorded = dict.fromkeys(r.host for r in records if r.host is not None)
    others = tuple(host_steps_of(h) for h in recorded if h not in hosts)
    return Standing(
        before=before,
        hosts=tuple(host_steps_of(h) for h in hosts),
        after=after,
        other_hosts=others,
    )


def step_title(host: str | None, step: str) -> str:
    """``kvm-02 command/upgrade``, ``before/ceph-noout``."""
    return f"{host} {step}" if host else step


__all__ = [
    "BRING_BACK",
    "HostSteps",
    "Standing",
    "StepState",
    "command_of",
    "host_steps",
    "resumed",
    "safe_to_repeat",
    "standing",
    "step_title",
]
