"""Shared base classes and typed identifiers of every model."""

from __future__ import annotations

from typing import Final, Literal, NewType

from pydantic import BaseModel, ConfigDict, Field

HostName = NewType("HostName", str)
VmName = NewType("VmName", str)
RuleName = NewType("RuleName", str)

API_VERSION: Final = "placement/v1alpha1"
ApiVersion = Literal["placement/v1alpha1"]

# Names used as hosts, VMs and rules: what libvirt accepts for a domain name, minus '/'.
NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:+-]{0,127}$"
LABEL_KEY_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_./-]{0,61}[A-Za-z0-9])?$"


class Frozen(BaseModel):
    """Immutable data with unknown keys rejected; the base of every model."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Metadata(Frozen):
    """Identifies one document."""

    name: str = Field(pattern=NAME_PATTERN, description="Name of this document.")
    annotations: dict[str, str] = Field(
        default_factory=dict, description="Free-form notes for people; ignored by the reconciler."
    )
