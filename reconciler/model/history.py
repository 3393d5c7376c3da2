"""What the planner needs to know of earlier rounds: the imbalance streak and since when.

The engine builds it from the ReconcileStatus of the last round (``plan --history FILE`` reads
one from a file for offline what-ifs). Per-VM facts (cooldown, age) are not here: they live on
the VMs, in their domain metadata, and reach the planner through the snapshot.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field

from reconciler.model.base import ApiVersion, Frozen


class History(Frozen):
    api_version: ApiVersion = "placement/v1alpha1"
    kind: Literal["History"] = "History"
    imbalance_rounds: dict[str, int] = Field(
        default_factory=dict,
        description="CPU architecture -> consecutive rounds seen over threshold before this one.",
    )
    observed_since: AwareDatetime | None = Field(
        default=None,
        description="When a reconcile round first observed the cluster. A VM first seen then "
        "was already running and counts as old for minUptime; one first seen later counts "
        "from then. None: no round has run, every VM counts as old.",
    )
    last_round_at: AwareDatetime | None = Field(
        default=None,
        description="When the last round observed the cluster; a VM without a first-seen "
        "record appeared after it and counts from then.",
    )
