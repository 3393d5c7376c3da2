"""Observe a cluster through libvirt: every host and VM into one ``Snapshot``.

Hosts are observed concurrently, one worker thread each (libvirt calls block). Each host has a
connect timeout and a call timeout; the observer stops waiting for a host at its deadline and
reports it unreachable with a ``HostTimeout`` message, so one hung host cannot hang the whole
observation (its worker is left to finish or fail on its own, and closes its connection then).

Per host the calls are few and bulk: capabilities, node info, hostname, versions, free memory,
two samples of ``getCPUStats`` and of ``getAllDomainStats`` (one call for every VM's state,
CPU time, balloon and vCPUs), one ``listAllDomains`` for transient domains, and one
``XMLDesc`` per VM (labels, the reconciler's record, sizes and migratability). The count is
kept in ``HostState.libvirt_calls``.

libvirt errors are mapped to ``HostUnreachable``/``HostTimeout`` here; in the snapshot a host
that failed is ``reachable: false`` with the error text, never an empty host.
"""

from __future__ import annotations

import contextlib
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import libvirt

from reconciler.adapters.domain_metadata import parse_metadata_element
from reconciler.adapters.domain_xml import domain_facts, migration_blockers
from reconciler.errors import ConfigError, HostTimeout, HostUnreachable, ReconcilerError
from reconciler.model.cluster import Cluster, Host
from reconciler.model.snapshot import (
    HostState,
    InFlight,
    ReconcilerState,
    Snapshot,
    Unmigratable,
    UnmigratableReason,
    VmRunState,
    VmState,
)

T = TypeVar("T")

MAX_WORKERS: Final = 256
"""Hosts observed at the same time, at most."""

_STATES: Final = (
    VmRunState.NOSTATE,
    VmRunState.RUNNING,
    VmRunState.BLOCKED,
    VmRunState.PAUSED,
    VmRunState.SHUTDOWN,
    VmRunState.SHUTOFF,
    VmRunState.CRASHED,
    VmRunState.PMSUSPENDED,
)
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
_MIGRATABLE_STATES: Final = {VmRunState.RUNNING, VmRunState.PAUSED, VmRunState.BLOCKED}

_STATS: Final = (
    libvirt.VIR_DOMAIN_STATS_STATE
    | libvirt.VIR_DOMAIN_STATS_CPU_TOTAL
    | libvirt.VIR_DOMAIN_STATS_BALLOON
    | libvirt.VIR_DOMAIN_STATS_VCPU
)


# --- one host ----------------------------------------------------------------------------------


@dataclass
class _RawVm:
    """A VM as one host reported it, before cluster-wide facts (CPU models, in flight)."""

    state: VmState
    domain: ET.Element | None


@dataclass
class _Probe:
    """The observation of one host, shared between its worker and the waiting observer."""

    host: Host
    started: float | None = None
    connected: float | None = None
    call: str = "open"
    calls: int = 0
    result: tuple[HostState, list[_RawVm]] | None = None
    done: bool = False


class _Session:
    """A connection to one host whose calls are counted and whose errors are mapped."""

    def __init__(self, probe: _Probe) -> None:
        self.probe = probe
        self.conn: Any = None

    def open(self) -> None:
        self.probe.call = "open"
        self.probe.calls += 1
        try:
            self.conn = libvirt.open(self.probe.host.uri)
        except libvirt.libvirtError as err:
            raise HostUnreachable(
                f"cannot connect to {self.probe.host.uri}: {err}",
                hint="check the host is up and its URI in cluster.yaml",
            ) from err

    def call(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        self.probe.call = name
        self.probe.calls += 1
        try:
            return fn(*args)
        except libvirt.libvirtError as err:
            if err.get_error_code() in (
                libvirt.VIR_ERR_OPERATION_TIMEOUT,
                libvirt.VIR_ERR_AGENT_UNRESPONSIVE,
            ):
                raise HostTimeout(f"{name} timed out on {self.probe.host.uri}: {err}") from err
            raise HostUnreachable(f"{name} failed on {self.probe.host.uri}: {err}") from err

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(libvirt.libvirtError):
                self.conn.close()
            self.conn = None


def _version(number: int) -> str:
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


def _host_cpu_busy(first: dict[str, int], second: dict[str, int]) -> float | None:
    """Host CPU busy in percent between two ``getCPUStats`` samples; None if they don't move."""
    keys = ("kernel", "user", "idle", "iowait")
    if not all(k in first and k in second for k in keys[:3]):
        return None
    deltas = {k: second.get(k, 0) - first.get(k, 0) for k in keys}
    total = sum(deltas.values())
    if total <= 0 or any(d < 0 for d in deltas.values()):
        return None
    busy = total - deltas["idle"] - deltas["iowait"]
    return round(min(100.0, max(0.0, 100.0 * busy / total)), 2)


def _kib(stats: dict[str, Any], key: str) -> int | None:
    value = stats.get(key)
    return int(value) * 1024 if isinstance(value, int) and value >= 0 else None


def _vm_from_stats(
    host: Host,
    dom: Any,
    stats: dict[str, Any],
    cpu_time_after: int | None,
    elapsed_ns: int,
    xml: str | None,
    persistent: bool,
) -> _RawVm:
    domain: ET.Element | None = None
    if xml is not None:
        with contextlib.suppress(ET.ParseError):
            domain = ET.fromstring(xml)
    facts = domain_facts(domain) if domain is not None else None
    code = stats.get("state.state", 0)
    state = _STATES[code] if isinstance(code, int) and 0 <= code < len(_STATES) else _STATES[0]
    reasons = _REASONS[state]
    reason_code = stats.get("state.reason", 0)
    reason = (
        reasons[reason_code]
        if isinstance(reason_code, int) and 0 <= reason_code < len(reasons)
        else str(reason_code)
    )
    cpu_used: float | None = None
    cpu_before = stats.get("cpu.time")
    if (
        isinstance(cpu_before, int)
        and cpu_time_after is not None
        and cpu_time_after >= cpu_before
        and elapsed_ns > 0
    ):
        cpu_used = round((cpu_time_after - cpu_before) / elapsed_ns, 4)
    memory_used = _kib(stats, "balloon.rss")
    available, unused = _kib(stats, "balloon.available"), _kib(stats, "balloon.unused")
    if memory_used is None and available is not None and unused is not None:
        memory_used = max(0, available - unused)
    vcpus = stats.get("vcpu.current")
    memory_max = _kib(stats, "balloon.maximum")
    memory_current = _kib(stats, "balloon.current")
    meta = parse_metadata_element(domain) if domain is not None else None
    vm = VmState(
        name=dom.name(),
        uuid=dom.UUIDString(),
        host=host.name,
        state=state,
        state_reason=reason,
        persistent=persistent,
        vcpus=vcpus if isinstance(vcpus, int) else (facts.vcpus if facts else 0),
        memory_max=memory_max if memory_max is not None else (facts.memory_max if facts else 0),
        memory_current=(
            memory_current if memory_current is not None else (facts.memory_current if facts else 0)
        ),
        cpu_used=cpu_used,
        memory_used=memory_used,
        labels=meta.labels if meta else {},
        reconciler=meta.state if meta else ReconcilerState(),
    )
    return _RawVm(state=vm, domain=domain)


def _observe_host(probe: _Probe, sample_interval: float) -> tuple[HostState, list[_RawVm]]:
    host = probe.host
    began = time.monotonic()
    session = _Session(probe)
    try:
        session.open()
        probe.connected = time.monotonic()
        conn = session.conn
        caps = ET.fromstring(session.call("getCapabilities", conn.getCapabilities))
        info = session.call("getInfo", conn.getInfo)
        hostname = session.call("getHostname", conn.getHostname)
        lib_version = session.call("getLibVersion", conn.getLibVersion)
        hv_type = session.call("getType", conn.getType)
        hv_version = session.call("getVersion", conn.getVersion)
        free = session.call("getFreeMemory", conn.getFreeMemory)
        cpu_first = session.call(
            "getCPUStats", conn.getCPUStats, libvirt.VIR_NODE_CPU_STATS_ALL_CPUS, 0
        )
        first_at = time.monotonic_ns()
        records = session.call("getAllDomainStats", conn.getAllDomainStats, _STATS, 0)
        transient = {
            d.UUIDString()
            for d in session.call(
                "listAllDomains", conn.listAllDomains, libvirt.VIR_CONNECT_LIST_DOMAINS_TRANSIENT
            )
        }
        xmls: dict[str, str | None] = {}
        for dom, _stats in records:
            try:
                xmls[dom.UUIDString()] = session.call("XMLDesc", dom.XMLDesc, 0)
            except HostUnreachable as err:
                cause = err.__cause__
                if (
                    isinstance(cause, libvirt.libvirtError)
                    and cause.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN
                ):
                    xmls[dom.UUIDString()] = None  # gone meanwhile (e.g. migrated away)
                    continue
                raise
        pause = sample_interval - (time.monotonic_ns() - first_at) / 1e9
        if pause > 0:
            probe.call = "sampling pause"
            time.sleep(pause)
        cpu_second = session.call(
            "getCPUStats", conn.getCPUStats, libvirt.VIR_NODE_CPU_STATS_ALL_CPUS, 0
        )
        second = session.call(
            "getAllDomainStats", conn.getAllDomainStats, libvirt.VIR_DOMAIN_STATS_CPU_TOTAL, 0
        )
        elapsed_ns = time.monotonic_ns() - first_at
    finally:
        session.close()
    cpu_after = {
        dom.UUIDString(): stats.get("cpu.time")
        for dom, stats in second
        if isinstance(stats.get("cpu.time"), int)
    }
    vms = [
        _vm_from_stats(
            host,
            dom,
            stats,
            cpu_after.get(dom.UUIDString()),
            elapsed_ns,
            xmls.get(dom.UUIDString()),
            dom.UUIDString() not in transient,
        )
        for dom, stats in records
    ]
    state = HostState(
        name=host.name,
        uri=host.uri,
        reachable=True,
        uuid=caps.findtext("host/uuid"),
        hostname=hostname,
        arch=caps.findtext("host/cpu/arch"),
        cpu_model=caps.findtext("host/cpu/model"),
        cpus=int(info[2]),
        memory_total=int(info[1]) * 1024**2,
        memory_free=int(free),
        cpu_utilisation=_host_cpu_busy(cpu_first, cpu_second),
        libvirt_version=_version(int(lib_version)),
        hypervisor=str(hv_type),
        hypervisor_version=_version(int(hv_version)),
        libvirt_calls=probe.calls,
        observe_seconds=round(time.monotonic() - began, 4),
    )
    return state, vms


def _unreachable(probe: _Probe, error: ReconcilerError, seconds: float) -> HostState:
    return HostState(
        name=probe.host.name,
        uri=probe.host.uri,
        reachable=False,
        error=str(error),
        libvirt_calls=probe.calls,
        observe_seconds=round(max(0.0, seconds), 4),
    )


def _worker(queue: list[_Probe], cond: threading.Condition, sample_interval: float) -> None:
    while True:
        with cond:
            if not queue:
                return
            probe = queue.pop(0)
            probe.started = time.monotonic()
        try:
            result = _observe_host(probe, sample_interval)
        except ReconcilerError as err:
            result = (_unreachable(probe, err, time.monotonic() - (probe.started or 0)), [])
        except Exception as err:  # one odd host must not end it all
            wrapped = HostUnreachable(f"observing {probe.host.uri} failed: {err!r}")
            result = (_unreachable(probe, wrapped, time.monotonic() - (probe.started or 0)), [])
        with cond:
            probe.result = result
            probe.done = True
            cond.notify_all()


# --- the cluster -------------------------------------------------------------------------------


def _deadline(
    probe: _Probe, connect_timeout: float, call_timeout: float, sample_interval: float
) -> float | None:
    if probe.started is None:
        return None
    if probe.connected is None:
        return probe.started + connect_timeout
    return probe.connected + call_timeout + sample_interval


def _timeout_error(probe: _Probe, connect_timeout: float, call_timeout: float) -> HostTimeout:
    if probe.connected is None:
        return HostTimeout(
            f"no answer from {probe.host.uri} within the connect timeout of {connect_timeout:g}s",
            hint="check the host and its libvirtd; a hung daemon accepts but never answers",
        )
    return HostTimeout(
        f"{probe.host.uri} did not answer {probe.call} within the call timeout of "
        f"{call_timeout:g}s",
        hint="check the host's libvirtd",
    )


@dataclass(frozen=True)
class ObserveSettings:
    """The observer's settings after the Cluster's ``spec.observe`` and explicit overrides."""

    connect_timeout: float
    call_timeout: float
    sample_interval: float
    shared_paths: tuple[str, ...]
    concurrency: int | None


def observe_settings(
    cluster: Cluster,
    *,
    connect_timeout: float | None = None,
    call_timeout: float | None = None,
    sample_interval: float | None = None,
    shared_paths: Sequence[str] = (),
    concurrency: int | None = None,
) -> ObserveSettings:
    """``cluster.spec.observe`` with every argument that is not None in its place.

    ``shared_paths`` adds to ``spec.sharedStorage`` (a prefix given on the command line is
    shared storage too, it does not make the Cluster's ones local).
    """
    spec = cluster.spec.observe
    out = ObserveSettings(
        connect_timeout=(
            spec.connect_timeout.total_seconds() if connect_timeout is None else connect_timeout
        ),
        call_timeout=spec.call_timeout.total_seconds() if call_timeout is None else call_timeout,
        sample_interval=(
            spec.sample_interval.total_seconds() if sample_interval is None else sample_interval
        ),
        shared_paths=tuple(dict.fromkeys([*cluster.spec.shared_storage, *shared_paths])),
        concurrency=spec.concurrency if concurrency is None else concurrency,
    )
    for name, value in (
        ("connect timeout", out.connect_timeout),
        ("call timeout", out.call_timeout),
    ):
        if not value > 0:
            raise ConfigError(f"the {name} must be more than 0 seconds, not {value:g}")
    if not out.sample_interval >= 0:
        raise ConfigError(f"the sample interval cannot be negative ({out.sample_interval:g})")
    if out.concurrency is not None and out.concurrency < 1:
        raise ConfigError(f"the concurrency must be at least 1, not {out.concurrency}")
    return out


def observe_cluster(
    cluster: Cluster,
    *,
    connect_timeout: float | None = None,
    call_timeout: float | None = None,
    sample_interval: float | None = None,
    shared_paths: Sequence[str] = (),
    concurrency: int | None = None,
    now: datetime | None = None,
) -> Snapshot:
    """A snapshot of every host and VM of ``cluster``, observed concurrently.

    Settings come from ``cluster.spec.observe`` and ``cluster.spec.sharedStorage``; an
    argument that is not None overrides its setting (``shared_paths`` adds prefixes).
    ``connect_timeout`` bounds opening each connection; ``call_timeout`` bounds all calls on
    one host after that (the ``sample_interval`` pause between the two CPU samples comes on
    top). A host past its deadline is reported unreachable with a timeout error.
    ``now`` is the snapshot's ``takenAt`` (default: the current time).
    """
    settings = observe_settings(
        cluster,
        connect_timeout=connect_timeout,
        call_timeout=call_timeout,
        sample_interval=sample_interval,
        shared_paths=shared_paths,
        concurrency=concurrency,
    )
    connect_timeout = settings.connect_timeout
    call_timeout = settings.call_timeout
    sample_interval = settings.sample_interval
    shared_paths = settings.shared_paths
    max_workers = settings.concurrency or MAX_WORKERS
    libvirt.registerErrorHandler(lambda *_: None, None)  # errors are reported, not printed
    taken_at = now or datetime.now(UTC)
    probes = [_Probe(host) for host in cluster.spec.hosts]
    queue = list(probes)
    cond = threading.Condition()
    for _ in range(max(1, min(max_workers, len(probes)))):
        # daemon threads: a host that never answers must not keep the process alive
        threading.Thread(target=_worker, args=(queue, cond, sample_interval), daemon=True).start()
    results: dict[str, tuple[HostState, list[_RawVm]]] = {}
    with cond:
        while len(results) < len(probes):
            now_mono = time.monotonic()
            wake: float | None = None
            for probe in probes:
                name = probe.host.name
                if name in results:
                    continue
                if probe.done and probe.result is not None:
                    results[name] = probe.result
                    continue
                deadline = _deadline(probe, connect_timeout, call_timeout, sample_interval)
                if deadline is None:
                    continue
                if now_mono >= deadline:
                    err = _timeout_error(probe, connect_timeout, call_timeout)
                    results[name] = (_unreachable(probe, err, now_mono - (probe.started or 0)), [])
                else:
                    wake = deadline if wake is None else min(wake, deadline)
            if len(results) < len(probes):
                # woken by a finishing worker, at the next deadline, or to see new starts
                timeout = 0.05 if wake is None else max(0.0, min(wake - now_mono, 0.05))
                cond.wait(timeout)
    return _snapshot(cluster, probes, results, taken_at, shared_paths)


def _snapshot(
    cluster: Cluster,
    probes: list[_Probe],
    results: dict[str, tuple[HostState, list[_RawVm]]],
    taken_at: datetime,
    shared_paths: Sequence[str],
) -> Snapshot:
    hosts = [results[p.host.name][0] for p in probes]
    raw = [vm for p in probes for vm in sorted(results[p.host.name][1], key=lambda v: v.state.name)]
    models = {h.cpu_model for h in hosts if h.reachable and h.cpu_model}
    cpu_models_differ = len(models) > 1
    seen: dict[str, list[VmState]] = {}
    for vm in raw:
        seen.setdefault(vm.state.uuid, []).append(vm.state)
    in_flight = [
        InFlight(name=group[0].name, uuid=uuid, hosts=sorted(v.host for v in group))
        for uuid, group in seen.items()
        if len(group) > 1
    ]
    flying = {f.uuid for f in in_flight}
    vms: list[VmState] = []
    for vm in raw:
        blockers: list[Unmigratable] = []
        if vm.state.state not in _MIGRATABLE_STATES:
            blockers.append(
                Unmigratable(
                    code=UnmigratableReason.NOT_RUNNING, detail=f"the VM is {vm.state.state}"
                )
            )
        if vm.state.uuid in flying:
            blockers.append(
                Unmigratable(
                    code=UnmigratableReason.IN_FLIGHT,
                    detail="seen on more than one host (migrating)",
                )
            )
        if vm.domain is None:
            blockers.append(
                Unmigratable(code=UnmigratableReason.OTHER, detail="domain XML not available")
            )
        else:
            blockers += migration_blockers(
                vm.domain, shared_paths=shared_paths, cpu_models_differ=cpu_models_differ
            )
        vms.append(
            vm.state.model_copy(update={"migratable": not blockers, "unmigratable": blockers})
        )
    return Snapshot(
        cluster=cluster.metadata.name,
        taken_at=taken_at,
        hosts=hosts,
        vms=vms,
        in_flight=in_flight,
    )
