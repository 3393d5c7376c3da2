"""What the reconciler remembers between rounds: past moves and the imbalance streak.

Kept in git (the audit trail) and in domain metadata; the planner reads it, never writes it.
"""

from __future__ import annotations

from pydantic import AwareDatetime, Field

from reconciler.model.base import Frozen


class MoveRecord(Frozen):
    vm: str
    source: str
    target: str
    at: AwareDatetime
    reason: str = ""


class History(Frozen):
    moves: list[MoveRecord] = Field(default_factory=list)
    imbalance_rounds: dict[str, int] = Field(
        default_factory=dict,
        alias="imbalanceRounds",
        description="CPU architecture -> consecutive rounds seen over threshold before this one.",
    )
