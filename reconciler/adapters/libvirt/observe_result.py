"""The models of an observed host, built from the plain values ``second_sweep`` gives.

A worker process sends plain values (``RawHost``), which pickle in a fraction of the time of
the models; the observer builds the models here, once, for every host.
"""

from __future__ import annotations

from typing import Final

from pydantic import TypeAdapter, ValidationError

from reconciler.adapters.libvirt.compatibility import Needs
from reconciler.adapters.libvirt.domain_disks import disk_bytes
from reconciler.adapters.libvirt.observe_host import STATES, RawHost, RawVm
from reconciler.core.hugepages import pages_for
from reconciler.errors import HostUnreachable
from reconciler.model.base import HostName
from reconciler.model.snapshot import HostState, VmRunState, VmState

HostResult = tuple[HostState, list[tuple[VmState, str | None, Needs | None]]]
"""A host and its VMs, each VM with its CPU mode when that is host-passthrough or maximum and
what it asks of a target host."""

# libvirt's virDomain*Reason enums, by state
_REASONS: Final[dict[VmRunState, tuple[str, ...]]] = {
    VmRunState.RUNNING: (
        "unknown",
        "booted",
        "migrated",
        "restored",
        "from snapshot",
        "unpaused",
        "migration canceled",
        "save canceled",
        "wakeup",
        "crashed",
        "post-copy",
        "post-copy failed",
    ),
    VmRunState.PAUSED: (
        "unknown",
        "user",
        "migration",
        "save",
        "dump",
        "I/O error",
        "watchdog",
        "from snapshot",
        "shutting down",
        "snapshot",
        "crashed",
        "starting up",
        "post-copy",
        "post-copy failed",
        "API error",
    ),
    VmRunState.SHUTDOWN: ("unknown", "user", "daemon"),
    VmRunState.SHUTOFF: (
        "unknown",
        "shutdown",
        "destroyed",
        "crashed",
        "migrated",
        "saved",
        "failed",
        "from snapshot",
        "daemon",
    ),
    VmRunState.CRASHED: ("unknown", "panicked"),
    VmRunState.PMSUSPENDED: ("unknown",),
    VmRunState.BLOCKED: ("unknown",),
    VmRunState.NOSTATE: ("unknown",),
}

_VMS: Final[TypeAdapter[list[VmState]]] = TypeAdapter(list[VmState])
"""A host's VMs validated in one call: a third less time than a model at a time."""


def host_result(raw: RawHost) -> HostResult:
    """The HostState and VmStates of one host's plain values.

    Values that do not make a valid model (say a negative size in a domain XML) make the host
    unreachable with the reason, as any other failure to observe it does.
    """
    name, uri, facts, busy, error, calls, waited, vms, _answers = raw
    if facts is not None:
        try:
            host = HostState(
                name=HostName(name),
                uri=uri,
                reachable=True,
                cpu_utilisation=busy,
                libvirt_calls=calls,
                observe_seconds=waited,
                **facts,
            )
            states = _VMS.validate_python([_vm_fields(name, vm) for vm in vms])
            return host, [(state, vm[13], vm[15]) for state, vm in zip(states, vms, strict=True)]
        except ValidationError as err:
            error = str(HostUnreachable(f"observing {uri} failed: {err!r}"))
    host = HostState(
        name=HostName(name),
        uri=uri,
        reachable=False,
        error=error,
        libvirt_calls=calls,
        observe_seconds=waited,
    )
    return host, []


def _vm_fields(host: str, vm: RawVm) -> dict[str, object]:
    """``VmState``'s fields by their aliases, the keys its validator looks for first."""
    (
        name,
        uuid,
        code,
        reason_code,
        persistent,
        vcpus,
        memory_max,
        memory_current,
        cpu_used,
        memory_used,
        labels,
        reconciler,
        blockers,
        _mode,
        disks,
        needs,
        klass,
        why,
        dirty,
    ) = vm
    state = STATES[code] if isinstance(code, int) and 0 <= code < len(STATES) else STATES[0]
    reasons = _REASONS[state]
    reason = (
        reasons[reason_code]
        if isinstance(reason_code, int) and 0 <= reason_code < len(reasons)
        else str(reason_code)
    )
    return {
        "name": name,
        "uuid": uuid,
        "host": host,
        "state": state,
        "stateReason": reason,
        "persistent": persistent,
        "vcpus": vcpus,
        "memoryMax": memory_max,
        "memoryCurrent": memory_current,
        "cpuUsed": cpu_used,
        "memoryUsed": memory_used,
        "labels": labels,
        "reconciler": reconciler,
        "migratable": not blockers,
        "unmigratable": blockers,
        "migrationClass": klass,
        "migrationReasons": why,
        "dirtyRate": dirty,
        "disks": disks,
        "diskBytes": disk_bytes(disks),
        **_hugepage_fields(needs),
    }


def _hugepage_fields(needs: Needs | None) -> dict[str, object]:
    """``hugepageKib`` and ``hugepages`` of a VM backed by huge pages (its XML's memory in
    pages, rounded up); the defaults for the others."""
    if needs is None or not needs.hugepage_kib:
        return {}
    return {
        "hugepageKib": needs.hugepage_kib,
        "hugepages": pages_for(needs.memory, needs.hugepage_kib),
    }
