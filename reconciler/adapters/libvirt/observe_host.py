"""One host's observation in two steps over one open connection.

``first_sweep`` opens the connection and takes everything (host facts, the first CPU sample,
every VM's stats and XML); ``second_sweep`` takes the second CPU sample, asks the host the
compatibility questions known by then (``compatibility.answer_questions``, over the same
connection), closes the connection and gives the host as plain values (``RawHost``), which
cross between processes far more cheaply than models; ``libvirt_observe_result`` builds the
models from them. The pool (``libvirt_observe_pool``) runs the second step of a host once its
sample interval has passed, so no thread sleeps for a host.

Every libvirt call goes through ``Probe.call``, which records when it started: the pool's
watchdog cuts a host off when one call has waited longer than its timeout. Parsing happens
after the call returns, outside the timed window, so the deadline measures the host's answer
and not this machine's load.
"""

from __future__ import annotations

import contextlib
import logging
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import libvirt

from reconciler.adapters.libvirt import dirty_rate
from reconciler.adapters.libvirt.compatibility import (
    HostAnswers,
    Needs,
    Questions,
    answer_questions,
)
from reconciler.adapters.libvirt.domain_disks import (
    DiskRef,
    PoolInfo,
    PoolVolume,
    classify,
    local_disk_blockers,
    needs_pools,
    resolve_disks,
)
from reconciler.adapters.libvirt.domain_xml import read_domains
from reconciler.errors import HostTimeout, HostUnreachable
from reconciler.model.snapshot import (
    MigrationClass,
    ReconcilerState,
    Unmigratable,
    UnmigratableReason,
    VmDisk,
    VmRunState,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

_STATS: Final = (
    libvirt.VIR_DOMAIN_STATS_STATE
    | libvirt.VIR_DOMAIN_STATS_CPU_TOTAL
    | libvirt.VIR_DOMAIN_STATS_BALLOON
    | libvirt.VIR_DOMAIN_STATS_VCPU
    | dirty_rate.STATS
)
_STATS_WITHOUT_CPU: Final = (
    libvirt.VIR_DOMAIN_STATS_STATE | libvirt.VIR_DOMAIN_STATS_BALLOON | dirty_rate.STATS
)
"""A look without CPU samples: a VM's vCPU count then comes from its live XML."""
KEEPALIVE_COUNT: Final = 3
"""Unanswered keepalive messages after which libvirt drops a remote connection."""
STATES: Final[tuple[VmRunState, ...]] = tuple(VmRunState)
"""By libvirt's numeric code (``VmRunState.from_code`` without listing the enum per VM)."""
MIGRATABLE_STATES: Final = frozenset({VmRunState.RUNNING, VmRunState.PAUSED, VmRunState.BLOCKED})


STATIC_FACTS: Final = (
    "uuid",
    "hostname",
    "arch",
    "cpu_model",
    "cpus",
    "memory_total",
    "libvirt_version",
    "hypervisor",
    "hypervisor_version",
)
"""The host facts (``HostState``'s fields) that stay as they are while the host runs."""


@dataclass(frozen=True)
class KnownHost:
    """What an observation found of a host that does not change while it runs, and the huge
    page sizes it offers: a later look at it (admission's, seconds later) takes these from
    here instead of asking again, its capabilities XML above all (the largest answer)."""

    facts: tuple[tuple[str, Any], ...]
    """``STATIC_FACTS`` with their values."""
    hugepage_sizes: tuple[int, ...] = ()
    """KiB, of the sizes it reported free huge pages for."""


class Abandoned(Exception):
    """The pool gave up on this host (a call passed its timeout); its thread stops here."""


@dataclass(frozen=True)
class ProbeSettings:
    """What one host's observation needs to know; plain values so it crosses processes."""

    connect_timeout: float
    call_timeout: float
    sample_interval: float
    shared_paths: tuple[str, ...]
    compatibility: bool = False
    """Ask each host which of the VMs observed it would refuse (``compatibility``)."""
    cpu_samples: bool = True
    """Take the two CPU samples; without them the look is one sweep that asks libvirt for
    no CPU figure (the costliest stats: libvirt reads them per VM and vCPU), and every CPU
    figure of the host and its VMs stays unknown. For looks no decision reads CPU from."""


@dataclass
class _Vm:
    """A VM after the first sweep: what its XML and first stats said, before CPU rates."""

    name: str
    uuid: str
    raw_uuid: bytes
    """As ``virDomainGetUUID`` gives it: the second sweep's key (no text formatting)."""
    stats: dict[str, Any]
    persistent: bool
    facts_vcpus: int
    facts_memory_max: int
    facts_memory_current: int
    labels: dict[str, str]
    reconciler: ReconcilerState
    blockers: list[Unmigratable]
    passthrough: str | None
    disk_refs: tuple[DiskRef, ...] = ()
    disks: list[VmDisk] = field(default_factory=list)
    needs: Needs | None = None


@dataclass
class Probe:
    """The observation of one host: its connection, the call in flight and what it found."""

    name: str
    uri: str
    settings: ProbeSettings
    conn: Any = None
    calls: int = 0
    waited: float = 0.0
    """Seconds spent waiting for this host's answers (the host's own time, as measured here)."""
    call_name: str = "open"
    call_started: float | None = None
    """When the call in flight started (monotonic); None between calls."""
    call_limit: float = 0.0
    abandoned: bool = False
    first_at: float = 0.0
    """Midpoint of the first ``getAllDomainStats`` (monotonic), the start of the CPU interval."""
    one_sample: bool = False
    """No second CPU sample: none is wanted (``cpu_samples``) or it would only repeat the
    first (``repeats_first_sample``)."""
    dirty_started: bool = False
    """Dirty rate calculations were started: the second sweep reads them (``dirty_rate``)."""
    borrow: Callable[[], Any] | None = None
    """Gives the host's connection from the command's pool instead of opening one; a borrowed
    connection is left open when the observation ends."""
    questions: Questions | None = None
    """The compatibility questions of this observation; None: none asked."""
    known: KnownHost | None = None
    """The host's lasting facts from an earlier look: not asked again."""
    optional: bool = False
    """The call in flight is a compatibility question: past its timeout the host is reported
    as observed (``result``) and refusing nothing, not as unreachable."""
    result: RawHost | None = None
    """The host as observed, once only compatibility questions are left to ask."""
    host: dict[str, Any] = field(default_factory=dict)
    cpu_first: dict[str, int] = field(default_factory=dict)
    vms: list[_Vm] = field(default_factory=list)

    def call(self, name: str, fn: Callable[..., T], *args: Any, limit: float | None = None) -> T:
        """``fn(*args)`` timed as one call to this host; libvirt errors become ours."""
        if self.abandoned:
            raise Abandoned
        self.call_name = name
        self.call_limit = self.settings.call_timeout if limit is None else limit
        self.calls += 1
        started = time.monotonic()
        self.call_started = started
        try:
            return fn(*args)
        except libvirt.libvirtError as err:
            if self.abandoned:
                raise Abandoned from err
            raise _mapped(self.uri, name, err) from err
        finally:
            self.call_started = None
            self.waited += time.monotonic() - started
            if self.abandoned:
                self.close()
                raise Abandoned  # the pool already reported this host

    def ask(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` timed as one call to this host, a compatibility question: libvirt's
        errors pass through, and it counts in neither the calls nor the time waited."""
        if self.abandoned:
            raise Abandoned
        self.call_name = name
        self.call_limit = self.settings.call_timeout
        self.optional = True
        self.call_started = time.monotonic()
        try:
            return fn(*args)
        finally:
            self.call_started = None
            self.optional = False
            if self.abandoned:
                self.close()
                raise Abandoned  # the pool already reported this host

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None and self.borrow is None:
            with contextlib.suppress(libvirt.libvirtError):
                conn.close()

    def timeout_error(self) -> HostTimeout:
        """Why the pool cut this host off."""
        if self.call_name == "open":
            return HostTimeout(
                f"no answer from {self.uri} within the connect timeout of "
                f"{self.settings.connect_timeout:g}s",
                hint="check the host and its libvirtd; a hung daemon accepts but never answers",
            )
        return HostTimeout(
            f"{self.uri} did not answer {self.call_name} within the call timeout of "
            f"{self.settings.call_timeout:g}s",
            hint="check the host's libvirtd",
        )


def _mapped(uri: str, name: str, err: libvirt.libvirtError) -> HostUnreachable | HostTimeout:
    if name == "open":
        return HostUnreachable(
            f"cannot connect to {uri}: {err}",
            hint="check the host is up and its URI in cluster.yaml",
        )
    if err.get_error_code() in (
        libvirt.VIR_ERR_OPERATION_TIMEOUT,
        libvirt.VIR_ERR_AGENT_UNRESPONSIVE,
    ):
        return HostTimeout(f"{name} timed out on {uri}: {err}")
    return HostUnreachable(f"{name} failed on {uri}: {err}")


def _is_remote(uri: str) -> bool:
    # test:///..., qemu:///system: in-process or a local daemon; a host part or a transport
    # (qemu+ssh://kvm-01/system, qemu+tcp://...) means a network connection worth a keepalive
    scheme, _, rest = uri.partition("://")
    return "+" in scheme or not rest.startswith("/")


def first_sweep(probe: Probe) -> None:
    """Open the connection and take the first sample of everything (the connection stays open)."""
    s = probe.settings
    if probe.borrow is not None:
        probe.conn = probe.call("open", probe.borrow, limit=s.connect_timeout)
    else:
        probe.conn = probe.call("open", libvirt.open, probe.uri, limit=s.connect_timeout)
    conn = probe.conn
    if probe.borrow is None and _is_remote(probe.uri):
        # libvirt's own dead-peer detection: a host that stops answering fails its calls
        interval = max(1, round(s.call_timeout / (KEEPALIVE_COUNT + 1)))
        with contextlib.suppress(libvirt.libvirtError):
            conn.setKeepAlive(interval, KEEPALIVE_COUNT)
    if probe.known is None:
        lasting, sizes = _lasting_facts(probe)
    else:
        lasting, sizes = dict(probe.known.facts), list(probe.known.hugepage_sizes)
    free = probe.call("getFreeMemory", conn.getFreeMemory)
    hugepages = free_hugepages(probe, sizes)
    before = time.monotonic()
    flags = _STATS if s.cpu_samples else _STATS_WITHOUT_CPU
    records = probe.call("getAllDomainStats", conn.getAllDomainStats, flags, 0)
    probe.first_at = (before + time.monotonic()) / 2
    probe.one_sample = not s.cpu_samples or repeats_first_sample(probe.uri, records)
    if s.cpu_samples and s.sample_interval > 0 and not in_process(probe.uri):
        probe.dirty_started = dirty_rate.start(probe, records)
    if not probe.one_sample:
        probe.cpu_first = probe.call(
            "getCPUStats", conn.getCPUStats, libvirt.VIR_NODE_CPU_STATS_ALL_CPUS, 0
        )
    transient = {
        d.UUID()
        for d in probe.call(
            "listAllDomains", conn.listAllDomains, libvirt.VIR_CONNECT_LIST_DOMAINS_TRANSIENT
        )
    }
    xmls: list[str | None] = []
    for dom, _stats in records:
        try:
            xmls.append(probe.call("XMLDesc", dom.XMLDesc, 0))
        except HostUnreachable as err:
            cause = err.__cause__
            if (
                isinstance(cause, libvirt.libvirtError)
                and cause.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN
            ):
                xmls.append(None)  # gone meanwhile (e.g. migrated away)
                continue
            raise
    vms = _parse_vms(records, xmls, probe.settings.shared_paths, transient)
    shared = probe.settings.shared_paths
    pools = None
    if needs_pools((ref for vm in vms for ref in vm.disk_refs), shared):
        pools = read_pools(probe)
    for vm in vms:
        vm.disks = resolve_disks(vm.disk_refs, pools, shared)
    if probe.one_sample and probe.questions is None:
        probe.close()  # done with the host: its state is freed while still in the caches
    # everything below is local work, outside any call's deadline
    probe.host = {**lasting, "memory_free": int(free), "hugepages_free": hugepages}
    probe.vms = vms


def _lasting_facts(probe: Probe) -> tuple[dict[str, Any], list[int]]:
    """The host's ``STATIC_FACTS`` and huge page sizes, asked of it."""
    conn = probe.conn
    caps = probe.call("getCapabilities", conn.getCapabilities)
    info = probe.call("getInfo", conn.getInfo)
    hostname = probe.call("getHostname", conn.getHostname)
    lib_version = probe.call("getLibVersion", conn.getLibVersion)
    hv_type = probe.call("getType", conn.getType)
    hv_version = probe.call("getVersion", conn.getVersion)
    host = capabilities_host(caps)
    facts = {
        "uuid": None if host is None else host.findtext("uuid"),
        "hostname": hostname,
        "arch": None if host is None else host.findtext("cpu/arch"),
        "cpu_model": None if host is None else host.findtext("cpu/model"),
        "cpus": int(info[2]),
        "memory_total": int(info[1]) * 1024**2,
        "libvirt_version": _version(int(lib_version)),
        "hypervisor": str(hv_type),
        "hypervisor_version": _version(int(hv_version)),
    }
    return facts, huge_page_sizes(host)


def huge_page_sizes(host: ET.Element | None) -> list[int]:
    """The huge page sizes (KiB) the host's capabilities list: every ``<pages>`` of its CPU
    but the first, the base page size (libvirt lists it first)."""
    if host is None:
        return []
    sizes: list[int] = []
    for page in host.findall("cpu/pages"):
        with contextlib.suppress(TypeError, ValueError):
            size = int(page.get("size") or "")
            if (page.get("unit") or "KiB") == "KiB" and size not in sizes:
                sizes.append(size)
    return sorted(sizes)[1:]


def free_hugepages(probe: Probe, sizes: list[int]) -> dict[int, int] | None:
    """Free huge pages per size of ``sizes``, all NUMA cells together (cell -1: the host's
    own totals); None when the host offers none or its driver answers nothing (libvirt's
    test driver)."""
    if not sizes:
        return None
    try:
        cells = probe.call("getFreePages", probe.conn.getFreePages, sizes, -1, 1, 0)
    except HostUnreachable:  # the driver has no such call, or the host none of these sizes
        return None
    found: dict[int, int] = {}
    if isinstance(cells, dict):
        for cell in cells.values():
            if isinstance(cell, dict):
                for size, count in cell.items():
                    if size in sizes and isinstance(count, int):
                        found[size] = found.get(size, 0) + count
    return found or None


def read_pools(probe: Probe) -> dict[str, PoolInfo] | None:
    """The host's active storage pools with their volumes; None when they cannot be read.

    Asked only when some VM may have a local disk: one call for the pools, two per pool and
    two per volume (``virStorageVolGetInfo`` refreshes the allocation it reports).
    """
    conn = probe.conn
    out: dict[str, PoolInfo] = {}
    try:
        pools = probe.call(
            "listAllStoragePools",
            conn.listAllStoragePools,
            libvirt.VIR_CONNECT_LIST_STORAGE_POOLS_ACTIVE,
        )
        for pool in pools:
            xml = probe.call("storagePoolGetXMLDesc", pool.XMLDesc, 0)
            vols = probe.call("storagePoolListAllVolumes", pool.listAllVolumes, 0)
            volumes: dict[str, PoolVolume] = {}
            for vol in vols:
                info = probe.call("storageVolGetInfo", vol.info)
                path = probe.call("storageVolGetPath", vol.path)
                name = vol.name()
                volumes[name] = PoolVolume(name, path, int(info[1]), int(info[2]))
            root = ET.fromstring(xml)
            out[pool.name()] = PoolInfo(
                pool.name(), root.get("type", "?"), root.findtext("target/path"), volumes
            )
    except HostTimeout:
        raise
    except (HostUnreachable, ET.ParseError):
        return None  # a pool or volume gone meanwhile: its disks read as of unknown storage
    return out


def capabilities_host(caps: str) -> ET.Element | None:
    """The ``<host>`` element of a capabilities XML, parsed without the guests after it.

    libvirt writes ``<host>`` first, before a ``<guest>`` per emulator and machine type,
    which make up most of a real host's capabilities. The cut is used only when nothing but
    the root's plain start tag comes before it; it cannot end early and still parse (a
    ``</host>`` inside it could only be in a comment or CDATA, left open by the cut).
    """
    start = caps.find("<host>")
    end = caps.find("</host>", start)
    if start > 0 and end > 0 and caps[:start].strip() == "<capabilities>":
        with contextlib.suppress(ET.ParseError):
            return ET.fromstring(caps[start : end + len("</host>")])
    return ET.fromstring(caps).find("host")


def _parse_vms(
    records: list[tuple[Any, dict[str, Any]]],
    xmls: list[str | None],
    shared_paths: tuple[str, ...],
    transient: set[bytes],
) -> list[_Vm]:
    """The VMs of one host from their first stats and XML (all parsed at once)."""
    vms: list[_Vm] = []
    for (dom, stats), reading in zip(
        records, read_domains(xmls, shared_paths=shared_paths), strict=True
    ):
        raw = dom.UUID()
        facts, meta = reading.facts, reading.metadata
        vms.append(
            _Vm(
                name=dom.name(),
                uuid=_uuid_text(raw),
                raw_uuid=raw,
                stats=stats,
                persistent=raw not in transient,
                facts_vcpus=facts.vcpus,
                facts_memory_max=facts.memory_max,
                facts_memory_current=facts.memory_current,
                labels=meta.labels,
                reconciler=meta.state,
                blockers=reading.blockers,
                passthrough=reading.passthrough,
                disk_refs=reading.disks,
                needs=reading.needs,
            )
        )
    return vms


def _uuid_text(raw: bytes) -> str:
    """``virDomainGetUUIDString`` without its call: libvirt formats it through printf."""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


RawVm = tuple[
    str,  # name
    str,  # uuid
    int,  # state: libvirt's virDomainState code
    object,  # the state's reason code, as libvirt gave it
    bool,  # persistent
    int,  # vcpus
    int,  # memory_max, bytes
    int,  # memory_current, bytes
    float | None,  # cpu_used, cores
    int | None,  # memory_used, bytes
    dict[str, str],  # labels
    ReconcilerState,
    list[Unmigratable],  # what blocks a live migration (its XML, disks and state)
    str | None,  # CPU mode when host-passthrough or maximum
    list[VmDisk],  # its disks, resolved against the host's storage pools
    Needs | None,  # what it asks of a target host
    MigrationClass,
    list[str],  # why it has its migration class
    int | None,  # bytes of memory it writes per second (dirty_rate), when measured
]
"""One VM as plain values, in ``VmState``'s terms."""
RawHost = tuple[
    str,  # name
    str,  # uri
    dict[str, Any] | None,  # host facts (HostState's fields); None: unreachable
    float | None,  # CPU busy, percent
    str | None,  # why it is unreachable
    int,  # libvirt calls
    float,  # seconds waited for answers
    list[RawVm],
    HostAnswers | None,  # its compatibility answers; None: not asked
]
"""One host as plain values: what the pool returns and a worker process sends back."""


def second_sweep(probe: Probe) -> RawHost:
    """The second CPU sample, then the host as plain values; asks the compatibility
    questions (with ``probe.questions``) and closes the connection.

    With ``probe.one_sample`` there is no second sample to take: the CPU figures stay
    unknown, as two equal samples would leave them. Each VM comes with its CPU mode when
    that is host-passthrough or maximum: whether that blocks migration depends on every
    host's CPU model, known only to the caller.
    """
    cpu_after: dict[bytes, object] = {}
    dirty_after: dict[bytes, int | None] = {}
    busy: float | None = None
    elapsed_ns = 0
    if not probe.one_sample:
        conn = probe.conn
        cpu_second = probe.call(
            "getCPUStats", conn.getCPUStats, libvirt.VIR_NODE_CPU_STATS_ALL_CPUS, 0
        )
        before = time.monotonic()
        flags = libvirt.VIR_DOMAIN_STATS_CPU_TOTAL
        second = probe.call(
            "getAllDomainStats",
            conn.getAllDomainStats,
            flags | dirty_rate.STATS if probe.dirty_started else flags,
            0,
        )
        elapsed_ns = int(((before + time.monotonic()) / 2 - probe.first_at) * 1e9)
        if probe.questions is None:
            probe.close()
        cpu_after = {dom.UUID(): stats.get("cpu.time") for dom, stats in second}
        if probe.dirty_started:
            dirty_after = {dom.UUID(): dirty_rate.reading(stats) for dom, stats in second}
        del second  # its domain objects, freed now rather than with the results
        busy = _host_cpu_busy(probe.cpu_first, cpu_second)
    vms = [
        _raw_vm(vm, cpu_after.get(vm.raw_uuid), elapsed_ns, dirty_after.get(vm.raw_uuid))
        for vm in probe.vms
    ]
    needs = [
        (vm[15], vm[2] in _LIVE_CODES)
        for vm in vms
        if vm[15] is not None and vm[16] is not MigrationClass.IMMOVABLE
    ]
    probe.vms = []
    waited = round(probe.waited, 4)
    asking = probe.questions is not None and probe.conn is not None
    answers = HostAnswers() if asking else None
    result: RawHost = (
        probe.name,
        probe.uri,
        probe.host,
        busy,
        None,
        probe.calls,
        waited,
        vms,
        answers,
    )
    if probe.questions is not None and answers is not None:
        probe.result = result  # what the pool reports should a question hang
        try:
            answer_questions(probe.conn, probe.ask, needs, probe.questions, answers)
        except Abandoned:
            raise
        except Exception as err:  # a question that cannot be asked is no reason to fail a host
            log.info("compatibility: %s could not be asked: %r", probe.uri, err)
            answers.silent = True
        probe.close()
    return result


def in_process(uri: str) -> bool:
    """Whether libvirt serves ``uri`` inside this process (its test driver) or over a socket."""
    return uri.partition("://")[0] == "test"


def repeats_first_sample(uri: str, records: list[tuple[Any, dict[str, Any]]]) -> bool:
    """Whether a second CPU sample of this host could only repeat its first.

    libvirt's test driver, in this process, reports fixed host CPU counters and no CPU time
    for its domains: its CPU figures stay unknown however long the interval. Holding its
    connections open through the interval is not free either: each holds the whole host's
    state in this process (about 280 KiB for 27 VMs), some 60 at a time at the default
    0.5 s, and that memory is cold by the time it is freed and reused (a fifth more CPU at
    1,000 hosts). Should a test-driver domain ever report CPU time, both samples are taken.
    """
    return in_process(uri) and not any("cpu.time" in stats for _, stats in records)


_LIVE_CODES: Final = frozenset(STATES.index(s) for s in MIGRATABLE_STATES)


def _raw_vm(vm: _Vm, cpu_time_after: object, elapsed_ns: int, dirty: int | None) -> RawVm:
    """``vm`` as plain values; ``dirty``: its dirty rate from the second sweep, when read."""
    stats = vm.stats
    cpu_used: float | None = None
    cpu_before = stats.get("cpu.time")
    if (
        isinstance(cpu_before, int)
        and isinstance(cpu_time_after, int)
        and cpu_time_after >= cpu_before
        and elapsed_ns > 0
    ):
        cpu_used = round((cpu_time_after - cpu_before) / elapsed_ns, 4)
    memory_used = _kib(stats, "balloon.rss")
    if memory_used is None:
        available, unused = _kib(stats, "balloon.available"), _kib(stats, "balloon.unused")
        if available is not None and unused is not None:
            memory_used = max(0, available - unused)
    vcpus = stats.get("vcpu.current")
    memory_max = _kib(stats, "balloon.maximum")
    memory_current = _kib(stats, "balloon.current")
    code = stats.get("state.state", 0)
    state = STATES[code] if isinstance(code, int) and 0 <= code < len(STATES) else STATES[0]
    # the XML's LocalDisk reasons are replaced by those of the disks as the pools see them
    blockers = [b for b in vm.blockers if b.code is not UnmigratableReason.LOCAL_DISK]
    blockers += local_disk_blockers(vm.disks)
    if state not in MIGRATABLE_STATES:
        blockers.insert(
            0, Unmigratable(code=UnmigratableReason.NOT_RUNNING, detail=f"the VM is {state}")
        )
    klass, why = classify(state, blockers, vm.disks)
    return (
        vm.name,
        vm.uuid,
        code,
        stats.get("state.reason", 0),
        vm.persistent,
        vcpus if isinstance(vcpus, int) else vm.facts_vcpus,
        memory_max if memory_max is not None else vm.facts_memory_max,
        memory_current if memory_current is not None else vm.facts_memory_current,
        cpu_used,
        memory_used,
        vm.labels,
        vm.reconciler,
        blockers,
        vm.passthrough,
        vm.disks,
        vm.needs,
        klass,
        why,
        dirty if dirty is not None else dirty_rate.reading(stats),
    )


def unreachable(probe: Probe, error: Exception) -> RawHost:
    """The host as reported when it failed: never empty, always with the reason."""
    waited = round(max(0.0, probe.waited), 4)
    return probe.name, probe.uri, None, None, str(error), probe.calls, waited, [], None


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
