"""``kind: BalancePolicy``: when and how much to rebalance."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from reconciler.model.base import ApiVersion, Frozen, Metadata
from reconciler.model.quantity import Duration, Percent


class Mode(StrEnum):
    OBSERVE = "observe"
    PROPOSE = "propose"
    APPLY = "apply"


class Basis(StrEnum):
    USED = "used"
    ALLOCATED = "allocated"


class Drift(StrEnum):
    REVERT = "revert"
    ADOPT = "adopt"


class ScoreWeights(Frozen):
    """Weights of CPU and memory in a host's load score; at least one must be above 0."""

    cpu: float = Field(default=0.5, ge=0, le=1)
    memory: float = Field(default=0.5, ge=0, le=1)

    @model_validator(mode="after")
    def _not_all_zero(self) -> ScoreWeights:
        if self.cpu == 0 and self.memory == 0:
            raise ValueError("score weights cpu and memory are both 0; give at least one a weight")
        return self


class Parallel(Frozen):
    cluster: int = Field(
        default=4, ge=1, le=256, description="Concurrent migrations in the whole cluster."
    )


class MigrationTuning(Frozen):
    timeout_per_gib: Duration = Field(
        default=timedelta(seconds=800),
        alias="timeoutPerGiB",
        description="Abort a migration running longer than this per GiB of guest memory.",
    )
    progress_timeout: Duration = Field(
        default=timedelta(seconds=150),
        alias="progressTimeout",
        description="Abort a migration that makes no progress for this long.",
    )
    auto_converge: bool = Field(
        default=False,
        alias="autoConverge",
        description="Let libvirt throttle the guest's vCPUs so a busy VM's migration converges.",
    )
    post_copy: bool = Field(
        default=False,
        alias="postCopy",
        description="Allow post-copy migration: switch to the target before all memory is copied.",
    )


class Window(Frozen):
    schedule: str = Field(
        pattern=r"^\S+(\s+\S+){4}$",
        description="Five-field cron expression of when a window opens.",
    )
    duration: Duration = Field(description="How long the window stays open.")
    timezone: str | None = Field(
        default=None,
        description="IANA time zone of the schedule, e.g. Europe/Berlin; UTC when absent.",
    )


class BalancePolicySpec(Frozen):
    mode: Mode = Field(default=Mode.PROPOSE, description="observe | propose | apply.")
    interval: Duration = Field(default=timedelta(minutes=15), description="How often to reconcile.")
    score: ScoreWeights = Field(default_factory=ScoreWeights)
    basis: Basis = Field(default=Basis.USED, description="used (measured) | allocated.")
    threshold: Percent = Field(
        default=20, description="Act when max-min host score within one architecture exceeds this."
    )
    margin: Percent = Field(
        default=2, description="A balance move must lower the spread by at least this much."
    )
    hold_rounds: int = Field(
        default=2,
        ge=1,
        le=100,
        alias="holdRounds",
        description="Reconciles in a row the imbalance must be seen.",
    )
    host_limit: Percent = Field(
        default=90,
        alias="hostLimit",
        description="No host may exceed this memory or CPU utilisation after a move (%).",
    )
    cpu_overcommit: float = Field(
        default=4.0, gt=0, le=64, alias="cpuOvercommit", description="vCPUs per host CPU, at most."
    )
    cooldown: Duration = Field(
        default=timedelta(hours=6), description="A moved VM is not moved again for balance."
    )
    min_uptime: Duration = Field(
        default=timedelta(minutes=5),
        alias="minUptime",
        description="A VM started more recently is not moved for balance.",
    )
    batch: int = Field(default=4, ge=1, le=1000, description="Migrations per reconcile, at most.")
    parallel: Parallel = Field(default_factory=Parallel)
    drift: Drift = Field(default=Drift.REVERT, description="revert | adopt.")
    migration: MigrationTuning = Field(default_factory=MigrationTuning)
    windows: list[Window] | None = Field(
        default=None, description="apply acts only inside these; None = always."
    )


class BalancePolicy(Frozen):
    """When and how much to rebalance one cluster."""

    api_version: ApiVersion = Field(alias="apiVersion")
    kind: Literal["BalancePolicy"]
    metadata: Metadata
    spec: BalancePolicySpec = Field(default_factory=BalancePolicySpec)
