"""What a rollout decides: its phase, the actions the caller carries out, the decision.

Data only; :mod:`reconciler.core.rollout` makes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from reconciler.core.rollout_steps import Standing
from reconciler.core.rollout_vms import Blocker
from reconciler.model.rollout import Check, Command
from reconciler.model.rollout_progress import DRAIN, READY, SHUTDOWN, START, StepOutcome


class Phase(StrEnum):
    NOT_STARTED = "NotStarted"
    """Nothing begun yet (waiting for a window, for another rollout, ...)."""
    IN_PROGRESS = "InProgress"
    PAUSED = "Paused"
    BLOCKED = "Blocked"
    """Waiting at a host that cannot be taken out (a VM that cannot leave, no answer)."""
    STOPPED = "Stopped"
    """A step failed: a person must look (the host and step are named)."""
    DONE = "Done"


@dataclass(frozen=True, slots=True)
class RunCommand:
    """Record the step's start, run its command, record its outcome."""

    host: str | None
    step: str
    command: Command
    again: bool = False
    """It began before and was interrupted; it is safe to repeat."""


@dataclass(frozen=True, slots=True)
class BeginDrain:
    """Record the drain's start: from then on the host is out and the planner empties it."""

    host: str
    step: str = DRAIN


@dataclass(frozen=True, slots=True)
class ShutDown:
    """Record the start, shut ``vms`` down gracefully within ``timeout``, record the outcome
    naming the VMs shut down."""

    host: str
    vms: tuple[str, ...]
    timeout: timedelta
    step: str = SHUTDOWN


@dataclass(frozen=True, slots=True)
class StartVms:
    """Record the start, start ``vms`` on the host, record the outcome."""

    host: str
    vms: tuple[str, ...]
    step: str = START


@dataclass(frozen=True, slots=True)
class CheckReady:
    """Look whether the host is ready: libvirt answers and every check exits 0.

    ``begin``: record the ready step's start first. Passing records ``passed`` (``succeeded``
    when ``final``, the look after the settle time); failing records nothing, except when
    ``final`` (then ``failed``)."""

    host: str
    checks: tuple[Check, ...]
    begin: bool = False
    final: bool = False
    step: str = READY


@dataclass(frozen=True, slots=True)
class Record:
    """Record an outcome decided from what was observed (a drain that ended, a timeout, an
    interrupted step that may not run again)."""

    host: str | None
    step: str
    outcome: StepOutcome
    detail: str
    vms: tuple[str, ...] = ()


Action = RunCommand | BeginDrain | ShutDown | StartVms | CheckReady | Record


@dataclass(frozen=True, slots=True)
class Decision:
    """What one rollout does now, where it stands and why it waits."""

    rollout: str
    phase: Phase
    actions: tuple[Action, ...] = ()
    notes: tuple[str, ...] = ()
    """Sentences for a person: what it waits for, what blocks, why it stopped."""
    out: tuple[str, ...] = ()
    """Hosts the rollout holds out now: the planner drains them, none takes VMs."""
    keep_out: tuple[str, ...] = ()
    """Hosts no balance move may fill while it is in progress: those out and those it takes
    next (empty before it begins and once it is done)."""
    blocked: tuple[Blocker, ...] = ()
    stopped_at: tuple[str | None, str] | None = None
    """(host, step) of the failed step, when stopped."""
    wake_at: datetime | None = None
    """Ask again at this time at the latest (a timeout, the end of a settle, a window)."""
    hosts: tuple[str, ...] = ()
    """The rollout's hosts, in its order."""
    standing: Standing | None = field(default=None, compare=False)


__all__ = [
    "Action",
    "BeginDrain",
    "CheckReady",
    "Decision",
    "Phase",
    "Record",
    "RunCommand",
    "ShutDown",
    "StartVms",
]
