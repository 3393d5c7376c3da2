"""A snapshot as plain text for people: the hosts, then the VMs. Pure: returns a string."""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.core import duplicates
from reconciler.model.load import LoadBasis, LoadView
from reconciler.model.quantity import format_duration
from reconciler.model.snapshot import HostState, Snapshot, UnmigratableReason, VmRunState, VmState

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


def _window_name(view: LoadView) -> str:
    return f"{format_duration(view.window)} {view.statistic.value}".upper()


def _cores(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def _load_lines(snapshot: Snapshot) -> list[str]:
    """What the CPU figures were read on: the window (and what of it is unknown), or a note."""
    view = snapshot.load
    if view is None:
        return []
    if view.basis is LoadBasis.SAMPLE:
        return [f"load: {view.note}"] if view.note else []
    window = f"{format_duration(view.window)} {view.statistic.value}"
    line = f"load over the window ({window}, from {view.source.value})"
    if view.problem:
        return [f"{line}: unknown: {view.problem}"]
    unknown = sorted(
        vm.name
        for vm in snapshot.vms
        if vm.state not in (VmRunState.SHUTOFF, VmRunState.CRASHED)
        and (vm.name not in view.vms or view.vms[vm.name].window is None)
    )
    if unknown:
        shown = ", ".join(unknown[:10]) + (", ..." if len(unknown) > 10 else "")
        return [f"{line}: unknown for {len(unknown)} VM(s), not balanced on: {shown}"]
    return [f"{line}: known for every running VM"]


def _host_loads(snapshot: Snapshot, view: LoadView) -> dict[str, tuple[float, float | None]]:
    """Host -> the cores its running guests use now and over the window (None: unknown)."""
    now: dict[str, float] = {}
    window: dict[str, float | None] = {}
    for vm in snapshot.vms:
        if vm.state in (VmRunState.SHUTOFF, VmRunState.CRASHED):
            continue
        load = view.vms.get(vm.name)
        now[vm.host] = now.get(vm.host, 0.0) + (load.now or 0.0 if load is not None else 0.0)
        over = None if load is None else load.window
        before = window.get(vm.host, 0.0)
        window[vm.host] = None if before is None or over is None else before + over
    for host in view.unknown_hosts:
        window[host] = None
    return {h: (now.get(h, 0.0), window.get(h, 0.0)) for h in {*now, *window}}


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
    view = snapshot.load if snapshot.load and snapshot.load.basis is LoadBasis.WINDOW else None
    host_header = ["HOST", "STATE", "ARCH", "CPU", "MEMORY", "VMS", "ERROR"]
    host_rows = [_host_row(h, counts.get(h.name, 0)) for h in snapshot.hosts]
    vm_header = [
        *("VM", "HOST", "STATE", "VCPUS", "MEMORY", "CPU", "DIRTY", "CLASS", "DISKS", "LABELS")
    ]
    vm_rows = [_vm_row(vm) for vm in snapshot.vms]
    if view is not None:
        # the guests' cores now (the observation's sample) and over the window, side by side
        window = _window_name(view)
        loads = _host_loads(snapshot, view)
        host_header[5:5] = ["GUESTS NOW", f"GUESTS {window}"]
        for host, row in zip(snapshot.hosts, host_rows, strict=True):
            now, over = loads.get(host.name, (0.0, 0.0))
            row[5:5] = ["-", "-"] if not host.reachable else [f"{now:.2f}", _cores(over)]
        vm_header[5:6] = ["CPU NOW", f"CPU {window}"]
        for vm, row in zip(snapshot.vms, vm_rows, strict=True):
            load = view.vms.get(vm.name)
            row[5:6] = [
                "-" if load is None or load.now is None else f"{load.now:.2f}",
                _cores(None if load is None else load.window),
            ]
    lines += _table(host_header, host_rows)
    lines += _load_lines(snapshot)
    lines.append("")
    if snapshot.vms:
        lines += _table(vm_header, vm_rows)
        why = _why_lines(snapshot.vms)
        if why:
            lines += ["", "migration (* not plainly live-migratable; DISKS: local bytes to copy):"]
            lines += why
    else:
        lines.append("no VMs")
    found = duplicates.found(snapshot)
    twice = {d.uuid for d in found}
    flights = [f for f in snapshot.in_flight if f.uuid not in twice]
    if flights:
        lines.append("")
        lines.append("in flight (seen on more than one host):")
        for item in flights:
            lines.append(f"  {item.name} ({item.uuid}) on {', '.join(item.hosts)}")
    if found:
        lines.append("")
        lines.append("DUPLICATES (no move of them until one copy is kept, see docs/recovery.md):")
        lines += [f"  {d.describe()}" for d in found]
    return "\n".join(lines) + "\n"
