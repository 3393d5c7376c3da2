"""The one signal handler of the commands that act: first SIGINT/SIGTERM stops, second aborts.

The first signal starts nothing more (``stop`` is set and ``on_stop`` runs, e.g. the loop's
stop); running migrations end on their own. A second one sets ``abort``: running migrations
are aborted and the VMs stay on their sources. Before anything acts (``acting`` False: while
observing, planning or at the confirmation prompt) a signal simply ends the command, as
KeyboardInterrupt, when ``interrupt_before_acting`` is set.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType


class Signals:
    def __init__(
        self,
        *,
        stop: threading.Event | None = None,
        abort: threading.Event | None = None,
        on_stop: Callable[[], None] | None = None,
        interrupt_before_acting: bool = False,
    ) -> None:
        self.stop = stop or threading.Event()
        self.abort = abort or threading.Event()
        self.on_stop = on_stop
        self.interrupt_before_acting = interrupt_before_acting
        self.received: int | None = None
        self.acting = not interrupt_before_acting

    def handle(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if not self.acting:
            self.received = signum
            raise KeyboardInterrupt
        if self.stop.is_set():
            self.abort.set()
        self.received = self.received or signum
        self.stop.set()
        if self.on_stop is not None:
            self.on_stop()

    @contextmanager
    def installed(self) -> Iterator[None]:
        old = {s: signal.signal(s, self.handle) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)
