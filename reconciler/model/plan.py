"""A plan: the migrations that bring the observed state toward the desired one, explained.

Moves run in ``wave`` order (all moves of a wave may run at once); ``deferred`` holds what the
batch limit pushed to a later reconcile; ``unsatisfiable`` what no sequence of moves can reach.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import AwareDatetime, Field

from reconciler.model.base import ApiVersion, Frozen, HostName, VmName
from reconciler.model.load import ForecastView
from reconciler.model.snapshot import MigrationClass


class Reason(StrEnum):
    """Why a VM moves. CamelCase so it reads the same in YAML, JSON, PR text and logs."""

    DRIFT = "Drift"
    MAINTENANCE = "Maintenance"
    PIN = "Pin"
    HOST_AFFINITY = "HostAffinity"
    HOST_ANTI_AFFINITY = "HostAntiAffinity"
    ANTI_AFFINITY = "AntiAffinity"
    AFFINITY = "Affinity"
    SPREAD = "Spread"
    HOST_LIMIT = "HostLimit"
    BALANCE = "Balance"


class Assist(StrEnum):
    """The help a live migration of a busy guest is made with (``migration`` in the policy)."""

    NONE = "none"
    AUTO_CONVERGE = "autoConverge"
    """libvirt throttles the guest's vCPUs until what it writes fits in the bandwidth."""
    POST_COPY = "postCopy"
    """After one pass over memory the VM runs on the target, which fetches the rest."""


class Convergence(Frozen):
    """What a live move of a guest that writes memory is predicted to do, and its risk.

    Predicted from the guest's measured dirty rate, its memory and disk bytes against the
    bandwidth the policy allows (``reconciler.core.convergence``).
    """

    dirty_rate: int = Field(ge=0, description="Bytes the guest writes per second, measured.")
    bandwidth: int = Field(ge=0, description="Bytes per second the move may use.")
    bandwidth_assumed: bool = Field(
        default=False,
        description="The policy sets no bandwidth: the prediction assumes this link speed.",
    )
    converges: bool = Field(description="Predicted to complete, with ``assist``.")
    assist: Assist = Field(description="none | autoConverge | postCopy: the help it is made with.")
    seconds: float | None = Field(
        default=None, ge=0, description="Predicted duration; None when it does not converge."
    )
    bytes: int | None = Field(
        default=None, ge=0, description="Predicted bytes sent; None when it does not converge."
    )
    passes: int | None = Field(
        default=None, ge=1, description="Predicted passes over memory before the switch."
    )
    risk: str | None = Field(
        default=None, description="What may go wrong, in one sentence for the reviewer."
    )


class Move(Frozen):
    vm: VmName
    source: HostName
    target: HostName
    memory: int = Field(ge=0, description="Guest memory to copy, bytes.")
    vcpus: int = Field(ge=0)
    reason: Reason
    rule: str | None = Field(default=None, description="The rule this move satisfies, if any.")
    detail: str = Field(description="One sentence a reviewer understands.")
    wave: int = Field(ge=0, description="Moves of one wave may run concurrently.")
    migration_class: MigrationClass = Field(
        default=MigrationClass.SHARED, description="shared | copy | cold: how it moves."
    )
    disks: list[str] = Field(
        default_factory=list, description="The local disks copied (guest devices, e.g. vda)."
    )
    disk_bytes: int = Field(default=0, ge=0, description="Disk bytes to copy (allocation).")
    copy_bytes: int = Field(
        default=0, ge=0, description="Everything to copy: guest memory (live) plus disk bytes."
    )
    convergence: Convergence | None = Field(
        default=None,
        description="For a running VM whose dirty rate was measured: whether its live "
        "migration converges at the allowed bandwidth, with which help, and its risk.",
    )


class UnsatisfiableCode(StrEnum):
    NO_FEASIBLE_HOST = "NoFeasibleHost"
    TOO_FEW_HOSTS = "TooFewHosts"
    UNMIGRATABLE = "Unmigratable"
    HOST_UNKNOWN = "HostUnknown"
    VM_NOT_FOUND = "VmNotFound"
    CONFLICT = "Conflict"
    EXCLUDED = "Excluded"
    HEADROOM = "Headroom"
    """The VMs of some ``reserveHosts`` hosts would not fit on the others (N+k)."""
    POST_COPY_FAILED = "PostCopyFailed"
    """A failed post-copy left a VM split between two hosts: what a person must do."""


class Unsatisfiable(Frozen):
    code: UnsatisfiableCode
    rule: str | None = None
    vms: list[str] = Field(default_factory=list)
    message: str = Field(description='E.g. "anti-affinity db-apart needs 4 hosts, 3 are eligible".')


class HostLoad(Frozen):
    """Predicted utilisation of one host before and after the plan (moves and deferred)."""

    host: str
    arch: str | None
    known: bool = Field(description="false when the host was unreachable: no figures.")
    cpu_before: float = 0.0
    memory_before: float = 0.0
    score_before: float = 0.0
    cpu_after: float = 0.0
    memory_after: float = 0.0
    score_after: float = 0.0
    vms_before: int = 0
    vms_after: int = 0
    cpu_now: float | None = Field(
        default=None,
        description="CPU% of its VMs in the observation's own short sample, beside cpu_before "
        "over the window (None when the plan reads no window).",
    )
    load_known: bool = Field(
        default=True,
        description="false when the load of the host or of a VM on it over the window is "
        "unknown: no balance move comes to it or leaves it.",
    )
    cpu_window: float | None = Field(
        default=None,
        description="With statistic: forecast, CPU% over the window alone (its VMs' means); "
        "cpu_before is the blend the plan used.",
    )
    cpu_forecast: float | None = Field(
        default=None,
        description="With statistic: forecast, CPU% the forecast expects over the next "
        "horizon (each VM's forecast where used, its window's mean elsewhere).",
    )


class ArchSpread(Frozen):
    """Max minus min host score within one CPU architecture."""

    arch: str
    before: float
    after: float
    threshold: float
    rounds_over: int = Field(
        ge=0, description="Consecutive rounds over threshold, this one included."
    )
    hold_rounds: int = Field(ge=1)
    balancing: bool = Field(description="Balance moves were considered this round.")


class AheadMove(Frozen):
    """A move made ahead of time: planned on the window's figures alone, it would not be."""

    vm: str
    source: str
    target: str
    host: str = Field(description="The host whose forecast made the move (its source).")
    forecast: float = Field(description="The host's CPU% the forecast expects.")
    window: float = Field(description="The host's CPU% over the window.")
    start: AwareDatetime = Field(description="The horizon forecast: from.")
    end: AwareDatetime = Field(description="The horizon forecast: until.")


class PlanLoad(Frozen):
    """What the plan's CPU figures were made of: a window, or a short sample."""

    source: str = Field(description="samples | prometheus.")
    basis: str = Field(description="window | sample (the observation's own short sample).")
    window: float = Field(ge=0, description="Seconds.")
    statistic: str = Field(description="mean | p95 | max | forecast.")
    note: str | None = Field(default=None, description="Said plainly, e.g. a short sample.")
    hold: str | None = Field(default=None, description="Why no balance move was made on it.")
    problem: str | None = Field(default=None, description="Why the window was not read.")
    unknown_vms: list[str] = Field(
        default_factory=list, description="Running VMs whose load over the window is unknown."
    )
    unknown_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts whose load is unknown (an unknown VM on them, or their pressure).",
    )
    out_of_range: dict[str, str] = Field(
        default_factory=dict,
        description="VM -> its CPU figures out of range (not a number, below zero, above what "
        "its vCPUs can use): not used; balance does not decide on the VM's host.",
    )
    duplicates: dict[str, str] = Field(
        default_factory=dict,
        description="VM -> the series it was seen in at once (the same exporter scraped by "
        "several jobs): counted once, not summed.",
    )
    forecast: ForecastView | None = Field(
        default=None,
        description="With statistic: forecast: the VMs forecast, those with too little "
        "history and those whose forecast erred too much (their window's mean stands).",
    )
    ahead: list[AheadMove] = Field(
        default_factory=list,
        description="With statistic: forecast: the moves made because of the forecast (the "
        "plan on the window's figures alone does not make them); only plan looks for them.",
    )


class Backoff(Frozen):
    """A VM moved for balance, held back from balance moves for a while."""

    vm: str
    host: str = Field(description="Where it runs.")
    left: str | None = Field(default=None, description="The host its last move left.")
    moved_at: AwareDatetime
    until: AwareDatetime = Field(description="No balance move before this.")
    back_until: AwareDatetime = Field(
        description="No balance move back to the host it left before this (twice as long)."
    )
    doublings: int = Field(ge=0, description="Times the backoff doubled already.")


class Plan(Frozen):
    api_version: ApiVersion = "placement/v1alpha1"
    kind: Literal["Plan"] = "Plan"
    plan_id: str = Field(
        description="sha256 of what the plan proposes and of the desired state it came from; "
        "the same proposal from two observations has the same id."
    )
    cluster: str
    created_at: AwareDatetime
    observed_at: AwareDatetime | None = Field(
        default=None, description="When the snapshot it was planned from was taken."
    )
    desired_revision: str | None = Field(
        default=None, description="The commit (or folder digest) of the desired state."
    )
    moves: list[Move] = Field(default_factory=list, description="This reconcile, within batch.")
    copy_bytes: int = Field(
        default=0, ge=0, description="Bytes the moves of this reconcile copy, in total."
    )
    deferred: list[Move] = Field(default_factory=list, description="Beyond batch; next rounds.")
    unsatisfiable: list[Unsatisfiable] = Field(default_factory=list)
    hosts: list[HostLoad] = Field(default_factory=list)
    spreads: list[ArchSpread] = Field(default_factory=list)
    imbalance_rounds: dict[str, int] = Field(
        default_factory=dict, description="History for the next round: arch -> rounds over."
    )
    placement: dict[str, str] = Field(
        default_factory=dict,
        description="The proposed Placement.spec.vms after every move (moves and deferred).",
    )
    optimal: bool | None = Field(
        default=None,
        alias="optimal",
        description="true: proven to need the fewest moves; false: not proven; null: not tried.",
    )
    load: PlanLoad | None = Field(
        default=None, description="What the CPU figures were made of (basis used)."
    )
    backoff: list[Backoff] = Field(
        default_factory=list, description="VMs held back from balance by their backoff."
    )

    @property
    def has_changes(self) -> bool:
        return bool(self.moves or self.deferred)


class Candidate(Frozen):
    host: str
    fits: bool
    score_after: float | None = None
    reasons: list[str] = Field(default_factory=list, description="Why it does not fit.")


class PlaceResult(Frozen):
    """Answer to "where would a new VM go?"."""

    api_version: ApiVersion = "placement/v1alpha1"
    kind: Literal["PlaceResult"] = "PlaceResult"
    host: str | None
    candidates: list[Candidate]
    message: str
