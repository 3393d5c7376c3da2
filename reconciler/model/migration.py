"""What a live migration reports while it runs and what it ended as.

Shared by the engine (through its ``Migrator`` port) and the libvirt adapter that implements
it, so it lives below both.
"""

from __future__ import annotations

from reconciler.model.base import Frozen, HostName, VmName


class MigrationProgress(Frozen):
    """One reading of a running migration's job."""

    vm: str
    phase: str = "memory"
    """What is being sent now: ``disk`` (local disks copied) or ``memory``."""
    elapsed: float = 0.0
    data_total: int = 0
    data_processed: int = 0
    data_remaining: int = 0
    bytes_per_second: float = 0.0
    disk_total: int = 0
    """Bytes of local disk the move copies (0 when it copies none)."""
    disk_processed: int = 0
    memory_remaining: int = 0
    """Bytes of memory still to send in this pass."""
    dirty_rate: int = 0
    """Bytes per second the guest writes while it migrates (libvirt's job statistics)."""
    iteration: int = 0
    """The pass over memory: 1 the first, each later one sends what was written meanwhile."""
    throttle: int = 0
    """Percent of the guest's vCPU time auto-converge holds back (0: none)."""
    post_copy: bool = False
    """Switched to post-copy: the VM runs on the target, which fetches the rest."""


class MigrationResult(Frozen):
    """What a migration ended as, after looking at both hosts (not only at the exception)."""

    vm: VmName
    source: HostName
    target: HostName
    succeeded: bool
    aborted: bool = False
    error: str | None = None
    running_on: list[HostName] = []
    """Hosts the VM was found running on afterwards (exactly one when all is well)."""
    paused_on: list[HostName] = []
    """Hosts the VM was found paused on afterwards and could not be resumed."""
    seconds: float = 0.0
    downtime_ms: float | None = None
    data_bytes: int | None = None
    post_copy: bool = False
    """The move switched to post-copy."""
    throttle: int | None = None
    """The highest auto-converge throttle (percent of vCPU time) the guest was held to."""
    iterations: int | None = None
    """Passes over memory."""
    post_copy_failed: bool = False
    """It switched to post-copy and did not end verified on its target: left split between the
    hosts (paused on the source until the post-copy is resumed), or ended out of sight. The
    intent stays on the domain for the next round (``docs/apply.md``)."""
