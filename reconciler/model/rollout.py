"""``kind: Rollout``: rolling maintenance of hosts, one file per rollout (``rollouts/<name>.yaml``).

A rollout takes its hosts out one at a time (``maxUnavailable`` at once): it evacuates a host
as a drain does, runs its commands, optionally reboots it, waits until it is ready again and
gives it back, then goes on to the next host. Steps run once before and once after the whole
rollout (``before``, ``after``) frame it, e.g. Ceph's ``noout``. Merging the file approves it;
``spec.paused: true`` holds it. What the reconciler did so far is a ``RolloutProgress``
(:mod:`reconciler.model.rollout_progress`).
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Final, Literal

from pydantic import AwareDatetime, BeforeValidator, Field, WithJsonSchema

from reconciler.model.base import NAME_PATTERN, ApiVersion, Frozen, Metadata
from reconciler.model.policy import Window
from reconciler.model.quantity import Duration, duration_within
from reconciler.model.rules import Selector

_DAY: Final = timedelta(days=1)

CommandTimeout = Annotated[
    Duration,
    duration_within(
        timedelta(seconds=1),
        _DAY,
        too_short="{value} is too short for a command; use at least 1s, e.g. 10m",
    ),
]
"""The longest one command may run: 1s to 1d."""
ReadyTimeout = Annotated[
    Duration,
    duration_within(
        timedelta(seconds=1),
        _DAY,
        too_short="{value} is too short to wait for a host; use at least 1s, e.g. 30m",
    ),
]
"""The longest a host may take to be ready again: 1s to 1d."""
ReadyInterval = Annotated[
    Duration,
    duration_within(
        timedelta(seconds=1),
        timedelta(hours=1),
        too_short="{value} is too short between two looks at a host; use at least 1s, e.g. 10s",
    ),
]
"""Between two looks at a host that is not ready yet: 1s to 1h."""
Settle = Annotated[Duration, duration_within(timedelta(0), _DAY)]
"""How long a ready host must stay ready before it is given back: 0s to 1d."""
DrainTimeout = Annotated[
    Duration,
    duration_within(
        timedelta(minutes=1),
        7 * _DAY,
        too_short="{value} is too short to evacuate a host; use at least 1m, e.g. 1h",
    ),
]
"""The longest the evacuation of one host may take: 1m to 7d."""
ShutdownTimeout = Annotated[
    Duration,
    duration_within(
        timedelta(seconds=1),
        timedelta(hours=1),
        too_short="{value} is too short for a guest to shut down; use at least 1s, e.g. 5m",
    ),
]
"""The longest a guest may take to shut down: 1s to 1h."""

ENV_NAME_PATTERN: Final = r"^[A-Za-z_][A-Za-z0-9_]*$"
MAX_UNAVAILABLE: Final = 1000


class OnFailure(StrEnum):
    STOP = "stop"
    """The rollout stops at the first step that fails; the host stays out, named in status."""


class ImmovableAction(StrEnum):
    """What to do with a running VM that cannot leave its host (pinned, excluded, immovable)."""

    BLOCK = "block"
    """The host is not worked on; the rollout waits there and says which VM blocks it."""
    SHUTDOWN = "shutdown"
    """The VM is shut down gracefully before the host's commands, started again after it is
    ready, on the same host."""


class Then(StrEnum):
    """How a rollout goes on after a person looked at the step it stopped at."""

    RETRY = "retry"
    """Run the step again."""
    SKIP = "skip"
    """Take the step as done (a person did it by hand) and go on with the next."""


class Resume(Frozen):
    """A person's word on one failed step: the rollout goes on from it."""

    host: str | None = Field(
        default=None, description="The host of the step; none for a step before or after."
    )
    step: str = Field(description="The step, as status names it: command/upgrade, ready, ...")
    failed_at: AwareDatetime = Field(
        alias="failedAt",
        description="The time of the failure, as status shows it: only that failure is "
        "resumed, a later one of the same step stops the rollout again.",
    )
    then: Then = Field(description="retry: run the step again; skip: take it as done.")


def _names_list(value: object) -> object:
    """``hosts: [kvm-01, kvm-02]`` is short for ``hosts: {names: [kvm-01, kvm-02]}``."""
    return {"names": value} if isinstance(value, list) else value


HostsSelector = Annotated[
    Selector,
    BeforeValidator(_names_list),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
                {
                    "type": "object",
                    "properties": {
                        "names": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                        "labels": {
                            "type": "object",
                            "additionalProperties": {"type": "string"},
                            "minProperties": 1,
                        },
                    },
                    "additionalProperties": False,
                },
            ],
            "description": "The hosts, in order: a list of host names (globs allowed), or a "
            "selector {names: [...], labels: {...}}. Hosts come in the order of the first name "
            "or glob that matches them, then in the Cluster's order.",
        }
    ),
]


class Command(Frozen):
    """An external command: argv run without a shell, ``{host}`` and ``{uri}`` replaced."""

    argv: list[str] = Field(
        min_length=1,
        description="The program and its arguments, run without a shell. In per-host steps "
        "{host} is the host's name and {uri} its libvirt URI. No secret here: every user of "
        "the machine can read a command line; give secrets through passEnv.",
    )
    timeout: CommandTimeout = Field(
        description="Required: a command running longer is killed (with everything it "
        "started) and fails; 1s to 1d."
    )
    env: dict[Annotated[str, Field(pattern=ENV_NAME_PATTERN)], str] = Field(
        default_factory=dict,
        description="Environment variables it gets (plain values, kept in git: no secrets).",
    )
    pass_env: list[Annotated[str, Field(pattern=ENV_NAME_PATTERN)]] = Field(
        default_factory=list,
        alias="passEnv",
        description="Variables passed on from the reconciler's own environment (for secrets, "
        "e.g. from /etc/reconciler/env). Nothing else of its environment is passed but PATH, "
        "HOME, LANG and TZ.",
    )


class Step(Command):
    """A named command of the rollout, recorded in git as a step of its own."""

    name: str = Field(pattern=NAME_PATTERN, description="Names the step in status and history.")
    safe_to_repeat: bool = Field(
        alias="safeToRepeat",
        description="Required: true when running it again after an interruption (the "
        "reconciler stopped mid-step) does no harm; false stops the rollout there for a person.",
    )


class Reboot(Command):
    """The command that reboots the host; the ready wait follows it."""

    safe_to_repeat: bool = Field(
        alias="safeToRepeat",
        description="Required: may the reboot be run again when the reconciler stopped while "
        "it ran?",
    )


class Check(Command):
    """A command that exits 0 when the host is ready; tried again until the ready timeout."""

    name: str = Field(pattern=NAME_PATTERN, description="Names the check in status and logs.")


class Ready(Frozen):
    """When a host is ready again: libvirt answers, every check passes, and it stays so."""

    timeout: ReadyTimeout = Field(
        default=timedelta(minutes=30),
        json_schema_extra={"default": "30m"},
        description="The host must be ready within this (from the start of the wait), else the "
        "step fails; 1s to 1d.",
    )
    interval: ReadyInterval = Field(
        default=timedelta(seconds=10),
        json_schema_extra={"default": "10s"},
        description="Between two looks at a host that is not ready yet; 1s to 1h.",
    )
    checks: list[Check] = Field(
        default_factory=list,
        description="Commands that must all exit 0 (after libvirt answers); tried again until "
        "the timeout, so they are always safe to repeat.",
    )
    settle: Settle = Field(
        default=timedelta(0),
        json_schema_extra={"default": "0s"},
        description="After the checks pass, libvirt must keep answering this long before the "
        "host is given back; 0s to 1d.",
    )


class EachHost(Frozen):
    """The steps of every host: drain, commands, reboot, ready, undrain."""

    drain_timeout: DrainTimeout = Field(
        default=timedelta(hours=1),
        alias="drainTimeout",
        json_schema_extra={"default": "1h"},
        description="The evacuation of a host must end within this, else the step fails; 1m "
        "to 7d.",
    )
    commands: list[Step] = Field(
        default_factory=list, description="Run in order once the host runs no VM."
    )
    reboot: Reboot | None = Field(default=None, description="Reboots the host after commands.")
    ready: Ready = Field(default_factory=Ready)


class Immovable(Frozen):
    """VMs that cannot leave their host: pinned to it, excluded, or immovable."""

    action: ImmovableAction = Field(
        default=ImmovableAction.BLOCK,
        description="block: the rollout waits at that host and names the VM; shutdown: shut "
        "it down gracefully before the commands and start it again once the host is ready.",
    )
    shutdown_timeout: ShutdownTimeout = Field(
        default=timedelta(minutes=5),
        alias="shutdownTimeout",
        json_schema_extra={"default": "5m"},
        description="A guest not shut off within this fails the step (it is never forced "
        "off); 1s to 1h.",
    )


class RolloutSpec(Frozen):
    paused: bool = Field(
        default=False,
        description="true: nothing new starts; hosts out stay out. Merge false to go on.",
    )
    hosts: HostsSelector
    max_unavailable: int = Field(
        default=1,
        ge=1,
        le=MAX_UNAVAILABLE,
        alias="maxUnavailable",
        description="Hosts out (from their drain to their undrain) at the same time, at most.",
    )
    windows: list[Window] | None = Field(
        default=None,
        description="A host is taken out only inside these windows (the policy's format); "
        "a host already out is finished. None: at any time.",
    )
    on_failure: OnFailure = Field(
        default=OnFailure.STOP,
        alias="onFailure",
        description="stop: the rollout stops at the first failed step.",
    )
    immovable: Immovable = Field(default_factory=Immovable)
    before: list[Step] = Field(
        default_factory=list, description="Run once, in order, before the first host."
    )
    each_host: EachHost = Field(default_factory=EachHost, alias="eachHost")
    after: list[Step] = Field(
        default_factory=list, description="Run once, in order, after the last host."
    )
    resume: list[Resume] = Field(
        default_factory=list,
        description="After a stop: the failed steps a person looked at, each retried or "
        "skipped.",
    )


class Rollout(Frozen):
    """Rolling maintenance of some hosts of one cluster."""

    api_version: ApiVersion = Field(alias="apiVersion")
    kind: Literal["Rollout"]
    metadata: Metadata
    spec: RolloutSpec
