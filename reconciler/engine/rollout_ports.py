"""The ways a rollout reaches the world: its records, its commands, the hosts' libvirt.

Adapters implement these for real (files or the state repository, the process runner, libvirt);
``tests/fakes`` in memory. Every method raises only the project's errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Protocol

from reconciler.model.rollout import Command
from reconciler.model.rollout_progress import CommandOutcome, RolloutProgress, StepRecord, Target

__all__ = ["CommandOutcome", "HostControl", "RolloutCommands", "RolloutRecords", "Target"]


class RolloutCommands(Protocol):
    def run(
        self, rollout: str, step: str, command: Command, *, target: Target | None
    ) -> CommandOutcome:
        """Run ``command`` ({host} and {uri} replaced from ``target``) within its timeout,
        output kept; never raises for the command's own failure."""
        ...


class HostControl(Protocol):
    def answers(self, host: str) -> str | None:
        """None when the host's libvirt answers now; else why not."""
        ...

    def shut_down(self, host: str, vms: Sequence[str], timeout: timedelta) -> dict[str, str]:
        """Shut ``vms`` down gracefully (ACPI) and wait up to ``timeout`` for them to be off;
        the VMs not off then, each with why. Never forces a VM off."""
        ...

    def start(self, host: str, vms: Sequence[str]) -> dict[str, str]:
        """Start ``vms`` (defined on ``host``); those that did not start, each with why. A VM
        running already counts as started."""
        ...


class RolloutRecords(Protocol):
    def load(self, rollout: str) -> RolloutProgress:
        """The records of ``rollout`` (none yet: empty)."""
        ...

    def append(
        self, progress: RolloutProgress, record: StepRecord, *, output: str = ""
    ) -> RolloutProgress:
        """``progress`` with ``record`` added, written durably before returning (a step's
        start is its intent: the step runs only after this returned). ``output`` is the end
        of a command's output, kept with the record where the records say so (the message of
        its commit). ReconcilerError when it could not be written, or when the stored records
        are not ``progress`` (another instance wrote meanwhile)."""
        ...
