"""Observe many hosts with a small pool of threads: two sweeps, one deadline per call.

A few threads hide the hosts' latency (libvirt releases the GIL while it waits for an answer);
more would only fight over the GIL for the parsing. Hosts of libvirt's test driver, which runs
inside this process, get one thread between them: their calls are this process's own work,
never a wait, and a second thread would only hand the GIL back and forth at every call.

Each host is visited twice over its open connection: the first sweep takes everything, the
second, due ``sample_interval`` after the first, takes the second CPU sample. A due second
visit goes before a new host's first, so few connections stay open; a host whose interval has
not passed waits in a queue, not in a thread.

A watchdog (the calling thread) cuts a host off when one of its calls has waited longer than
its timeout (the connect timeout for opening, the call timeout for every other call). The
thread stuck in that call is left behind (libvirt's keepalive ends it on a remote connection)
and a new thread takes its place, so a hung host costs its timeout and one thread, never the
others' time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import heapq
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final

import libvirt

from reconciler.adapters.libvirt.compatibility import Questions
from reconciler.adapters.libvirt.connection import ensure_event_loop
from reconciler.adapters.libvirt.dirty_rate import WAIT
from reconciler.adapters.libvirt.observe_host import (
    Abandoned,
    KnownHost,
    Probe,
    ProbeSettings,
    RawHost,
    first_sweep,
    in_process,
    second_sweep,
    unreachable,
)
from reconciler.errors import HostUnreachable, ReconcilerError

log = logging.getLogger(__name__)

WATCH_PERIOD: Final = 0.1
"""Longest sleep of the watchdog: a deadline is noticed this late at most."""


class _Pool:
    def __init__(self, probes: list[Probe], interval: float) -> None:
        self.probes = probes
        self.interval = interval
        self.cond = threading.Condition()
        self.fresh: deque[int] = deque(range(len(probes)))
        self.due: list[tuple[float, int]] = []  # (when, index): second visits, a heap
        self.active: set[int] = set()
        self.results: dict[int, RawHost] = {}
        self.closed = False
        self.done = threading.Event()
        """Set once every host has a result: the watchdog waits on it, not on ``cond``."""

    def _next(self) -> tuple[int, bool] | None:
        """(index, second visit?) of the next task, waiting for one; None when all is done."""
        with self.cond:
            while not self.closed:
                now = time.monotonic()
                if self.due and self.due[0][0] <= now:
                    index = heapq.heappop(self.due)[1]
                    self.active.add(index)
                    return index, True
                if self.fresh:
                    index = self.fresh.popleft()
                    self.active.add(index)
                    return index, False
                self.cond.wait(self.due[0][0] - now if self.due else None)
            return None

    def work(self) -> None:
        while (task := self._next()) is not None:
            index, second = task
            probe = self.probes[index]
            try:
                if second:
                    self._finish(index, second_sweep(probe))
                    continue
                first_sweep(probe)
                if probe.one_sample:
                    self._finish(index, second_sweep(probe))
                    continue
                with self.cond:
                    self.active.discard(index)
                    if index not in self.results:
                        wait = max(self.interval, WAIT if probe.dirty_started else 0)
                        heapq.heappush(self.due, (probe.first_at + wait, index))
                        if self.due[0][1] == index:  # sooner than what idle threads wait for
                            self.cond.notify_all()
            except Abandoned:
                return  # the watchdog reported this host and started a thread in our place
            except ReconcilerError as err:
                probe.close()
                self._finish(index, unreachable(probe, err))
            except Exception as err:  # one odd host must not end it all
                probe.close()
                wrapped = HostUnreachable(f"observing {probe.uri} failed: {err!r}")
                self._finish(index, unreachable(probe, wrapped))

    def _finish(self, index: int, result: RawHost) -> None:
        with self.cond:
            self.active.discard(index)
            self.results.setdefault(index, result)
            if len(self.results) == len(self.probes):
                self.done.set()

    def watch(self, threads: int) -> list[RawHost]:
        """Start the threads, cut off hosts past a deadline, return every host's result."""
        for _ in range(threads):
            self._spawn()
        while not self.done.is_set():
            with self.cond:
                now = time.monotonic()
                for index in list(self.active):
                    probe = self.probes[index]
                    started = probe.call_started
                    if started is not None and now - started > probe.call_limit:
                        probe.abandoned = True
                        self.active.discard(index)
                        self.results[index] = self._cut_off(probe, now - started)
                        if len(self.results) == len(self.probes):
                            self.done.set()
                        self._spawn()
            self.done.wait(WATCH_PERIOD)
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        return [self.results[i] for i in range(len(self.probes))]

    @staticmethod
    def _cut_off(probe: Probe, waited: float) -> RawHost:
        """What a host past its call's deadline is reported as: unreachable, unless only a
        compatibility question was left (then as observed, refusing nothing)."""
        if probe.optional and probe.result is not None and probe.result[8] is not None:
            answers = dataclasses.replace(probe.result[8], silent=True)
            log.warning(
                "compatibility: %s did not answer %s within %gs",
                probe.uri,
                probe.call_name,
                probe.call_limit,
            )
            return (*probe.result[:8], answers)
        probe.waited += waited
        return unreachable(probe, probe.timeout_error())

    def _spawn(self) -> None:
        # daemon: a thread stuck in a hung host's call must not keep the process alive
        threading.Thread(target=self.work, name="observe", daemon=True).start()


def observe_hosts(
    hosts: list[tuple[str, str]],
    settings: ProbeSettings,
    threads: int,
    borrow: Callable[[str], Any] | None = None,
    known: Mapping[str, KnownHost] | None = None,
) -> list[RawHost]:
    """Observe ``hosts`` (name, URI) with up to ``threads`` threads; results in the same order.

    A thread per host that answers over a socket, and one for all in-process ones. With
    ``borrow`` (host name -> open connection, e.g. a ``ConnectionPool``'s ``get``) the hosts
    are observed over those connections, which stay open. With ``settings.compatibility``
    each host is asked the compatibility questions of the VMs observed so far. A host of
    ``known`` (by name) is not asked its lasting facts again.
    """
    if not hosts:
        return []
    libvirt.registerErrorHandler(lambda *_: None, None)  # errors are reported, not printed
    waiting = sum(1 for _, uri in hosts if not in_process(uri))
    if waiting:
        ensure_event_loop()  # keepalive on connections over a socket needs it
    questions = Questions() if settings.compatibility else None
    probes = [
        Probe(
            name=name,
            uri=uri,
            settings=settings,
            borrow=None if borrow is None else functools.partial(borrow, name),
            questions=questions,
            known=None if known is None else known.get(name),
        )
        for name, uri in hosts
    ]
    pool = _Pool(probes, settings.sample_interval)
    return pool.watch(max(1, min(threads, waiting + 1)))


_M_ARENA_MAX: Final = -8
"""glibc's ``mallopt`` parameter for the most malloc arenas (``malloc.h``)."""


def _one_malloc_arena() -> None:
    """Let the workers allocate in glibc's main malloc arena, as the main thread does.

    A thread's own arena is emptied and grown again around every host (a test-driver
    connection's whole state is freed when it closes): about 1.4M more instructions a host,
    2% of the work. It takes effect for threads that get an arena from now on, process-wide,
    so only the worker process sets it (not a long-running ``run`` with threads of its own);
    elsewhere than glibc there is no ``mallopt`` and nothing happens.
    """
    import ctypes  # the worker process's only

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, 1)


def child_main() -> None:
    """Run as ``python -m reconciler.adapters.libvirt.observe_pool`` by the observer.

    Reads ``(hosts, settings, threads)`` pickled on stdin, writes each host's result pickled
    on stdout, one after the other in the order of ``hosts`` (so neither side holds all of
    them pickled at once), and exits at once: threads stuck in a hung host's call must not
    hold it open.
    It runs without the cyclic garbage collector: what it allocates is freed by reference
    counting or at its exit, and the collector would only rescan it.
    """
    import pickle  # the worker process's only

    gc.disable()
    _one_malloc_arena()
    hosts, settings, threads = pickle.load(sys.stdin.buffer)
    results = observe_hosts(hosts, settings, threads)
    results.reverse()
    out = sys.stdout.buffer
    while results:
        pickle.dump(results.pop(), out, pickle.HIGHEST_PROTOCOL)
    out.flush()
    os._exit(0)


if __name__ == "__main__":
    child_main()
