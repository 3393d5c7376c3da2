"""The desired state of one cluster: its four documents together, and its rollouts."""

from __future__ import annotations

from pydantic import Field

from reconciler.model.base import API_VERSION, Frozen, Metadata
from reconciler.model.cluster import Cluster
from reconciler.model.placement import Placement
from reconciler.model.policy import BalancePolicy
from reconciler.model.rollout import Rollout
from reconciler.model.rules import PlacementRules


class DesiredState(Frozen):
    """Cluster, policy, rules and placement of one cluster, and its rollouts.

    Policy, rules and placement are optional in a folder; absent ones take their defaults.
    Rollouts are the files of its ``rollouts/`` folder, by name.
    """

    cluster: Cluster
    policy: BalancePolicy = Field(
        default_factory=lambda: BalancePolicy(
            api_version=API_VERSION, kind="BalancePolicy", metadata=Metadata(name="default")
        )
    )
    rules: PlacementRules = Field(
        default_factory=lambda: PlacementRules(
            api_version=API_VERSION, kind="PlacementRules", metadata=Metadata(name="default")
        )
    )
    placement: Placement = Field(
        default_factory=lambda: Placement(
            api_version=API_VERSION, kind="Placement", metadata=Metadata(name="default")
        )
    )
    rollouts: list[Rollout] = Field(
        default_factory=list, description="The rollouts of rollouts/, in name order."
    )
