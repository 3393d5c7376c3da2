"""Which hosts would refuse a VM, asked of libvirt while observing, before anything is planned.

Two questions, each to the target host's libvirt:

- CPU: a VM whose CPU mode is ``host-model`` or ``host-passthrough`` (or ``maximum``) goes only
  where ``compareHypervisorCPU`` (with ``FAIL_INCOMPATIBLE``, so the answer names what is
  missing) finds its CPU compatible. The CPU compared is the one the VM runs with: the
  ``<cpu>`` of its live XML when it names a model (host-model, expanded at start), else the
  source hypervisor's host-model CPU (from its domain capabilities: what QEMU/KVM there can
  give a guest; the raw host CPU would list features no hypervisor passes through). Either is
  compared as a custom CPU, as libvirt sends it on migration. A host-passthrough VM among hosts
  of different CPU models stays immovable besides (``HostPassthroughCpu``): it gets the whole
  host CPU, more than any comparison covers. Asked once per target host, CPU definition (which
  names the source's model) and machine key, so hosts of one model are asked once per target.
- Machine type and emulator: ``getDomainCapabilities`` for the VM's emulator, architecture,
  machine type and domain type (the machine key) must succeed on the target; asked once per
  target and machine key.

Huge pages are not a question here: a host's free pages are observed with the host, and the
planner counts them as a capacity, summed over every VM it plans onto the host
(:mod:`reconciler.core.hugepages`). ``Needs`` still reads a VM's page size and memory for it.

Each host is asked over the connection it is observed on, once that observation has its VMs
(``answer_questions``): about the machine keys and CPU definitions of its own VMs and of those
seen so far in the same process (``Questions``), so in a cluster of a few kinds of VM every
host is asked everything while its connection is open, once per distinct question. Only what a
plan can use is asked: nothing about a VM that cannot move, no CPU of a VM that is not running.
What no host's observation asked (a kind of VM first seen after that host was done) is asked
afterwards by ``Compatibility``, over the command's connections or one of its own per host.

A driver that does not implement a call (libvirt's test driver) answers nothing, and nothing
is refused on its account. Every call is waited for at most the call timeout: a host that does
not answer in time refuses nothing (it is unreachable to the planner anyway, or its next
observation asks again).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, TypeVar

import libvirt

from reconciler.core.hugepages import DEFAULT_PAGE_KIB, kib_of

log = logging.getLogger(__name__)

T = TypeVar("T")

_CPU_MODES: Final = frozenset({"host-model", "host-passthrough", "maximum"})


class Needs(NamedTuple):
    """What a VM asks of a host it moves to, read from its domain XML (a tuple: one is
    made for every VM observed)."""

    cpu_mode: str | None = None
    """host-model, host-passthrough or maximum; None for a named or default CPU."""
    cpu_xml: str | None = None
    """Its ``<cpu>`` element when it names a model: what it runs with."""
    arch: str | None = None
    machine: str | None = None
    virt_type: str | None = None
    emulator: str | None = None
    hugepage_kib: int | None = None
    """Page size when its memory is backed by hugepages."""
    memory: int = 0
    """Bytes of guest memory (what hugepages must hold)."""

    @property
    def checks_cpu(self) -> bool:
        return self.cpu_mode in _CPU_MODES


def needs_of(domain: ET.Element) -> Needs:
    """The ``Needs`` of a parsed ``<domain>``."""
    cpu = domain.find("cpu")
    mode = cpu.get("mode") if cpu is not None else None
    cpu_xml = None
    if cpu is None or mode not in _CPU_MODES:
        mode = None
    elif (cpu.findtext("model") or "").strip():
        custom = ET.Element("cpu", mode="custom", match="exact")
        custom.extend(c for c in cpu if c.tag in ("model", "vendor", "feature"))
        cpu_xml = ET.tostring(custom, encoding="unicode")
    os_type = _grandchild(domain, "os", "type")
    hugepages = _grandchild(domain, "memoryBacking", "hugepages")
    page_kib = None
    if hugepages is not None:
        page = hugepages.find("page")
        page_kib = kib_of(page.get("size"), page.get("unit")) if page is not None else None
        page_kib = page_kib or DEFAULT_PAGE_KIB
    memory = domain.find("memory")
    memory_kib = kib_of(memory.text, memory.get("unit")) if memory is not None else None
    emulator = _grandchild(domain, "devices", "emulator")
    path = emulator.text if emulator is not None else None
    return Needs(
        mode,
        cpu_xml,
        os_type.get("arch") if os_type is not None else None,
        os_type.get("machine") if os_type is not None else None,
        domain.get("type"),
        path.strip() if path else None,
        page_kib,
        (memory_kib or 0) * 1024,
    )


def _grandchild(parent: ET.Element, tag: str, sub: str) -> ET.Element | None:
    """``parent.find(f"{tag}/{sub}")`` by plain tags, which ElementTree finds in C; a path
    goes through its Python path engine, several times slower."""
    for child in parent.findall(tag):
        found = child.find(sub)
        if found is not None:
            return found
    return None


class Candidate(NamedTuple):
    """A VM to check: where it is, its UUID, what it needs."""

    host: str
    uuid: str
    needs: Needs
    running: bool = True
    """A shut-off VM moves cold: the target checks only its machine type and emulator."""


MachineKey = tuple[str | None, str | None, str | None, str | None]
"""(emulator, arch, machine type, domain type): what ``getDomainCapabilities`` is asked."""
CpuKey = tuple[str, MachineKey]
"""A CPU definition and the machine key it is compared for."""
INCOMPATIBLE: Final = "libvirt says incompatible"


@dataclass
class HostAnswers:
    """What one host answered over the connection it was observed on (plain values, so they
    cross from a worker process): per question, None when it accepts, else libvirt's words."""

    machines: dict[MachineKey, str | None] = field(default_factory=dict)
    cpus: dict[CpuKey, str | None] = field(default_factory=dict)
    host_cpus: dict[MachineKey, str | None] = field(default_factory=dict)
    """Its own host-model CPU per machine key of its VMs, as a custom CPU definition."""
    silent: bool = False
    """A question was not answered within the call timeout: the host refuses nothing."""


class Questions:
    """The machine keys and CPU definitions seen so far in one process's observation.

    Each host adds those of its own VMs, then is asked all of them, so a host observed after
    the first VM of a kind is asked about that kind while its connection is open.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._machines: dict[MachineKey, None] = {}
        self._cpus: dict[CpuKey, None] = {}

    def machines(self, own: Iterable[MachineKey]) -> list[MachineKey]:
        with self._lock:
            self._machines.update(dict.fromkeys(own))
            return list(self._machines)

    def cpus(self, own: Iterable[CpuKey]) -> list[CpuKey]:
        with self._lock:
            self._cpus.update(dict.fromkeys(own))
            return list(self._cpus)


def answer_questions(
    conn: Any,
    ask: Callable[..., Any],
    vms: Sequence[tuple[Needs, bool]],
    questions: Questions,
    answers: HostAnswers,
) -> None:
    """Ask ``conn``'s host every question known so far, its own VMs' among them.

    ``vms`` are the host's VMs that may move, each with whether it runs (only a running VM's
    CPU is compared). ``ask(name, fn, *args)`` calls ``fn`` timed as one call to the host
    (libvirt errors pass through). ``answers`` fills as answers come, so what was answered
    before a question hung is kept.
    """
    sources = {_machine_key(n) for n, running in vms if running and n.checks_cpu and not n.cpu_xml}
    for key in questions.machines(_machine_key(n) for n, _ in vms):
        try:
            caps = ask("getDomainCapabilities", conn.getDomainCapabilities, *key, 0)
        except libvirt.libvirtError as err:
            no_support = err.get_error_code() == libvirt.VIR_ERR_NO_SUPPORT
            answers.machines[key] = None if no_support else _words(err)
            if key in sources:
                answers.host_cpus[key] = None
            continue
        answers.machines[key] = None
        if key in sources:
            answers.host_cpus[key] = host_model_cpu(caps)
    own: list[CpuKey] = []
    for n, running in vms:
        if running and n.checks_cpu:
            key = _machine_key(n)
            cpu = n.cpu_xml or answers.host_cpus.get(key)
            if cpu is not None:
                own.append((cpu, key))
    flags = libvirt.VIR_CONNECT_COMPARE_CPU_FAIL_INCOMPATIBLE
    for cpu, key in questions.cpus(own):
        try:
            result = ask("compareHypervisorCPU", conn.compareHypervisorCPU, *key, cpu, flags)
        except libvirt.libvirtError as err:
            no_support = err.get_error_code() == libvirt.VIR_ERR_NO_SUPPORT
            answers.cpus[cpu, key] = None if no_support else _words(err)
            continue
        answers.cpus[cpu, key] = (
            INCOMPATIBLE if result == libvirt.VIR_CPU_COMPARE_INCOMPATIBLE else None
        )


def host_model_cpu(caps: object) -> str | None:
    """The host-model CPU of a domain capabilities XML, as a custom CPU definition."""
    if not isinstance(caps, str):
        return None
    with contextlib.suppress(ET.ParseError):
        model = ET.fromstring(caps).find("cpu/mode[@name='host-model']")
        if model is not None and model.find("model") is not None:
            custom = ET.Element("cpu", mode="custom", match="exact")
            custom.extend(model)
            return ET.tostring(custom, encoding="unicode")
    return None


def _words(err: libvirt.libvirtError) -> str:
    return str(err.get_error_message() or err)


Call = Callable[[str, Callable[[Any], T]], T]
"""Run a function on a host's open connection (HostUnreachable and libvirtError pass through)."""


class Compatibility:
    """The refusals of one observation, its answers cached for its length.

    ``answers`` are what hosts answered while they were observed; only what they did not
    answer is asked here, through ``call``.
    """

    def __init__(
        self,
        call: Callable[[str, Callable[[Any], Any]], Any],
        timeout: float,
        answers: dict[str, HostAnswers] | None = None,
    ) -> None:
        self._call = call
        self.timeout = timeout
        self.calls = 0
        self._answers = answers or {}
        self._cpu: dict[tuple[str, CpuKey], str | None] = {}
        """(target, (CPU definition, machine key)) -> libvirt's words; None: compatible."""
        self._caps: dict[tuple[str, MachineKey], str | None] = {}
        self._host_cpu: dict[str, str | None] = {}
        self._silent: set[str] = {host for host, a in self._answers.items() if a.silent}
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def refusals(
        self, vms: Iterable[Candidate], targets: Iterable[str]
    ) -> dict[tuple[str, str], dict[str, str]]:
        """(uuid, host) -> {target: why it refuses the VM}, for each VM some target refuses.

        VMs are grouped by what is asked about them (machine key; CPU definition and machine
        key), so a target is asked once per group, not once per VM: the loops stay near
        hosts x groups. A CPU refusal names each VM's own CPU mode.
        """
        hosts = list(targets)
        out: dict[tuple[str, str], dict[str, str]] = {}
        machines: dict[MachineKey, list[Candidate]] = {}
        cpus: dict[tuple[str, MachineKey, str | None], list[Candidate]] = {}
        for vm in vms:
            n = vm.needs
            machines.setdefault(_machine_key(n), []).append(vm)
            if vm.running and n.checks_cpu:
                cpu = n.cpu_xml or self._source_cpu(vm.host, n)
                if cpu is not None:
                    cpus.setdefault((cpu, _machine_key(n), n.cpu_mode), []).append(vm)
        checks: list[tuple[list[Candidate], str | None]] = [(m, None) for m in machines.values()]
        checks += [(members, cpu) for (cpu, _, _), members in cpus.items()]
        for target in hosts:
            for members, cpu in checks:
                if target in self._silent or all(vm.host == target for vm in members):
                    continue
                n = members[0].needs
                why = self._machine(target, n) if cpu is None else self._cpu_refusal(target, cpu, n)
                if why is None:
                    continue
                for vm in members:
                    if vm.host != target:
                        out.setdefault((vm.uuid, vm.host), {}).setdefault(target, why)
        return out

    # --- the questions --------------------------------------------------------------------

    def _machine(self, target: str, n: Needs) -> str | None:
        key = _machine_key(n)
        if (target, key) not in self._caps:
            known = self._answers.get(target)
            if known is not None and key in known.machines:
                err = known.machines[key]
            else:
                err = self._ask(target, lambda c: c.getDomainCapabilities(*key, 0))
            self._caps[target, key] = err
        err = self._caps[target, key]
        if err is None:
            return None
        return (
            f"{target} does not accept machine type {n.machine or 'default'} "
            f"({n.arch or 'any arch'}, emulator {n.emulator or 'default'}): {err}"
        )

    def _cpu_refusal(self, target: str, cpu: str, n: Needs) -> str | None:
        key = (cpu, _machine_key(n))
        if (target, key) not in self._cpu:
            known = self._answers.get(target)
            if known is not None and key in known.cpus:
                err = known.cpus[key]
            else:
                flags = libvirt.VIR_CONNECT_COMPARE_CPU_FAIL_INCOMPATIBLE
                err = self._ask(
                    target,
                    lambda c: c.compareHypervisorCPU(*key[1], cpu, flags),
                    incompatible=lambda result: result == libvirt.VIR_CPU_COMPARE_INCOMPATIBLE,
                )
            self._cpu[target, key] = err
        err = self._cpu[target, key]
        if err is None:
            return None
        return f"its CPU ({n.cpu_mode}) is not compatible with {target}: {err}"

    def _source_cpu(self, source: str, n: Needs) -> str | None:
        """The source hypervisor's host-model CPU, as a custom CPU definition."""
        key = f"{source} {n.emulator} {n.arch} {n.machine} {n.virt_type}"
        if key not in self._host_cpu:
            known = self._answers.get(source)
            if known is not None and _machine_key(n) in known.host_cpus:
                self._host_cpu[key] = known.host_cpus[_machine_key(n)]
            else:
                caps = self._bounded(
                    source,
                    lambda c: c.getDomainCapabilities(
                        n.emulator, n.arch, n.machine, n.virt_type, 0
                    ),
                )
                self._host_cpu[key] = host_model_cpu(caps)
        return self._host_cpu[key]

    # --- calls ------------------------------------------------------------------------------

    def _ask(
        self,
        host: str,
        fn: Callable[[Any], Any],
        incompatible: Callable[[Any], bool] | None = None,
    ) -> str | None:
        """None when ``fn`` succeeds on ``host`` (or cannot be asked); else libvirt's words."""
        try:
            result = self._bounded(host, fn, raising=True)
        except libvirt.libvirtError as err:
            if err.get_error_code() == libvirt.VIR_ERR_NO_SUPPORT:
                return None
            return _words(err)
        if incompatible is not None and incompatible(result):
            return INCOMPATIBLE
        return None

    def _bounded(self, host: str, fn: Callable[[Any], T], *, raising: bool = False) -> T | None:
        """``fn`` on ``host``, waited for at most the timeout; None when it could not be asked
        (libvirt errors are raised when ``raising``)."""
        if host in self._silent:
            return None
        self.calls += 1
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="compat")
        future = self._pool.submit(self._call, host, fn)
        try:
            answer: T = future.result(timeout=self.timeout)
            return answer
        except concurrent.futures.TimeoutError:
            log.warning("compatibility: %s did not answer within %gs", host, self.timeout)
            self._silent.add(host)
            return None
        except libvirt.libvirtError as err:
            if raising:
                raise
            if err.get_error_code() != libvirt.VIR_ERR_NO_SUPPORT:
                log.info("compatibility: %s: %s", host, err)
            return None
        except Exception as err:  # unreachable since observed: nothing to say about it
            log.info("compatibility: %s could not be asked: %s", host, err)
            self._silent.add(host)
            return None


def _machine_key(n: Needs) -> MachineKey:
    return (n.emulator, n.arch, n.machine, n.virt_type)
