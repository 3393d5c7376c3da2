"""A cheap CPU reading of every host, for the load over a window (``spec.load.source:
samples``): what ``run`` takes between its rounds.

One ``getAllDomainStats`` per host, asking for ``cpu.time`` of the running domains only, on a
connection kept open between samples (the pool reopens one that broke). Hosts are read at the
same time, each within ``connect_timeout`` + ``call_timeout``: a host that does not answer by
then gives no reading this time (its VMs' windows get a gap), and is not asked again while
its call is still out. A domain's name, UUID and ID are read from the answer itself, without
further calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Final

import libvirt

from reconciler.adapters.libvirt.connection import ConnectionSettings, map_error
from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.core.load_samples import HostSample
from reconciler.errors import ReconcilerError

_FLAGS: Final = libvirt.VIR_CONNECT_GET_ALL_DOMAINS_STATS_ACTIVE
_STATS: Final = libvirt.VIR_DOMAIN_STATS_CPU_TOTAL


class LibvirtSampler:
    """Reads the CPU time of every running VM on ``uris`` (host name -> libvirt URI)."""

    def __init__(
        self,
        uris: Mapping[str, str],
        *,
        connect_timeout: float,
        call_timeout: float,
        concurrency: int = 16,
        clock: Callable[[], float] = time.time,
    ) -> None:
        interval = max(1, round(call_timeout / 4))
        self.pool = ConnectionPool(
            uris,
            ConnectionSettings(
                connect_timeout=connect_timeout, keepalive_interval=interval, keepalive_count=3
            ),
        )
        self.hosts = sorted(uris)
        self.deadline = connect_timeout + call_timeout
        self.clock = clock
        self._executor = ThreadPoolExecutor(
            max_workers=max(1, min(concurrency, len(self.hosts))), thread_name_prefix="sampler"
        )
        self._out: dict[str, Future[HostSample]] = {}
        self._lock = threading.Lock()

    def sample(self) -> list[HostSample]:
        """One reading of every host, in host order; a host that failed or did not answer in
        time has its ``error``."""
        started: dict[str, Future[HostSample]] = {}
        busy: list[str] = []
        with self._lock:
            for host in self.hosts:
                previous = self._out.get(host)
                if previous is not None and not previous.done():
                    busy.append(host)
                    continue
                started[host] = self._out[host] = self._executor.submit(self._read, host)
        wait(started.values(), timeout=self.deadline)
        now = self.clock()
        out: list[HostSample] = []
        for host in self.hosts:
            future = started.get(host)
            if future is None:
                out.append(HostSample(host, now, error="still answering an earlier sample"))
            elif not future.done():
                out.append(HostSample(host, now, error=f"did not answer within {self.deadline:g}s"))
            else:
                out.append(future.result())
        return out

    def _read(self, host: str) -> HostSample:
        before = self.clock()
        try:
            records = self.pool.call(host, lambda conn: conn.getAllDomainStats(_STATS, _FLAGS))
        except libvirt.libvirtError as err:
            return HostSample(host, before, error=map_error("getAllDomainStats", host, err).message)
        except ReconcilerError as err:
            return HostSample(host, before, error=err.message)
        at = (before + self.clock()) / 2
        vms: list[tuple[str, str, int, int]] = []
        for dom, stats in records:
            cpu = stats.get("cpu.time") if isinstance(stats, dict) else None
            if isinstance(cpu, int) and cpu >= 0:
                vms.append((_name(dom), _uuid(dom), _id(dom), cpu))
        return HostSample(host, at, tuple(vms))

    def close(self) -> None:
        """Stop reading: calls still out end on their own (keepalive bounds them)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.pool.close()


def _name(dom: Any) -> str:
    return str(dom.name())


def _uuid(dom: Any) -> str:
    return str(dom.UUIDString())


def _id(dom: Any) -> int:
    try:
        return int(dom.ID())
    except libvirt.libvirtError:
        return -1
