"""What a change of the desired state does: the plans of two revisions on the same
observation, what differs between them, and optionally a replay of recorded observations.

Written by ``reconciler impact --format json`` (``kind: Impact``, ``schemas/impact.json``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field

from reconciler.model.base import ApiVersion, Frozen
from reconciler.model.plan import Move, Plan, Unsatisfiable


class MoveChange(Frozen):
    """A VM both revisions move, but not the same way."""

    vm: str
    base: Move
    head: Move


class SpreadChange(Frozen):
    """One CPU architecture's score spread: as observed, and after each revision's plan."""

    arch: str
    before: float = Field(description="As observed (the same snapshot for both).")
    base_after: float
    head_after: float
    base_threshold: float
    head_threshold: float


class SideRound(Frozen):
    """One revision in one replayed round."""

    acted: bool = Field(description="Moves were applied in this round.")
    moves: int = Field(ge=0, description="Moves applied (this round's, within batch).")
    bytes: int = Field(ge=0, description="Guest memory of those moves.")
    moved_back: int = Field(
        ge=0, default=0, description="Of those, moves back to the host the VM's last move left."
    )
    deferred: int = Field(ge=0, default=0)
    spread: dict[str, float] = Field(
        default_factory=dict, description="Architecture -> spread seen by this round."
    )
    rounds_over: dict[str, int] = Field(
        default_factory=dict, description="Architecture -> imbalance streak, this round included."
    )


class BacktestRow(Frozen):
    at: AwareDatetime = Field(description="When the round runs in the replay.")
    observed_at: AwareDatetime = Field(description="The recorded snapshot it plans on.")
    recorded: bool = Field(
        description="true: the round of a recorded snapshot; false: a round every "
        "spec.interval after it, on the same snapshot (nothing new was recorded)."
    )
    base: SideRound | None = Field(default=None, description="None: no round of base then.")
    head: SideRound | None = None


class SideTotals(Frozen):
    rounds: int = Field(ge=0)
    acted: int = Field(ge=0, description="Rounds that moved at least one VM.")
    moves: int = Field(ge=0)
    bytes: int = Field(ge=0)
    moved_back: int = Field(
        ge=0, default=0, description="Moves back to the host the VM's last move left."
    )
    moves_per_day: float = Field(ge=0, default=0.0, description="Moves per day of the period.")
    peak_spread: dict[str, float] = Field(
        default_factory=dict, description="Architecture -> highest spread a round saw."
    )


class Backtest(Frozen):
    """The recorded snapshots of a period replayed under both revisions (docs/review.md)."""

    since: AwareDatetime
    until: AwareDatetime
    snapshots: int = Field(ge=0, description="Recorded snapshots in the period.")
    base: SideTotals
    head: SideTotals
    rows: list[BacktestRow] = Field(default_factory=list)


class Impact(Frozen):
    api_version: ApiVersion = "placement/v1alpha1"
    kind: Literal["Impact"] = "Impact"
    cluster: str
    path: str = Field(description="The cluster folder in the repository.")
    base_revision: str | None = None
    head_revision: str | None = None
    snapshot_source: str = Field(description="Where the snapshot both plans use came from.")
    base: Plan = Field(description="As plan --format json writes it.")
    head: Plan
    only_head: list[Move] = Field(
        default_factory=list, description="VMs only the head moves (its moves and deferred)."
    )
    no_longer: list[Move] = Field(
        default_factory=list, description="VMs the base moves and the head no longer does."
    )
    changed: list[MoveChange] = Field(default_factory=list)
    spreads: list[SpreadChange] = Field(default_factory=list)
    new_unsatisfiable: list[Unsatisfiable] = Field(default_factory=list)
    resolved_unsatisfiable: list[Unsatisfiable] = Field(default_factory=list)
    base_bytes: int = Field(ge=0, description="Guest memory of every move and deferred move.")
    head_bytes: int = Field(ge=0)
    differs: bool = Field(description="The exit code 2: moves, problems or the replay differ.")
    backtest: Backtest | None = None
