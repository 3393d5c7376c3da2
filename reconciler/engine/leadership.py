"""One active instance per cluster: a thread that takes and renews the lease.

Like client-go's leader election: every ``retry_period`` the keeper calls ``Lease.acquire()``,
which takes a free or expired lease and renews one already held. Becoming the leader wakes the
loop; losing the lease (another holder, or no successful renewal within ``renew_deadline``)
sets the round's stop event at once, so no new move starts, and the loop falls back to standby.
Before each batch of migrations the round asks ``confirm()``, which re-reads the lease.

The keeper is also the ``Hold`` port of the acting path: ``valid()`` answers from this
process's monotonic clock alone (held, and the last confirmed renewal began less than
``renew_deadline`` ago), so no migration starts after the deadline whatever a renewal call to
the remote is doing. A keeper thread that dies stops acting for good: ``failure`` says why
and ``run`` turns /healthz 503.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from reconciler.engine.ports import CheckedLease
from reconciler.engine.triggers import LEADER, Wakeup
from reconciler.errors import ReconcilerError

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Keeps ``lease`` held while the process runs; ``held`` says whether it is."""

    def __init__(
        self,
        lease: CheckedLease,
        wakeup: Wakeup,
        round_stop: threading.Event,
        *,
        retry_period: float = 2.0,
        renew_deadline: float = 10.0,
        on_change: Callable[[bool], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lease = lease
        self.wakeup = wakeup
        self.round_stop = round_stop
        self.retry_period = retry_period
        self.renew_deadline = renew_deadline
        self.on_change = on_change
        self._monotonic = monotonic
        self._held = False
        self._last_renewed = 0.0
        self.failure: str | None = None
        """Why the keeper thread died; None while it runs."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    @property
    def held(self) -> bool:
        return self.valid()

    def valid(self) -> bool:
        """Held, renewed within the deadline by the monotonic clock; no I/O."""
        with self._lock:
            if not self._held or self.failure is not None:
                return False
            return self._monotonic() - self._last_renewed < self.renew_deadline

    def acquire(self, timeout: float = 0.0, sleep: Callable[[float], None] = time.sleep) -> bool:
        """Take the lease for a command, waiting up to ``timeout`` seconds; then keep it renewed
        in the background. False when another holder keeps it that long."""
        deadline = self._monotonic() + timeout
        while not self.tick():
            left = deadline - self._monotonic()
            if left <= 0:
                return False
            sleep(min(self.retry_period, left))
        if not self._thread.is_alive():
            self._thread.start()
        return True

    def start(self) -> None:
        self.tick()
        self._thread.start()

    def tick(self) -> bool:
        """One attempt to take or renew; returns whether the lease is held afterwards."""
        began = self._monotonic()  # a renewal counts from when it began: the safe side
        try:
            ok = self.lease.acquire()
        except ReconcilerError as err:
            log.warning("lease: %s", err)
            ok = False
        now = self._monotonic()
        with self._lock:
            was = self._held  # what this keeper last told: a lapse is reported as a loss below
            if ok:
                self._last_renewed = began
                self._held = True
            elif not was or now - self._last_renewed >= self.renew_deadline:
                self._held = False
            held = self._held
        if held and not was:
            log.info("lease taken: this instance is the active one")
            self.round_stop.clear()
            self.wakeup.trigger(LEADER)
        elif was and not held:
            self.round_stop.set()  # first: naming the holder is a call that may hang
            log.warning("lease lost to %s: no new moves start", self.holder() or "nobody")
        if held != was and self.on_change is not None:
            self.on_change(held)
        return held

    def confirm(self) -> bool:
        """Re-check before a batch: held and still ours when read again."""
        if not self.held:
            return False
        try:
            return self.lease.confirm()
        except ReconcilerError as err:
            log.warning("lease re-check failed: %s", err)
            return False

    def holder(self) -> str | None:
        try:
            return self.lease.holder()
        except ReconcilerError:
            return None

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.retry_period):
                self.tick()
        except Exception as err:  # a bug here must stop acting, never leave a stale "held"
            log.exception("the lease keeper failed: no new moves start")
            with self._lock:
                self.failure = f"{type(err).__name__}: {err}"
                was, self._held = self._held, False
            self.round_stop.set()
            if was and self.on_change is not None:
                self.on_change(False)

    def stop(self) -> None:
        """Stop renewing and release the lease, so a standby takes over at once."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.retry_period + 5)
        with self._lock:
            was, self._held = self._held, False
        try:
            self.lease.release()
        except ReconcilerError as err:
            log.warning("releasing the lease failed: %s", err)
        if was and self.on_change is not None:
            self.on_change(False)
