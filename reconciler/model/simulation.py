"""``reconciler simulate``: the host kinds a what-if cluster is made of, the load it replays,
and the report it gives, per policy (the metrics of Beloglazov & Buyya, CCPE 2012, beside the
product's own).

A host kind's *power curve* is its draw in watts at 0, 10, ..., 100% CPU load (SPECpower
style, 11 points, linear between them), or just ``idle`` and ``peak`` (linear). The published
curves of the HP ProLiant ML110 G4 and G5, with which CloudSim's PlanetLab experiments were
run, are named kinds (:data:`NAMED_KINDS`).
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import AwareDatetime, Field, model_validator

from reconciler.model.base import ApiVersion, Frozen
from reconciler.model.quantity import Size

MIB: Final = 1024**2


class PowerCurve(Frozen):
    """Watts drawn at each tenth of CPU load, or idle and peak (linear between)."""

    points: list[float] | None = Field(
        default=None,
        min_length=11,
        max_length=11,
        description="Watts at 0, 10, ..., 100% CPU load.",
    )
    idle: float | None = Field(default=None, ge=0, description="Watts at 0% load.")
    peak: float | None = Field(default=None, ge=0, description="Watts at 100% load.")

    @model_validator(mode="after")
    def _one_form(self) -> PowerCurve:
        if self.points is None and (self.idle is None or self.peak is None):
            raise ValueError("give either points (11 figures) or both idle and peak, in watts")
        if self.points is not None and (self.idle is not None or self.peak is not None):
            raise ValueError("give either points or idle and peak, not both")
        if self.points is not None and any(p < 0 for p in self.points):
            raise ValueError("watts cannot be negative")
        return self

    def curve(self) -> list[float]:
        """The 11 points, from idle and peak where the curve gives only those."""
        if self.points is not None:
            return list(self.points)
        assert self.idle is not None
        assert self.peak is not None
        return [self.idle + (self.peak - self.idle) * i / 10 for i in range(11)]


class HostKind(Frozen):
    """A kind of host a what-if cluster is made of (``--hosts 400xG4,400xG5``)."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    cpus: int = Field(ge=1, le=4096, description="CPUs (cores) of one host.")
    speed: float = Field(
        default=1.0,
        gt=0,
        description="Compute of one CPU, relative (MIPS in the literature's set-ups): a VM's "
        "demand in this unit takes demand / speed cores of the host.",
    )
    memory: Size = Field(description="Bytes, or a size such as 256GiB.")
    power: PowerCurve
    arch: str = "x86_64"


class HostKinds(Frozen):
    """A file of host kinds (``--kinds FILE``)."""

    api_version: ApiVersion = Field(default="placement/v1alpha1", alias="apiVersion")
    kind: Literal["HostKinds"] = "HostKinds"
    kinds: list[HostKind] = Field(min_length=1)


NAMED_KINDS: Final = {
    "G4": HostKind(
        name="G4",
        cpus=2,
        speed=1860,
        memory=4096 * MIB,
        power=PowerCurve(points=[86, 89.4, 92.6, 96, 99.5, 102, 106, 108, 112, 114, 117]),
    ),
    "G5": HostKind(
        name="G5",
        cpus=2,
        speed=2660,
        memory=4096 * MIB,
        power=PowerCurve(points=[93.7, 97, 101, 105, 110, 116, 121, 125, 129, 133, 135]),
    ),
}
"""HP ProLiant ML110 G4 (2 x 1860 MIPS) and G5 (2 x 2660 MIPS), 4 GiB, with their published
SPECpower curves, as CloudSim 3.0.3's PlanetLab power examples declare them."""


class TimelinePoint(Frozen):
    """One round of one policy, for the chart."""

    at: float = Field(ge=0, description="Seconds from the start.")
    spread: float | None = Field(default=None, description="The round's largest score spread.")
    hot: int = Field(ge=0, description="Hosts above hostLimit at the round.")
    migrations: int = Field(ge=0, description="Moves the round started.")
    powered: int = Field(default=0, ge=0, description="Hosts powered (not in standby).")


MAX_MOVES_LISTED = 10_000
"""Moves a policy's figures list one by one at most (the count goes on past it)."""


class SimulatedMove(Frozen):
    """One move a policy made in the simulation, as ``run`` would have made it."""

    at: float = Field(ge=0, description="Seconds from the start, when the move began.")
    vm: str
    source: str
    target: str
    reason: str = Field(description="Why (Balance, Maintenance, Drift, ...), as plan says.")
    seconds: float = Field(ge=0, description="How long it took.")
    aborted: bool = Field(default=False, description="It would not converge and was aborted.")


class RolloutFigures(Frozen):
    """What one rollout did over the simulated period, under one policy."""

    rollout: str = Field(description="Its name (metadata.name).")
    phase: str = Field(description="Where it stood at the end: NotStarted, InProgress, Done, ...")
    hosts: int = Field(ge=0, description="Hosts it selects.")
    rolled: int = Field(ge=0, description="Hosts given back after their steps (undrain done).")
    began: float | None = Field(
        default=None, ge=0, description="Seconds from the start to its first step; none: never."
    )
    ended: float | None = Field(
        default=None, ge=0, description="Seconds from the start to its last step's end."
    )
    seconds: float = Field(default=0.0, ge=0, description="From its first step to its last.")
    moves: int = Field(
        default=0,
        ge=0,
        description="Moves it caused: completed Maintenance moves off the hosts it held out.",
    )


class PolicyFigures(Frozen):
    """What one policy did over the simulated period."""

    policy: str = Field(description="Its name (a file, a revision, or a reference policy).")
    rounds: int = Field(ge=0)
    migrations: int = Field(ge=0, description="Moves that completed.")
    migrations_per_day: float = Field(ge=0)
    moved_back: int = Field(ge=0, description="Moves that took a VM back to the host it left.")
    aborted: int = Field(ge=0, description="Moves that would not converge and were aborted.")
    slatah: float = Field(
        ge=0, le=1, description="Share of active hosts' time at 100% CPU (SLATAH), pooled."
    )
    pdm: float = Field(
        ge=0, le=1, description="Share of requested CPU lost to migrations (PDM), pooled."
    )
    slav: float = Field(ge=0, description="SLATAH x PDM.")
    energy_kwh: float = Field(ge=0)
    esv: float = Field(ge=0, description="Energy (kWh) x SLAV.")
    host_hours: float = Field(
        ge=0, description="Host-hours powered (literature: hosts with a VM; realistic: on)."
    )
    power_offs: int = Field(default=0, ge=0, description="Hosts powered off.")
    power_ons: int = Field(default=0, ge=0, description="Hosts powered on again.")
    hours_over_limit: float = Field(
        ge=0, description="Host-hours above the policy's hostLimit, summed over hosts."
    )
    spread_peak: float = Field(ge=0, description="Largest score spread a round saw.")
    spread_mean: float = Field(ge=0)
    unknown_rounds: int = Field(ge=0, description="Rounds with a VM whose load was unknown.")
    timeline: list[TimelinePoint] = Field(default_factory=list, description="Per round.")
    moves: list[SimulatedMove] = Field(
        default_factory=list,
        description="Each move in the order they began (the first MAX_MOVES_LISTED).",
    )
    rollouts: list[RolloutFigures] = Field(
        default_factory=list,
        description="Each rollout played (the cluster folder's and --rollout's), by name.",
    )


class SimulationReport(Frozen):
    """``reconciler simulate --format json``: the policies side by side."""

    api_version: ApiVersion = Field(default="placement/v1alpha1", alias="apiVersion")
    kind: Literal["SimulationReport"] = "SimulationReport"
    cluster: str
    source: str = Field(description="What load was replayed (a trace folder, a CSV, ...).")
    start: AwareDatetime
    end: AwareDatetime
    step_seconds: float = Field(gt=0)
    hosts: int = Field(ge=0)
    vms: int = Field(ge=0)
    mode: Literal["literature", "realistic"] = Field(
        description="literature: a host with no VM draws nothing; realistic: every host on "
        "draws at least its idle power."
    )
    policies: list[PolicyFigures]
