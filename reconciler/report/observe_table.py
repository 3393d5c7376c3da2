"""A snapshot as plain text for people: the hosts, then the VMs. Pure: returns a string."""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.model.snapshot import HostState, Snapshot, UnmigratableReason, VmState

_MIB = 1024**2


def _mib(value: int | None) -> str:
    if value is None:
        return "-"
    if value >= 10 * 1024**3:
        return f"{value / 1024**3:.0f}G"
    if value >= 1024**3:
        return f"{value / 1024**3:.1f}G"
    return f"{value / _MIB:.0f}M"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = []
    for row in (header, *rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return lines


def _host_row(host: HostState, vm_count: int) -> list[str]:
    if not host.reachable:
        return [host.name, "unreachable", "-", "-", "-", "-", host.error or ""]
    used = (
        host.memory_total - host.memory_free
        if host.memory_total is not None and host.memory_free is not None
        else None
    )
    cpu = "-" if host.cpu_utilisation is None else f"{host.cpu_utilisation:.0f}%"
    cpus = "-" if host.cpus is None else str(host.cpus)
    return [
        host.name,
        "up",
        host.arch or "-",
        f"{cpu} of {cpus}",
        f"{_mib(used)}/{_mib(host.memory_total)}",
        str(vm_count),
        "",
    ]


def _vm_row(vm: VmState) -> list[str]:
    cpu = "-" if vm.cpu_used is None else f"{vm.cpu_used:.2f}"
    mem = f"{_mib(vm.memory_used)}/{_mib(vm.memory_max)}"
    labels = ",".join(f"{k}={v}" for k, v in sorted(vm.labels.items())) or "-"
    state = vm.state.value + ("" if vm.persistent else " (transient)")
    klass = vm.migration_class.value + ("" if vm.migratable else "*")
    disks = _mib(vm.disk_bytes) if vm.disk_bytes else "-"
    dirty = "-" if vm.dirty_rate is None else f"{_mib(vm.dirty_rate)}/s"
    return [vm.name, vm.host, state, str(vm.vcpus), mem, cpu, dirty, klass, disks, labels]


def _why_lines(vms: Sequence[VmState]) -> list[str]:
    """Why each VM that is not plainly live-migratable has its class, and what blocks it."""
    lines: list[str] = []
    for vm in vms:
        if vm.migratable:
            continue
        reasons = list(vm.migration_reasons)
        reasons += [
            f"{u.code}: {u.detail}"
            for u in vm.unmigratable
            if u.code in (UnmigratableReason.IN_FLIGHT, UnmigratableReason.HOST_PASSTHROUGH_CPU)
        ]
        lines.append(f"  {vm.name} on {vm.host}: {vm.migration_class.value}: {'; '.join(reasons)}")
    return lines


def observe_table(snapshot: Snapshot) -> str:
    """Hosts (state, arch, CPU busy, memory used/total, VMs) then VMs (with the memory each
    writes per second, DIRTY, where measured), ending with a newline."""
    counts: dict[str, int] = {}
    for vm in snapshot.vms:
        counts[vm.host] = counts.get(vm.host, 0) + 1
    reachable = sum(1 for h in snapshot.hosts if h.reachable)
    lines = [
        f"cluster {snapshot.cluster} at {snapshot.taken_at.isoformat(timespec='seconds')}: "
        f"{reachable}/{len(snapshot.hosts)} hosts reachable, {len(snapshot.vms)} VMs",
        "",
    ]
    lines += _table(
        ["HOST", "STATE", "ARCH", "CPU", "MEMORY", "VMS", "ERROR"],
        [_host_row(h, counts.get(h.name, 0)) for h in snapshot.hosts],
    )
    lines.append("")
    if snapshot.vms:
        lines += _table(
            ["VM", "HOST", "STATE", "VCPUS", "MEMORY", "CPU", "DIRTY", "CLASS", "DISKS", "LABELS"],
            [_vm_row(vm) for vm in snapshot.vms],
        )
        why = _why_lines(snapshot.vms)
        if why:
            lines += ["", "migration (* not plainly live-migratable; DISKS: local bytes to copy):"]
            lines += why
    else:
        lines.append("no VMs")
    if snapshot.in_flight:
        lines.append("")
        lines.append("in flight (seen on more than one host):")
        for item in snapshot.in_flight:
            lines.append(f"  {item.name} ({item.uuid}) on {', '.join(item.hosts)}")
    return "\n".join(lines) + "\n"
