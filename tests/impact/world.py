"""The example cluster (cluster-state/) as snapshots with chosen loads, and a state repository
holding it, for ``impact``, the backtest and the recorded observations."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from reconciler.model.base import HostName, VmName, VmUuid
from reconciler.model.snapshot import HostState, ReconcilerState, Snapshot, VmRunState, VmState

GIB = 1024**3
T0 = datetime(2025, 3, 1, 0, 0, tzinfo=UTC)
HOSTS = ("kvm-01", "kvm-02", "kvm-03")
VMS: dict[str, tuple[str, dict[str, str], int]] = {
    # name: (host, labels, memory GiB)
    "web-1": ("kvm-01", {"app": "web"}, 4),
    "web-2": ("kvm-02", {"app": "web"}, 4),
    "web-3": ("kvm-03", {"app": "web"}, 4),
    "db-1": ("kvm-02", {"role": "db"}, 8),
    "db-2": ("kvm-03", {"role": "db"}, 8),
    "erp": ("kvm-03", {}, 4),
    "app-1": ("kvm-01", {}, 8),
    "cache-1": ("kvm-01", {}, 8),
    "batch-1": ("kvm-01", {}, 8),
    "batch-2": ("kvm-01", {}, 8),
}
"""Where the VMs run (as placement.yaml says for those it lists)."""


def snapshot(
    taken_at: datetime = T0,
    *,
    cpu: Mapping[str, float] | None = None,
    hosts: Mapping[str, str] | None = None,
    records: Mapping[str, ReconcilerState] | None = None,
) -> Snapshot:
    """The example cluster at ``taken_at``: every VM uses 0.5 cores unless ``cpu`` says
    otherwise and half its memory; ``hosts`` moves VMs elsewhere."""
    cpu, hosts, records = cpu or {}, hosts or {}, records or {}
    host_states = [
        HostState(
            name=HostName(h),
            uri=f"qemu+ssh://root@{h}.example.net/system",
            reachable=True,
            arch="x86_64",
            cpus=16,
            memory_total=64 * GIB,
            memory_free=32 * GIB,
        )
        for h in HOSTS
    ]
    vms = [
        VmState(
            name=VmName(name),
            uuid=VmUuid(f"00000000-0000-4000-8000-{i:012d}"),
            host=HostName(hosts.get(name, host)),
            state=VmRunState.RUNNING,
            vcpus=4,
            memory_max=mem * GIB,
            memory_current=mem * GIB,
            cpu_used=cpu.get(name, 0.5),
            memory_used=mem * GIB // 2,
            uptime=86400.0,
            labels=labels,
            reconciler=records.get(name, ReconcilerState()),
        )
        for i, (name, (host, labels, mem)) in enumerate(sorted(VMS.items()))
    ]
    return Snapshot(cluster="lab", taken_at=taken_at, hosts=host_states, vms=vms)


def write(snap: Snapshot, path: Path) -> Path:
    path.write_text(snap.model_dump_json(by_alias=True, indent=2))
    return path
