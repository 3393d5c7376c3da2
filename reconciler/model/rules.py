"""``kind: PlacementRules``: hard and soft placement constraints.

Each rule type is its own model, chosen by ``type``, so a field that does not belong to a type
(``maxSkew`` on a pin) is rejected as an unknown key.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, model_validator

from reconciler.model.base import NAME_PATTERN, ApiVersion, Frozen, Metadata


class Enforcement(StrEnum):
    REQUIRED = "required"
    PREFERRED = "preferred"


class Selector(Frozen):
    """Selects by name globs and/or labels; matches what all of its given fields match."""

    names: list[str] | None = Field(
        default=None, min_length=1, description="Name globs (fnmatch: *, ?, [abc])."
    )
    labels: dict[str, str] | None = Field(
        default=None, min_length=1, description="Every label must be present with this value."
    )

    @model_validator(mode="after")
    def _not_empty(self) -> Selector:
        if self.names is None and self.labels is None:
            raise ValueError(
                "a selector needs names and/or labels; add names: [...] or labels: {...}"
            )
        return self


MAX_COUNT = 1_000_000
"""A count of VMs: more than any cluster holds."""

_NAME = Field(pattern=NAME_PATTERN, description="Unique rule name, shown in plans.")
_ENF = Field(default=Enforcement.REQUIRED, description="required | preferred. Default: required.")


class AntiAffinityRule(Frozen):
    """Members on distinct hosts (distinct values of ``topologyKey`` when given)."""

    name: str = _NAME
    type: Literal["antiAffinity"]
    vms: Selector
    topology_key: str | None = Field(
        default=None,
        alias="topologyKey",
        min_length=1,
        description="Host label whose values must differ between members. Default: the host.",
    )
    enforcement: Enforcement = _ENF


class AffinityRule(Frozen):
    """Members together on one host."""

    name: str = _NAME
    type: Literal["affinity"]
    vms: Selector
    enforcement: Enforcement = _ENF


class HostAffinityRule(Frozen):
    """The VMs may only run on the selected hosts."""

    name: str = _NAME
    type: Literal["hostAffinity"]
    vms: Selector
    hosts: Selector
    enforcement: Enforcement = _ENF


class HostAntiAffinityRule(Frozen):
    """The VMs must not run on the selected hosts."""

    name: str = _NAME
    type: Literal["hostAntiAffinity"]
    vms: Selector
    hosts: Selector
    enforcement: Enforcement = _ENF


class PinRule(Frozen):
    """Exactly this host; never moved for balance. Always required."""

    name: str = _NAME
    type: Literal["pin"]
    vms: Selector
    hosts: Selector


class ExcludeRule(Frozen):
    """Never migrated by the reconciler; counted as load where it is."""

    name: str = _NAME
    type: Literal["exclude"]
    vms: Selector


class SpreadRule(Frozen):
    """Members spread over ``topologyKey`` values; counts differ by at most ``maxSkew``."""

    name: str = _NAME
    type: Literal["spread"]
    vms: Selector
    topology_key: str | None = Field(
        default=None,
        alias="topologyKey",
        min_length=1,
        description="Host label whose values the members spread over. Default: the host.",
    )
    max_skew: int = Field(
        default=1,
        ge=1,
        le=MAX_COUNT,
        alias="maxSkew",
        description="Largest allowed difference of member counts between two values.",
    )
    enforcement: Enforcement = _ENF


class DisruptionBudgetRule(Frozen):
    """At most ``maxConcurrent`` members migrating at the same time."""

    name: str = _NAME
    type: Literal["disruptionBudget"]
    vms: Selector
    max_concurrent: int = Field(
        default=1,
        ge=1,
        le=MAX_COUNT,
        alias="maxConcurrent",
        description="Members migrating at once, at most.",
    )


Rule = Annotated[
    AntiAffinityRule
    | AffinityRule
    | HostAffinityRule
    | HostAntiAffinityRule
    | PinRule
    | ExcludeRule
    | SpreadRule
    | DisruptionBudgetRule,
    Field(discriminator="type"),
]


class PlacementRulesSpec(Frozen):
    rules: list[Rule] = Field(default_factory=list)


class PlacementRules(Frozen):
    """Hard and soft placement constraints of one cluster."""

    api_version: ApiVersion = Field(alias="apiVersion")
    kind: Literal["PlacementRules"]
    metadata: Metadata
    spec: PlacementRulesSpec = Field(default_factory=PlacementRulesSpec)
