"""``kind: Placement``: the desired host of each listed VM."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from reconciler.model.base import ApiVersion, Frozen, Metadata


class PlacementSpec(Frozen):
    vms: dict[str, str] = Field(
        default_factory=dict,
        description="VM name -> desired host; a VM not listed may run anywhere allowed.",
    )


class Placement(Frozen):
    """Desired host of each VM: written by proposals, editable by people."""

    api_version: ApiVersion = Field(alias="apiVersion")
    kind: Literal["Placement"]
    metadata: Metadata
    spec: PlacementSpec = Field(default_factory=PlacementSpec)
