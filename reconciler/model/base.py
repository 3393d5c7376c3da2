"""Shared base classes and typed identifiers of every model."""

from __future__ import annotations

from typing import Final, Literal, NewType

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

HostName = NewType("HostName", str)
"""A host's name as in the Cluster document."""
VmName = NewType("VmName", str)
"""A libvirt domain name; unique within a cluster."""
VmUuid = NewType("VmUuid", str)
"""A libvirt domain UUID; it survives live migration and renames."""
RuleName = NewType("RuleName", str)

API_VERSION: Final = "placement/v1alpha1"
ApiVersion = Literal["placement/v1alpha1"]

# Names used as hosts, VMs and rules: what libvirt accepts for a domain name, minus '/'.
NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:+-]{0,127}$"
LABEL_KEY_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_./-]{0,61}[A-Za-z0-9])?$"


class Frozen(BaseModel):
    """Immutable data with unknown keys rejected; the base of every model."""

    # camelCase in every public format (YAML, JSON, schemas): the alias of every field is its
    # camelCase name unless the field sets one; Python code uses the snake_case names.
    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, alias_generator=to_camel
    )


class Metadata(Frozen):
    """Identifies one document."""

    name: str = Field(pattern=NAME_PATTERN, description="Name of this document.")
    annotations: dict[str, str] = Field(
        default_factory=dict, description="Free-form notes for people; ignored by the reconciler."
    )
