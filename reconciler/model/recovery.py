"""Dead-host recovery: its policy (``BalancePolicy.spec.recovery``), the fence of a host
(``Cluster.spec.defaults.fence`` and per host ``fence``) and what the reconciler keeps between
rounds to recover exactly once (``RecoveryState``, in its state directory).
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AwareDatetime, Field

from reconciler.model.base import ApiVersion, Frozen
from reconciler.model.quantity import Duration, duration_within
from reconciler.model.rules import Selector
from reconciler.model.snapshot import Snapshot

Grace = Annotated[
    Duration,
    duration_within(
        timedelta(seconds=1),
        timedelta(days=1),
        too_short="{value} is too short: one failed call is not a dead host; use at least 1s, "
        "e.g. 60s",
    ),
]
"""How long a host must stay unreachable before it is fenced: 1s to 1d."""
FenceTimeout = Annotated[
    Duration,
    duration_within(
        timedelta(seconds=1),
        timedelta(minutes=30),
        too_short="{value} is too short for a fence agent; use at least 1s, e.g. 30s",
    ),
]
"""The longest a fence command may run: 1s to 30m."""

MAX_RESERVE_HOSTS = 16


class Failback(StrEnum):
    NONE = "none"
    """Restarted VMs stay where they were restarted (placement.yaml follows them)."""
    REVERT = "revert"
    """Once the host is back, VMs go back to it as ordinary moves within every limit."""


class RestartPriority(Frozen):
    vms: Selector = Field(description="The VMs this priority applies to.")
    priority: int = Field(
        ge=-1000, le=1000, description="Higher restarts first; VMs no entry selects have 0."
    )


class RecoverySpec(Frozen):
    """Restart the VMs of a dead host elsewhere, after fencing it."""

    enabled: bool = Field(default=False, description="Fence dead hosts and restart their VMs.")
    grace: Grace = Field(
        default=timedelta(seconds=60),
        json_schema_extra={"default": "60s"},
        description="A host unreachable this long, in consecutive observations, is fenced.",
    )
    failback: Failback = Field(
        default=Failback.NONE,
        description="none: restarted VMs stay; revert: they go back once the host is healthy.",
    )
    reserve_hosts: int = Field(
        default=0,
        ge=0,
        le=MAX_RESERVE_HOSTS,
        alias="reserveHosts",
        description="N+k: the VMs of any this many hosts must fit on the others (memory, "
        "hostLimit); place refuses a VM that breaks it and plan reports when it does not hold.",
    )
    priorities: list[RestartPriority] = Field(
        default_factory=list,
        description="Restart order: the highest priority of the entries that select a VM.",
    )
    definitions_from_git: bool = Field(
        default=True,
        alias="definitionsFromGit",
        description="With --repo, restart the VMs this instance never saw from the definitions "
        "recorded on reconciler/observed/<cluster> (protect that branch: whoever can push to it "
        "can define domains at recovery time).",
    )


class Fence(Frozen):
    """How to switch a host off for certain: a command whose exit 0 says it did, then its
    status action saying off and libvirt on the host not answering."""

    command: list[str] = Field(
        min_length=1,
        description="argv, run without a shell; {host} in an argument is the host's name.",
    )
    timeout: FenceTimeout = Field(
        default=timedelta(seconds=30),
        json_schema_extra={"default": "30s"},
        description="A command running longer is killed and counts as a failed fence.",
    )
    status: list[str] | None = Field(
        default=None,
        min_length=1,
        description="argv of the agent's status action, which must say off after the fence "
        "({host} replaced). Default: the command with its action replaced by status "
        "(--action=off, --action off, -o off; a fence_* agent without one gets "
        "--action=status); a command with neither has no status action, and only libvirt "
        "not answering confirms its fence.",
    )

    def status_action(self) -> list[str] | None:
        """The status action's argv (``{host}`` not yet replaced); None when it has none."""
        return list(self.status) if self.status is not None else status_command(self.command)


def status_command(command: list[str]) -> list[str] | None:
    """``command`` (a fence command) with its action replaced by ``status``; None when it
    has no action to replace and is not a fence-agents agent."""
    out = list(command)
    for i, arg in enumerate(out):
        if i == 0:
            continue
        if arg.startswith("--action="):
            out[i] = "--action=status"
            return out
        if arg in ("--action", "-o") and i + 1 < len(out):
            out[i + 1] = "status"
            return out
        if arg.startswith("-o") and len(arg) > 2 and not arg.startswith("--"):
            out[i] = "-ostatus"
            return out
    if out[0].rsplit("/", 1)[-1].startswith("fence_"):
        return [*out, "--action=status"]
    return None


class FenceOutcome(StrEnum):
    OK = "ok"
    """Exit 0, then confirmed: the status action said off and libvirt did not answer."""
    FAILED = "failed"
    TIMEOUT = "timeout"
    UNCONFIRMED = "unconfirmed"
    """Exit 0, but the host was not confirmed off: its status action did not say off, or
    libvirt on it answered."""


class FenceResult(Frozen):
    outcome: FenceOutcome
    detail: str = Field(default="", description="Exit status and the command's last words.")
    seconds: float = Field(default=0, ge=0)


class PowerState(StrEnum):
    OFF = "off"
    ON = "on"
    UNKNOWN = "unknown"
    """The status action failed, timed out, or said neither on nor off."""


class PowerStatus(Frozen):
    """A host's power as its fence agent's status action reports it."""

    state: PowerState
    detail: str = Field(default="", description="What the agent said, or why it is unknown.")
    seconds: float = Field(default=0, ge=0)


class SavedVm(Frozen):
    """A VM as the reconciler last saw it on a reachable host: enough to start it elsewhere."""

    name: str
    uuid: str
    host: str
    running: bool
    vcpus: int = Field(ge=0)
    memory: int = Field(ge=0, description="memory_max in bytes.")
    labels: dict[str, str] = Field(default_factory=dict)
    blockers: list[str] = Field(
        default_factory=list,
        description="Why it cannot run elsewhere (local disks, host devices); empty: it can.",
    )
    xml: str = Field(description="Its inactive domain XML.")
    seen_at: AwareDatetime


class RestartIntent(Frozen):
    """Written before a restart starts; resolved from libvirt after a crash."""

    vm: str
    uuid: str
    source: str
    target: str
    started_at: AwareDatetime


class HostRecovery(Frozen):
    """One host being recovered: fenced or trying to be."""

    unreachable_since: AwareDatetime
    fenced_at: AwareDatetime | None = None
    fence: FenceResult | None = None
    attempts: int = Field(default=0, ge=0, description="Fence attempts that did not confirm.")
    next_attempt_at: AwareDatetime | None = None
    restarted: dict[str, str] = Field(
        default_factory=dict, description="VM -> the host it was restarted on."
    )
    not_restarted: dict[str, str] = Field(default_factory=dict, description="VM -> why not.")
    recorded: bool = Field(default=False, description="Its audit record was written.")


class RecoveryState(Frozen):
    api_version: ApiVersion = "placement/v1alpha1"
    kind: Literal["RecoveryState"] = "RecoveryState"
    cluster: str
    vms: dict[str, SavedVm] = Field(default_factory=dict, description="By UUID.")
    hosts: dict[str, HostRecovery] = Field(default_factory=dict)
    intents: dict[str, RestartIntent] = Field(default_factory=dict, description="By UUID.")


class RecordedSighting(Frozen):
    """The newest snapshot recorded on ``reconciler/observed/<cluster>`` in which a host was
    reachable, with the definitions recorded beside it."""

    commit: str
    snapshot: Snapshot
    definitions: dict[str, str] = Field(
        default_factory=dict, description="VM name -> its domain XML as recorded (redacted)."
    )
