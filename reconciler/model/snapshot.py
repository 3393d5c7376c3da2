"""The observed state of a cluster at one moment: what the observer saw through libvirt.

Hosts that could not be reached are present with ``reachable: false`` and an ``error``: they
are unknown, never empty. A VM seen on two hosts at once (mid-migration) appears once per host
and is listed in ``Snapshot.in_flight``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import AwareDatetime, Field

from reconciler.model.base import ApiVersion, Frozen, HostName, VmName, VmUuid
from reconciler.model.load import LoadView


class VmRunState(StrEnum):
    """libvirt's virDomainState, by name."""

    NOSTATE = "nostate"
    RUNNING = "running"
    BLOCKED = "blocked"
    PAUSED = "paused"
    SHUTDOWN = "shutdown"
    SHUTOFF = "shutoff"
    CRASHED = "crashed"
    PMSUSPENDED = "pmsuspended"

    @classmethod
    def from_code(cls, code: object) -> VmRunState:
        """The state for libvirt's numeric ``virDomainState`` (unknown codes: nostate)."""
        states: list[VmRunState] = list(cls)
        return states[code] if isinstance(code, int) and 0 <= code < len(states) else cls.NOSTATE


class UnmigratableReason(StrEnum):
    """Why a VM cannot be live-migrated, read from its domain XML and state."""

    NOT_RUNNING = "NotRunning"
    LOCAL_DISK = "LocalDisk"
    HOST_DEVICE = "HostDevice"
    MEDIATED_DEVICE = "MediatedDevice"
    VTPM = "Vtpm"
    HOST_PASSTHROUGH_CPU = "HostPassthroughCpu"
    SHARED_MEMORY = "SharedMemory"
    IN_FLIGHT = "InFlight"
    DUPLICATE = "Duplicate"
    """It runs, or is defined, on two hosts: no move of it until a person keeps one copy."""
    OTHER = "Other"


class MigrationClass(StrEnum):
    """How a VM can move, read from its domain XML, its host's storage pools and its state.

    ``shared``: running, every disk on storage all hosts see; a plain live migration.
    ``copy``: running with local disks that libvirt can copy live (storage-pool volumes);
    moves only when the policy's ``migration.localDisks`` is ``copy``.
    ``cold``: shut off; its volumes and definition move while it stays off.
    ``immovable``: host devices, mediated devices, vhost-user, disks outside any pool, ...
    """

    SHARED = "shared"
    COPY = "copy"
    COLD = "cold"
    IMMOVABLE = "immovable"


class VmDisk(Frozen):
    """One disk of a VM, as its host's storage sees it."""

    target: str = Field(description="The guest device, e.g. vda.")
    source: str = Field(description="Path, pool/volume or protocol:name; empty for no medium.")
    shared: bool = Field(
        description="Nothing of it to copy: on storage every host sees (or not a storage file)."
    )
    pool: str | None = Field(default=None, description="The storage pool holding it, if any.")
    volume: str | None = Field(default=None, description="Its volume name in that pool.")
    capacity: int | None = Field(default=None, ge=0, description="Virtual size, bytes.")
    allocation: int | None = Field(
        default=None, ge=0, description="Bytes on the host's storage: what a copy moves."
    )
    why: str = Field(default="", description="Why it is shared, copyable or neither.")


class Unmigratable(Frozen):
    code: UnmigratableReason
    detail: str = Field(description="What in the domain blocks it, e.g. the disk path.")


class FailedMove(Frozen):
    """The last migration of a VM that did not complete."""

    at: AwareDatetime
    source: str
    target: str
    plan_id: str | None = None
    error: str = Field(description="What libvirt or the reconciler reported.")


class MoveIntent(Frozen):
    """A migration the reconciler is about to start, written on the domain before it starts.

    It travels with the VM; whoever finds it later (a restart after a crash, the next round)
    resolves it from where the VM really runs: on the target, a move; on the source, a failure.
    """

    plan_id: str | None = None
    source: str
    target: str
    started_at: AwareDatetime
    reason: str | None = Field(default=None, description="Why the move is made (Balance, ...).")
    actor: str | None = Field(
        default=None,
        description="Who makes it: the acting command and its machine (run@kvm-admin-1), or "
        "the holder's --identity. None: written before moves named their actor.",
    )


class ReconcilerState(Frozen):
    """The reconciler's own record on a domain, kept in its libvirt metadata.

    It travels with the VM through live migration and survives a restart of the reconciler:
    cooldown and minUptime are decided from it alone.
    """

    first_seen: AwareDatetime | None = Field(
        default=None, description="When a reconcile round first saw this VM."
    )
    last_moved_at: AwareDatetime | None = None
    last_moved_from: str | None = None
    last_moved_to: str | None = None
    last_plan_id: str | None = Field(default=None, description="The plan of the last move.")
    last_moved_by: str | None = Field(
        default=None, description="Who made the last move (its intent's actor), when known."
    )
    moves: int = Field(default=0, ge=0, description="Moves made by the reconciler.")
    last_reason: str | None = Field(
        default=None, description="Why the last move was made (Balance, Drift, ...)."
    )
    backoff: int = Field(
        default=0,
        ge=0,
        le=64,
        description="Times the balance backoff doubled: balance moves that took the VM back "
        "to the host it had left, in a row.",
    )
    last_failure: FailedMove | None = None
    intent: MoveIntent | None = Field(
        default=None, description="A migration started and not yet resolved."
    )
    unrecorded: bool = Field(
        default=False,
        description="The last move is not in the audit trail yet: set with its outcome, "
        "cleared once the round's record is written; a reconciler stopped in between leaves "
        "it for the next round to record.",
    )


class VmState(Frozen):
    name: VmName
    uuid: VmUuid
    host: HostName = Field(description="Name of the host (as in the Cluster) it was seen on.")
    state: VmRunState
    state_reason: str = Field(default="", description="libvirt's reason for the state.")
    persistent: bool = True
    vcpus: int = Field(ge=0)
    memory_max: int = Field(ge=0, description="Maximum memory in bytes.")
    memory_current: int = Field(ge=0, description="Current (balloon) memory in bytes.")
    cpu_used: float | None = Field(
        default=None, ge=0, description="CPU in use, in host cores (1.0 = one core busy)."
    )
    memory_used: int | None = Field(
        default=None, ge=0, description="Memory in use in bytes (balloon or RSS)."
    )
    uptime: float | None = Field(
        default=None, ge=0, description="Seconds since start at snapshot time, if known."
    )
    dirty_rate: int | None = Field(
        default=None,
        ge=0,
        description="Bytes of memory the guest writes per second, as libvirt's last dirty rate "
        "calculation measured it (libvirt 7.2+, a running VM); None: not measured.",
    )
    labels: dict[str, str] = Field(default_factory=dict)
    reconciler: ReconcilerState = Field(default_factory=ReconcilerState)
    migratable: bool = True
    unmigratable: list[Unmigratable] = Field(default_factory=list)
    migration_class: MigrationClass = Field(
        default=MigrationClass.SHARED, description="shared | copy | cold | immovable."
    )
    migration_reasons: list[str] = Field(
        default_factory=list, description="Why the VM has its migration class."
    )
    disks: list[VmDisk] = Field(default_factory=list)
    disk_bytes: int = Field(
        default=0, ge=0, description="Bytes of local disks a move copies (allocation)."
    )
    refused_by: dict[HostName, str] = Field(
        default_factory=dict,
        description="Hosts that would refuse it (CPU, machine type), each with why.",
    )
    hugepage_kib: int | None = Field(
        default=None,
        gt=0,
        description="Page size in KiB when its memory is backed by huge pages (its XML's "
        "<memoryBacking><hugepages>; 2048 when no size is given); None: ordinary memory.",
    )
    hugepages: int = Field(
        default=0,
        ge=0,
        description="Huge pages of hugepageKib its memory takes (memory rounded up to pages); "
        "held on its host while it runs.",
    )


class HostState(Frozen):
    name: HostName
    uri: str
    reachable: bool
    error: str | None = Field(default=None, description="Why the host is unknown.")
    uuid: str | None = None
    hostname: str | None = None
    arch: str | None = Field(default=None, description="CPU architecture, e.g. x86_64.")
    cpu_model: str | None = None
    cpus: int | None = Field(default=None, ge=0)
    memory_total: int | None = Field(default=None, ge=0, description="Bytes.")
    memory_free: int | None = Field(default=None, ge=0, description="Bytes.")
    cpu_utilisation: float | None = Field(
        default=None, ge=0, le=100, description="Host CPU busy, percent."
    )
    hugepages_free: dict[int, int] | None = Field(
        default=None,
        description="Free huge pages per page size in KiB (getFreePages, all NUMA cells "
        "together) for each huge page size the host offers; None: not reported, and VMs "
        "backed by huge pages are not limited there.",
    )
    libvirt_version: str | None = None
    hypervisor: str | None = Field(default=None, description="Driver type, e.g. QEMU.")
    hypervisor_version: str | None = None
    libvirt_calls: int = Field(default=0, ge=0, description="libvirt API calls this host took.")
    observe_seconds: float = Field(default=0, ge=0, description="Wall time to observe this host.")


class LibvirtAnswer(Frozen):
    """What libvirt on one host answered when asked now: its version, then its domains (a
    daemon lists them once it has found them again), within the connection's timeouts.

    A fence's confirmation asks whether the host answers at all (``version``: a fenced host
    must say nothing); a rollout asks whether it can be worked with again (``why`` None)."""

    version: str | None = Field(
        default=None,
        description="What it said it is, e.g. libvirt 10.0.0; None when it said nothing.",
    )
    why: str | None = Field(
        default=None,
        description="Why it cannot be worked with now (no answer, or its version but not its "
        "domains); None when it answered both.",
    )


class InFlight(Frozen):
    """A VM seen on more than one host at once, usually mid-migration."""

    name: str
    uuid: str
    hosts: list[str]


class Snapshot(Frozen):
    """Everything observed of one cluster at ``taken_at``."""

    api_version: ApiVersion = "placement/v1alpha1"
    kind: Literal["Snapshot"] = "Snapshot"
    cluster: str
    taken_at: AwareDatetime
    hosts: list[HostState]
    vms: list[VmState]
    in_flight: list[InFlight] = Field(default_factory=list)
    load: LoadView | None = Field(
        default=None,
        description="What the VMs' CPU figures were made of (a window, or a short sample); "
        "None: the observation's own sample, as observed.",
    )
    power_saving: dict[str, str] = Field(
        default_factory=dict,
        description="Host -> what power saving keeps it as (standby, booting, being emptied), "
        "since when and why, from the power book (observe; docs/power.md). Empty: none.",
    )
