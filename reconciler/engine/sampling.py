"""``run``'s own load samples, taken between (and during) its rounds: the window
``spec.load.source: samples`` decides on.

A thread of its own, so a round that migrates for minutes leaves no gap in the window. Every
``sampleEvery`` it reads every host once (``LoadSampler``), adds the readings to the window
kept in the state directory and drops what is older (``reconciler.core.load_samples``). The
policy is asked each time (``current``): with ``basis: allocated`` or ``source: prometheus``
nothing is sampled. A sample that fails is logged and the next one is taken on time; a host
that did not answer leaves a gap in its VMs' windows, never a zero.

With ``statistic: forecast`` it also keeps the history the forecast learns from
(``history``): at the first sample after each bucket ends (5 minutes, or a 48th of a
shorter seasonal period), the bucket's mean is
folded from the readings (``reconciler.core.load_history``) and the history written. The
history is read once, at the first sample, and kept in memory after.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from reconciler.core import load_history, load_samples
from reconciler.core.load_samples import added
from reconciler.engine.loop import Sleep, real_sleep
from reconciler.engine.ports import Clock, LoadHistoryStore, LoadSampler, LoadSampleStore
from reconciler.errors import ReconcilerError
from reconciler.model.load import LoadSamples, LoadSpec, Statistic

log = logging.getLogger(__name__)

IDLE = 30.0
"""Seconds between looks at the policy while it asks for no samples."""


@dataclass
class SampleKeeper:
    cluster: str
    current: Callable[[], tuple[LoadSpec, LoadSampler] | None]
    """The load settings and the sampler now; None while nothing is to be sampled."""
    store: LoadSampleStore
    clock: Clock
    sleep: Sleep = real_sleep
    history: LoadHistoryStore | None = None
    """Where the forecast's history is kept (``statistic: forecast``); None: not kept."""
    asleep: Callable[[], Collection[str]] | None = None
    """Hosts powered off or being switched on purpose (power saving): their silence is no
    warning."""
    samples: int = 0
    _hosts_down: frozenset[str] = field(default_factory=frozenset)
    _history: load_history.LoadHistory | None = None
    _history_read: bool = False

    def run(self, stop: threading.Event) -> None:
        """Sample until ``stop`` is set."""
        while not stop.is_set():
            started = self.clock.now()
            every = self.once()
            spent = (self.clock.now() - started).total_seconds()
            self.sleep(max(0.0, every - spent), stop)

    def once(self) -> float:
        """One sample, if the policy asks for one; the seconds until the next."""
        try:
            got = self.current()
        except ReconcilerError as err:  # an invalid policy: the rounds report it
            log.debug("not sampling: %s", err)
            return IDLE
        if got is None:
            return IDLE
        spec, sampler = got
        every = spec.sample_every.total_seconds()
        readings = sampler.sample()
        down = frozenset(s.host for s in readings if s.error is not None)
        asleep = self._asleep() if down - self._hosts_down else frozenset()
        for s in readings:
            if s.error is not None and s.host not in self._hosts_down:
                if s.host in asleep:
                    log.info("load sample of %s: none, asleep on purpose (power saving)", s.host)
                else:
                    log.warning("load sample of %s: %s", s.host, s.error)
        for host in self._hosts_down - down:
            log.info("load sample of %s: answering again", host)
        self._hosts_down = down
        try:
            kept = self.store.load()
            taken = self.clock.now().timestamp()
            now = added(kept, self.cluster, spec, readings, taken)
            self.store.save(now)
        except ReconcilerError as err:
            log.warning("load sample not kept: %s", err)
            return every
        self.samples += 1
        if self.history is not None and spec.statistic is Statistic.FORECAST:
            self._fold(self.history, spec, now, taken)
        return every

    def _asleep(self) -> frozenset[str]:
        if self.asleep is None:
            return frozenset()
        try:
            return frozenset(self.asleep())
        except ReconcilerError as err:  # the power book unreadable: warn as for any host
            log.debug("hosts asleep not known: %s", err)
            return frozenset()

    def _fold(
        self, store: LoadHistoryStore, spec: LoadSpec, now: LoadSamples, taken: float
    ) -> None:
        """The buckets completed since the last sample, into the history."""
        try:
            if not self._history_read:
                self._history = store.load()
                self._history_read = True
            uuids = {name: series.uuid for name, series in now.vms.items()}
            new = load_history.folded(
                self._history, self.cluster, spec, load_samples.readings(now), uuids, taken
            )
            if new is not None:
                store.save(new)
                self._history = new
        except ReconcilerError as err:
            log.warning("load history not kept: %s", err)
