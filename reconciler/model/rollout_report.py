"""What ``reconciler rollout plan`` and ``rollout status`` show, as data (``--format json``)."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field

from reconciler.model.base import ApiVersion, Frozen
from reconciler.model.plan import Move, Unsatisfiable
from reconciler.model.rollout_progress import StepOutcome


class BlockingVm(Frozen):
    """A running VM that cannot leave a host the rollout takes out."""

    vm: str
    host: str
    why: str
    rule: str | None = None


class StepView(Frozen):
    """One step and its latest record."""

    step: str
    outcome: StepOutcome | None = Field(default=None, description="None: not begun.")
    at: AwareDatetime | None = None
    by: str = ""
    detail: str = ""


HostState = Literal["pending", "out", "done", "failed"]


class RolloutHost(Frozen):
    """One host of a rollout: where it is, and (in a plan) what leaving it takes."""

    host: str
    state: HostState = Field(
        description="pending: not begun; out: drained by the rollout; done: given back; "
        "failed: its current step failed (it stays out)."
    )
    step: str | None = Field(default=None, description="Its current step; None when done.")
    steps: list[StepView] = Field(default_factory=list)
    evacuation: list[Move] = Field(
        default_factory=list, description="plan: where its VMs would go if it were taken now."
    )
    blocked_by: list[BlockingVm] = Field(default_factory=list)
    shut_down: list[BlockingVm] = Field(
        default_factory=list,
        description="plan: running VMs that cannot leave, shut down for the host's turn and "
        "started again after (immovable.action: shutdown).",
    )
    problems: list[Unsatisfiable] = Field(
        default_factory=list, description="plan: VMs of it that no host could take now."
    )


class RolloutPlan(Frozen):
    """The order of a rollout, each host's evacuation and what blocks, before it starts."""

    api_version: ApiVersion = "placement/v1alpha1"
    kind: Literal["RolloutPlan"] = "RolloutPlan"
    cluster: str
    rollout: str
    paused: bool
    max_unavailable: int
    before: list[str] = Field(default_factory=list, description="Steps run once, first.")
    host_steps: list[str] = Field(description="The steps of every host, in order.")
    after: list[str] = Field(default_factory=list, description="Steps run once, last.")
    hosts: list[RolloutHost]
    blocked: bool = Field(description="Some host cannot be taken out as things are now.")


class RolloutStatus(Frozen):
    """Where a rollout stands: worked out from its records and a look at the hosts."""

    api_version: ApiVersion = "placement/v1alpha1"
    kind: Literal["RolloutStatus"] = "RolloutStatus"
    cluster: str
    rollout: str
    phase: str = Field(
        description="NotStarted, InProgress, Paused, Blocked, Stopped (a step failed) or Done."
    )
    notes: list[str] = Field(default_factory=list, description="What it waits for, and why.")
    stopped_at: StepView | None = Field(default=None, description="The failed step, if stopped.")
    stopped_host: str | None = None
    out: list[str] = Field(default_factory=list, description="Hosts the rollout holds out now.")
    keep_out: list[str] = Field(
        default_factory=list, description="Hosts no balance move fills: out and next."
    )
    before: list[StepView] = Field(default_factory=list)
    hosts: list[RolloutHost] = Field(default_factory=list)
    after: list[StepView] = Field(default_factory=list)
    blocked_by: list[BlockingVm] = Field(default_factory=list)
    next_look: AwareDatetime | None = Field(
        default=None, description="When it acts next at the latest (a timeout, a window)."
    )
    observed: bool = Field(
        default=True, description="false: the hosts could not be looked at; records only."
    )
