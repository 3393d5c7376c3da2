"""What a rollout has done so far: one record per step begun and per step ended.

The record of a step's start is its intent: it is written before the step runs, so a
reconciler that stops mid-step (a crash, a takeover by a standby) finds the step begun and
not ended, and resumes there (again only when the step is safe to repeat). The records are
the rollout's whole memory; where it stands is worked out from them
(:mod:`reconciler.core.rollout`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, Literal

from pydantic import AwareDatetime, Field

from reconciler.model.base import ApiVersion, Frozen

DRAIN: Final = "drain"
SHUTDOWN: Final = "shutdown"
REBOOT: Final = "reboot"
READY: Final = "ready"
START: Final = "start"
UNDRAIN: Final = "undrain"
COMMAND_PREFIX: Final = "command/"
BEFORE_PREFIX: Final = "before/"
AFTER_PREFIX: Final = "after/"
PROGRESS_SUFFIX: Final = ".progress.json"
"""In a state repository a rollout's records are ``<cluster folder>/rollouts/<name>`` and this."""


class StepOutcome(StrEnum):
    STARTED = "started"
    """The step began (its intent); no outcome yet."""
    PASSED = "passed"
    """The ready checks passed; the host is settling."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"


ENDED: Final = frozenset({StepOutcome.SUCCEEDED, StepOutcome.FAILED})


class StepRecord(Frozen):
    """One step of a rollout begun, or ended, by one instance of the reconciler."""

    host: str | None = Field(
        default=None, description="The host; none for the steps before and after all hosts."
    )
    step: str = Field(
        description="drain, shutdown, command/<name>, reboot, ready, start, undrain, "
        "before/<name> or after/<name>."
    )
    outcome: StepOutcome
    at: AwareDatetime
    by: str = Field(default="", description="The instance that recorded it.")
    detail: str = Field(default="", description="What happened, in a sentence.")
    vms: list[str] = Field(
        default_factory=list, description="shutdown: the VMs shut down; start: those started."
    )
    log: str | None = Field(
        default=None, description="Where the output of its command is kept, if any."
    )


class CommandOutcome(Frozen):
    """What one command of a rollout did."""

    ok: bool
    detail: str = Field(
        description="exit 0, exit 100, ran longer than 45m and was killed, cannot run ..."
    )
    output: str = Field(default="", description="The end of its output, scrubbed of secrets.")
    log: str | None = Field(default=None, description="Where its whole output (bounded) is.")


class Target(Frozen):
    """The host a per-host command runs for: the values of {host} and {uri}."""

    host: str
    uri: str


class RolloutProgress(Frozen):
    """The records of one rollout, oldest first."""

    api_version: ApiVersion = "placement/v1alpha1"
    kind: Literal["RolloutProgress"] = "RolloutProgress"
    cluster: str
    rollout: str
    records: list[StepRecord] = Field(default_factory=list)

    def add(self, record: StepRecord) -> RolloutProgress:
        """A copy with ``record`` appended."""
        return self.model_copy(update={"records": [*self.records, record]})
