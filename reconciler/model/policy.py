"""``kind: BalancePolicy``: when and how much to rebalance."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Final, Literal

from cronsim import CronSim, CronSimError
from pydantic import Field, model_validator

from reconciler.model.base import ApiVersion, Frozen, Metadata
from reconciler.model.load import LoadSpec
from reconciler.model.power import PowerSpec
from reconciler.model.quantity import Duration, Percent, duration_within
from reconciler.model.recovery import RecoverySpec

_DAY: Final = timedelta(days=1)
_NEVER_AGAIN: Final = "to never move a VM for balance, give it an exclude rule in rules.yaml"
Interval = Annotated[
    Duration,
    duration_within(
        timedelta(0),
        7 * _DAY,
        above=True,
        too_short="interval {value} would reconcile without pause; give how often to "
        "reconcile, e.g. 15m",
    ),
]
"""Between rounds: more than 0 to 7d."""
RecordEvery = Annotated[
    Duration,
    duration_within(
        timedelta(0),
        7 * _DAY,
        above=True,
        too_short="record.every {value}: give how often to publish what run observes, e.g. 15m",
    ),
]
"""How often run publishes its observation: more than 0 to 7d."""
Hold = Annotated[
    Duration,
    duration_within(
        timedelta(0),
        365 * _DAY,
        too_long=f"{{value}} is too long; use at most 365d ({_NEVER_AGAIN})",
    ),
]
"""Cooldown and minimum uptime: 0 to 365d."""
WindowLength = Annotated[Duration, duration_within(timedelta(0), 366 * _DAY)]
"""A window stays open 0 (refused by validation) to 366d (a yearly schedule, always open)."""
PerGiB = Annotated[
    Duration,
    duration_within(
        timedelta(seconds=1),
        timedelta(hours=1),
        too_short="{value} is too short: under 1s per GiB would abort every migration (no "
        "network copies a GiB that fast); use at least 1s, e.g. 800s",
    ),
]
"""Migration time per GiB of guest memory: 1s to 1h."""
Stall = Annotated[
    Duration,
    duration_within(
        timedelta(seconds=1),
        _DAY,
        too_short="{value} is too short: under 1s without progress would abort every "
        "migration; use at least 1s, e.g. 150s",
    ),
]
"""A migration without progress this long is aborted: 1s to 1d."""


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

    cpu: float = Field(default=0.5, ge=0, le=1, allow_inf_nan=False)
    memory: float = Field(default=0.5, ge=0, le=1, allow_inf_nan=False)

    @model_validator(mode="after")
    def _not_all_zero(self) -> ScoreWeights:
        if self.cpu == 0 and self.memory == 0:
            raise ValueError("score weights cpu and memory are both 0; give at least one a weight")
        return self


class Parallel(Frozen):
    cluster: int = Field(
        default=4, ge=1, le=256, description="Concurrent migrations in the whole cluster."
    )


class LocalDisks(StrEnum):
    """What a VM with local disks may do: stay (block) or move with its disks copied."""

    BLOCK = "block"
    COPY = "copy"


class CopyTuning(Frozen):
    """Settings for moves that copy disks (classes copy and cold); unset: as for other moves."""

    bandwidth: int | None = Field(
        default=None, ge=0, description="MiB/s for the migration, disks included; 0 unlimited."
    )
    timeout_per_gib: PerGiB | None = Field(
        default=None,
        alias="timeoutPerGiB",
        description="Abort past this per GiB copied (guest memory plus disk allocation).",
    )
    progress_timeout: Stall | None = Field(default=None, alias="progressTimeout")
    auto_converge: bool | None = Field(default=None, alias="autoConverge")
    post_copy: bool | None = Field(default=None, alias="postCopy")


class MigrationTuning(Frozen):
    timeout_per_gib: PerGiB = Field(
        default=timedelta(seconds=800),
        alias="timeoutPerGiB",
        description="Abort a migration running longer than this per GiB of guest memory.",
    )
    progress_timeout: Stall = Field(
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
    local_disks: LocalDisks = Field(
        default=LocalDisks.BLOCK,
        alias="localDisks",
        description="block: VMs with local disks stay where they are; copy: they move, live "
        "with the disks copied (class copy) or shut off with their volumes (class cold).",
    )
    copy_moves: CopyTuning = Field(
        default_factory=CopyTuning,
        alias="copy",
        description="Overrides for moves that copy disks.",
    )


_CRON_FIELDS: Final = {
    "minute": "minutes are 0-59",
    "hour": "hours are 0-23",
    "day-of-month": "days of the month are 1-31, and the day must exist in the month",
    "month": "months are 1-12 or jan-dec",
    "day-of-week": "days of the week are 0-7 (0 and 7 are Sunday) or sun-sat",
}
CRON_EXAMPLE: Final = 'write minute hour day-of-month month day-of-week, e.g. "0 22 * * 1-5"'
_ANY_TIME: Final = datetime(2000, 1, 1, tzinfo=UTC)
"""A fixed start for parsing a schedule: only its validity is checked, never the clock."""


def cron_problem(schedule: str) -> str | None:
    """Why ``schedule`` is not a five-field cron expression (cronsim's reading), else None.

    The model accepts any five fields (the core never opens a window it cannot read);
    validation reports this on the schedule's line.
    """
    try:
        CronSim(schedule, _ANY_TIME)
    except CronSimError as exc:
        text = str(exc)
        field = text.removeprefix("Bad ").strip()
        if field in _CRON_FIELDS:
            value = schedule.split()[list(_CRON_FIELDS).index(field)]
            return f"the {field} field {value!r} is out of range ({_CRON_FIELDS[field]})"
        return text[:1].lower() + text[1:]
    return None


def timezone_problem(name: str) -> str | None:
    """Why ``name`` is not an IANA time zone this system knows, else None."""
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        import difflib  # only for the hint of a bad name: off every valid run's start-up path

        close = difflib.get_close_matches(name, sorted(zoneinfo.available_timezones()), n=1)
        hint = f"did you mean {close[0]!r}?" if close else "use an IANA name such as Europe/Berlin"
        return f"unknown time zone {name!r}; {hint}"
    return None


class Window(Frozen):
    """A time in which ``apply`` may migrate: opens at each ``schedule`` time for ``duration``."""

    schedule: str = Field(
        pattern=r"^\S+(\s+\S+){4}$",
        description='Five-field cron expression of when a window opens, e.g. "0 22 * * 1-5".',
    )
    duration: WindowLength = Field(
        description="How long the window stays open; more than 0, at most 366d."
    )
    timezone: str | None = Field(
        default=None,
        description="IANA time zone of the schedule, e.g. Europe/Berlin; UTC when absent.",
    )


class Record(Frozen):
    """How ``run --repo`` publishes what it observes, for ``reconciler impact`` in CI."""

    every: RecordEvery = Field(
        default=timedelta(minutes=15),
        description="Push the latest recorded snapshot to the branch "
        "reconciler/observed/<cluster> at most this often; more than 0, at most 7d.",
    )


class BalancePolicySpec(Frozen):
    mode: Mode = Field(default=Mode.PROPOSE, description="observe | propose | apply.")
    interval: Interval = Field(
        default=timedelta(minutes=15),
        description="How often to reconcile; more than 0, at most 7d.",
    )
    score: ScoreWeights = Field(default_factory=ScoreWeights)
    basis: Basis = Field(default=Basis.USED, description="used (measured) | allocated.")
    load: LoadSpec = Field(
        default_factory=LoadSpec,
        description="With basis used: the load over a window, from run's samples or Prometheus.",
    )
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
        default=4.0,
        gt=0,
        le=64,
        allow_inf_nan=False,
        alias="cpuOvercommit",
        description="vCPUs per host CPU, at most.",
    )
    cooldown: Hold = Field(
        default=timedelta(hours=6), description="A moved VM is not moved again for balance."
    )
    min_uptime: Hold = Field(
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
    record: Record = Field(
        default_factory=Record,
        description="Publishing observations (run --repo) for reconciler impact.",
    )
    recovery: RecoverySpec = Field(
        default_factory=RecoverySpec,
        description="Dead-host recovery: fence, restart elsewhere, keep room (docs/recovery.md).",
    )
    power: PowerSpec = Field(
        default_factory=PowerSpec,
        description="Power saving: consolidate when load is low and power idle hosts off, "
        "and on again before they are needed (docs/power.md). Default: off.",
    )


class BalancePolicy(Frozen):
    """When and how much to rebalance one cluster."""

    api_version: ApiVersion = Field(alias="apiVersion")
    kind: Literal["BalancePolicy"]
    metadata: Metadata
    spec: BalancePolicySpec = Field(default_factory=BalancePolicySpec)
