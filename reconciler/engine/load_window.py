"""The load over the window, put into every observation a round takes.

``WindowedObserver`` wraps an ``Observer``: every ``observe()`` comes back with each VM's CPU
over the window, read by a ``LoadReader`` (``run``'s samples or Prometheus, in
``adapters/load/sources.py``) and put into the snapshot by ``reconciler.core.load_view``; every
fresh look at a few hosts (``observe_hosts``, admission's) comes back with the figures of that
round. A load source that fails never fails the round: its VMs' load is unknown, said in the
plan, and balance does not act on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from reconciler.core import load_view
from reconciler.engine.ports import LoadReader, Observer
from reconciler.model.load import LoadSpec, LoadView
from reconciler.model.snapshot import Snapshot


class WindowedObserver:
    """``inner``'s observations with the load over the window of ``spec`` from ``reader``."""

    def __init__(
        self,
        inner: Observer,
        spec: LoadSpec,
        reader: LoadReader,
        clock: Callable[[], datetime],
    ) -> None:
        self.inner = inner
        self.spec = spec
        self.reader = reader
        self.clock = clock
        self.view: LoadView | None = None

    def observe(self) -> Snapshot:
        snapshot = self.reader.window(self.inner.observe(), self.spec, self.clock())
        self.view = snapshot.load
        return snapshot

    def observe_hosts(self, hosts: Sequence[str]) -> Snapshot:
        return load_view.reapplied(self.inner.observe_hosts(hosts), self.view)


__all__ = ["WindowedObserver"]
