"""``kind: ReconcileStatus``: what one cluster's last reconcile round saw, did and concluded.

Written once per round, at its end (in a ``finally``), by a StatusStore; read by the next round,
by ``plan`` and ``place`` (the imbalance streak) and by people. Modelled on Flux's status:
the desired revision observed, conditions Ready / Reconciling / Stalled with reason and message,
the last result and when the next round is due. Per-VM facts are not here: they live on the
VMs, in their domain metadata.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import AwareDatetime, Field

from reconciler.model.base import ApiVersion, Frozen
from reconciler.model.history import History

TRIGGERS = ("merge", "schedule", "drift", "maintenance", "manual", "recovery", "power")
"""What started a round that acted, as recorded in the Reconciler-Trigger trailer."""


class ConditionType(StrEnum):
    READY = "Ready"
    """The cluster matches its desired state as far as the rules allow."""
    RECONCILING = "Reconciling"
    """Moves are planned or running; more rounds will follow."""
    STALLED = "Stalled"
    """Nothing can progress without a person: invalid desired state, every host unreachable."""
    RECOVERED = "Recovered"
    """False while a dead host is not fenced or its VMs are not all restarted elsewhere."""
    DUPLICATED = "Duplicated"
    """True while a VM runs on two hosts, or is defined on two outside a move in progress."""
    LOAD_KNOWN = "LoadKnown"
    """False while the load over the window of some VM or host is unknown (basis used): balance
    leaves them alone."""


class Condition(Frozen):
    type: ConditionType
    status: bool
    reason: str = Field(description="CamelCase, e.g. Balanced, MovesPending, InvalidPolicy.")
    message: str = ""
    last_transition: AwareDatetime = Field(description="When ``status`` last changed.")


class RoundOutcome(StrEnum):
    IN_SYNC = "InSync"
    """Nothing to do."""
    APPLIED = "Applied"
    """Every admitted move succeeded."""
    PARTIAL = "Partial"
    """Some moves failed, were skipped as stale, or the round was interrupted."""
    PLANNED = "Planned"
    """Moves were planned and not executed (dry run, observe or propose mode)."""
    FAILED = "Failed"
    """The round ended with an error before or while acting."""


class MoveOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    ABORTED = "aborted"


class MoveResult(Frozen):
    """What happened to one move of a round."""

    vm: str
    source: str
    target: str
    outcome: MoveOutcome
    reason: str = Field(description="The move's reason, or why it was skipped or failed.")
    detail: str = ""
    started_at: AwareDatetime | None = None
    seconds: float | None = Field(default=None, ge=0, description="Migration time.")
    downtime_ms: float | None = Field(default=None, ge=0)
    data_bytes: int | None = Field(default=None, ge=0, description="Memory sent.")
    post_copy: bool = Field(default=False, description="The move switched to post-copy.")
    throttle: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="The highest auto-converge throttle the guest was held to, percent.",
    )
    iterations: int | None = Field(default=None, ge=0, description="Passes over memory.")


class Duplicate(Frozen):
    """One VM (by UUID) seen on several hosts where it should be on one."""

    vm: str = Field(description="Its name; names joined by '/' when the copies differ.")
    uuid: str
    hosts: list[str] = Field(min_length=2, description="Where a copy is, sorted.")
    running: bool = Field(
        description="true: it runs on each of these hosts (two guests writing its disks); "
        "false: it is defined on them, running on one at most."
    )

    def describe(self) -> str:
        how = "runs on" if self.running else "is defined on"
        return f"{self.vm} ({self.uuid}) {how} {' and '.join(self.hosts)}"


class RoundResult(Frozen):
    started_at: AwareDatetime
    finished_at: AwareDatetime
    trigger: str = Field(description="manual, schedule, merge, drift, maintenance, webhook...")
    outcome: RoundOutcome
    plan_id: str | None = None
    message: str = ""
    moves: list[MoveResult] = Field(default_factory=list)


class RolloutState(Frozen):
    """Where one rollout stood at the end of a round (``reconciler rollout status`` says more)."""

    rollout: str
    phase: str = Field(
        description="NotStarted, InProgress, Paused, Blocked, Stopped (a step failed) or Done."
    )
    out: list[str] = Field(default_factory=list, description="Hosts it holds out.")
    stopped_host: str | None = Field(default=None, description="Where it stopped, if it did.")
    stopped_step: str | None = None
    message: str = Field(default="", description="Why it stopped or waits, in a sentence.")
    next_look: AwareDatetime | None = Field(
        default=None, description="When it acts next at the latest (a timeout, a settle time)."
    )


class ReconcileStatus(Frozen):
    api_version: ApiVersion = "placement/v1alpha1"
    kind: Literal["ReconcileStatus"] = "ReconcileStatus"
    cluster: str
    observed_revision: str | None = Field(
        default=None, description="The desired-state revision (commit or digest) last read."
    )
    observed_since: AwareDatetime | None = Field(
        default=None, description="When a round first observed the cluster."
    )
    last_observed_at: AwareDatetime | None = None
    imbalance_rounds: dict[str, int] = Field(
        default_factory=dict, description="CPU architecture -> consecutive rounds over threshold."
    )
    rounds: int = Field(default=0, ge=0, description="Rounds recorded so far.")
    conditions: list[Condition] = Field(default_factory=list)
    duplicates: list[Duplicate] = Field(
        default_factory=list,
        description="VMs the last observation found on two hosts (see the Duplicated "
        "condition); every move of them is stopped.",
    )
    last_result: RoundResult | None = None
    next_round_at: AwareDatetime | None = None
    standby: dict[str, str] = Field(
        default_factory=dict,
        description="Hosts power saving powered off, each with why (docs/power.md).",
    )
    rollouts: list[RolloutState] = Field(
        default_factory=list, description="The cluster's rollouts as the round left them."
    )

    def condition(self, kind: ConditionType) -> Condition | None:
        return next((c for c in self.conditions if c.type is kind), None)

    def history(self) -> History:
        """What the planner needs of this status for the next round."""
        return History(
            imbalance_rounds=dict(self.imbalance_rounds),
            observed_since=self.observed_since,
            # rounds before the first complete observation stamped no VM: they do not count
            last_round_at=self.last_observed_at if self.observed_since is not None else None,
        )


def with_condition(
    conditions: list[Condition],
    kind: ConditionType,
    status: bool,
    reason: str,
    message: str,
    now: AwareDatetime,
) -> list[Condition]:
    """``conditions`` with ``kind`` set; its transition time changes only when status does."""
    old = next((c for c in conditions if c.type is kind), None)
    since = old.last_transition if old is not None and old.status == status else now
    new = Condition(type=kind, status=status, reason=reason, message=message, last_transition=since)
    out = [c for c in conditions if c.type is not kind] + [new]
    return sorted(out, key=lambda c: list(ConditionType).index(c.type))


def status_json(status: ReconcileStatus) -> str:
    """The status as the JSON written to status.json and to the audit commit."""
    return status.model_dump_json(by_alias=True, indent=2, exclude_none=False) + "\n"
