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
  host CPU, more than any comparison covers. Answers are cached per target host and CPU
  definition (which names the source's model), so hosts of one model are asked once per target.
- Machine type and emulator: ``getDomainCapabilities`` for the VM's emulator, architecture,
  machine type and domain type must succeed on the target; cached per target and those four.

Huge pages are not a question here: a host's free pages are observed with the host, and the
planner counts them as a capacity, summed over every VM it plans onto the host
(:mod:`reconciler.core.hugepages`). ``Needs`` still reads a VM's page size and memory for it.

A driver that does not implement a call (libvirt's test driver) answers nothing, and nothing
is refused on its account. Every call runs on a worker thread and is waited for at most the
call timeout: a host that does not answer in time refuses nothing (it is unreachable to the
planner anyway, or its next observation asks again).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import logging
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import libvirt

from reconciler.core.hugepages import DEFAULT_PAGE_KIB, kib_of

log = logging.getLogger(__name__)

T = TypeVar("T")

_CPU_MODES: Final = frozenset({"host-model", "host-passthrough", "maximum"})


@dataclass(frozen=True)
class Needs:
    """What a VM asks of a host it moves to, read from its domain XML."""

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
    if cpu is not None and mode in _CPU_MODES and (cpu.findtext("model") or "").strip():
        custom = ET.Element("cpu", mode="custom", match="exact")
        custom.extend(c for c in cpu if c.tag in ("model", "vendor", "feature"))
        cpu_xml = ET.tostring(custom, encoding="unicode")
    os_type = domain.find("os/type")
    hugepages = domain.find("memoryBacking/hugepages")
    page_kib = None
    if hugepages is not None:
        page = hugepages.find("page")
        page_kib = kib_of(page.get("size"), page.get("unit")) if page is not None else None
        page_kib = page_kib or DEFAULT_PAGE_KIB
    memory = domain.find("memory")
    memory_kib = kib_of(memory.text, memory.get("unit")) if memory is not None else None
    emulator = domain.findtext("devices/emulator")
    return Needs(
        cpu_mode=mode if mode in _CPU_MODES else None,
        cpu_xml=cpu_xml,
        arch=os_type.get("arch") if os_type is not None else None,
        machine=os_type.get("machine") if os_type is not None else None,
        virt_type=domain.get("type"),
        emulator=emulator.strip() if emulator else None,
        hugepage_kib=page_kib,
        memory=(memory_kib or 0) * 1024,
    )


@dataclass(frozen=True)
class Candidate:
    """A VM to check: where it is, its UUID, what it needs."""

    host: str
    uuid: str
    needs: Needs
    running: bool = True
    """A shut-off VM moves cold: the target checks only its machine type and emulator."""


Call = Callable[[str, Callable[[Any], T]], T]
"""Run a function on a host's open connection (HostUnreachable and libvirtError pass through)."""


class Compatibility:
    """The refusals of one observation, its answers cached for its length."""

    def __init__(self, call: Callable[[str, Callable[[Any], Any]], Any], timeout: float) -> None:
        self._call = call
        self.timeout = timeout
        self.calls = 0
        self._cpu: dict[tuple[str, str], str | None] = {}
        self._caps: dict[tuple[str | None, ...], str | None] = {}
        self._host_cpu: dict[str, str | None] = {}
        self._silent: set[str] = set()
        self._pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="compat")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def refusals(
        self, vms: Iterable[Candidate], targets: Iterable[str]
    ) -> dict[tuple[str, str], dict[str, str]]:
        """(uuid, host) -> {target: why it refuses the VM}, for each VM some target refuses.

        VMs are grouped by what is asked about them (machine key; CPU definition), so a target
        is asked once per group, not once per VM: the loops stay near hosts x groups.
        """
        hosts = list(targets)
        out: dict[tuple[str, str], dict[str, str]] = {}
        machines: dict[tuple[str | None, ...], list[Candidate]] = {}
        cpus: dict[tuple[str, tuple[str | None, ...]], list[Candidate]] = {}
        for vm in vms:
            n = vm.needs
            machines.setdefault(_machine_key(n), []).append(vm)
            if vm.running and n.checks_cpu:
                cpu = n.cpu_xml or self._source_cpu(vm.host, n)
                if cpu is not None:
                    cpus.setdefault((cpu, _machine_key(n)), []).append(vm)
        checks: list[tuple[list[Candidate], str | None]] = [(m, None) for m in machines.values()]
        checks += [(members, cpu) for (cpu, _), members in cpus.items()]
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
        key = (target, *_machine_key(n))
        if key not in self._caps:
            self._caps[key] = self._ask(
                target,
                lambda c: c.getDomainCapabilities(n.emulator, n.arch, n.machine, n.virt_type, 0),
                lambda err: (
                    f"{target} does not accept machine type {n.machine or 'default'} "
                    f"({n.arch or 'any arch'}, emulator {n.emulator or 'default'}): {err}"
                ),
            )
        return self._caps[key]

    def _cpu_refusal(self, target: str, cpu: str, n: Needs) -> str | None:
        key = (target, hashlib.sha256(cpu.encode()).hexdigest())
        if key not in self._cpu:
            flags = libvirt.VIR_CONNECT_COMPARE_CPU_FAIL_INCOMPATIBLE
            self._cpu[key] = self._ask(
                target,
                lambda c: c.compareHypervisorCPU(
                    n.emulator, n.arch, n.machine, n.virt_type, cpu, flags
                ),
                lambda err: f"its CPU ({n.cpu_mode}) is not compatible with {target}: {err}",
                incompatible=lambda result: result == libvirt.VIR_CPU_COMPARE_INCOMPATIBLE,
            )
        return self._cpu[key]

    def _source_cpu(self, source: str, n: Needs) -> str | None:
        """The source hypervisor's host-model CPU, as a custom CPU definition."""
        key = f"{source} {n.emulator} {n.arch} {n.machine} {n.virt_type}"
        if key not in self._host_cpu:
            caps = self._bounded(
                source,
                lambda c: c.getDomainCapabilities(n.emulator, n.arch, n.machine, n.virt_type, 0),
            )
            cpu = None
            if isinstance(caps, str):
                with contextlib.suppress(ET.ParseError):
                    model = ET.fromstring(caps).find("cpu/mode[@name='host-model']")
                    if model is not None and model.find("model") is not None:
                        custom = ET.Element("cpu", mode="custom", match="exact")
                        custom.extend(model)
                        cpu = ET.tostring(custom, encoding="unicode")
            self._host_cpu[key] = cpu
        return self._host_cpu[key]

    # --- calls ------------------------------------------------------------------------------

    def _ask(
        self,
        host: str,
        fn: Callable[[Any], Any],
        why: Callable[[str], str],
        incompatible: Callable[[Any], bool] | None = None,
    ) -> str | None:
        """None when ``fn`` succeeds on ``host`` (or cannot be asked); else ``why(error)``."""
        try:
            result = self._bounded(host, fn, raising=True)
        except libvirt.libvirtError as err:
            if err.get_error_code() == libvirt.VIR_ERR_NO_SUPPORT:
                return None
            return why(str(err.get_error_message() or err))
        if incompatible is not None and incompatible(result):
            return why("libvirt says incompatible")
        return None

    def _bounded(self, host: str, fn: Callable[[Any], T], *, raising: bool = False) -> T | None:
        """``fn`` on ``host``, waited for at most the timeout; None when it could not be asked
        (libvirt errors are raised when ``raising``)."""
        if host in self._silent:
            return None
        self.calls += 1
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


def _machine_key(n: Needs) -> tuple[str | None, ...]:
    return (n.emulator, n.arch, n.machine, n.virt_type)
