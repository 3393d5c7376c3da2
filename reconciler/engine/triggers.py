"""What wakes the loop before its interval: desired state changed, a webhook, a new leader.

``Wakeup`` collects trigger reasons from any thread; the loop takes them all at once, so a
burst of file events or webhooks becomes one round. ``FolderWatcher`` (watchfiles) and
``RevisionPoller`` (a repository's head, every ``--poll`` seconds) run in threads of their own
and only call ``Wakeup.trigger``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from reconciler.errors import ReconcilerError

log = logging.getLogger(__name__)

DESIRED_CHANGED = "desired-state-changed"
WEBHOOK = "webhook"
LEADER = "leader"
SCHEDULE = "schedule"
OBSERVED = "observed"
WINDOW = "window"
ROLLOUT = "rollout"
"""A rollout asked to be looked at again (a ready check, a settle time, a step's timeout)."""
LEASE_RETRY = "lease-retry"
"""The last round should have acted but could not confirm the lease; it is tried again soon."""


class Wakeup:
    """Pending trigger reasons and an event set while any is pending."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reasons: list[str] = []
        self.event = threading.Event()

    def trigger(self, reason: str) -> None:
        with self._lock:
            if reason not in self._reasons:
                self._reasons.append(reason)
            self.event.set()

    def take(self) -> list[str]:
        """Every reason pending, oldest first; clears them."""
        with self._lock:
            reasons, self._reasons = self._reasons, []
            self.event.clear()
            return reasons


class FolderWatcher:
    """Triggers a round when a file under ``folder`` changes (debounced)."""

    def __init__(
        self,
        folder: Path,
        wakeup: Wakeup,
        *,
        debounce_ms: int = 200,
        step_ms: int = 50,
    ) -> None:
        self.folder = folder
        self.wakeup = wakeup
        self.debounce_ms = debounce_ms
        self.step_ms = step_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="folder-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        # imported here: apply and drain hold the cluster through this module but never watch
        from watchfiles import watch

        try:
            for changes in watch(
                self.folder,
                stop_event=self._stop,
                debounce=self.debounce_ms,
                step=self.step_ms,
                rust_timeout=1000,
                yield_on_timeout=False,
                raise_interrupt=False,
            ):
                names = sorted({Path(p).name for _, p in changes})
                log.info("desired state changed: %s", ", ".join(names))
                self.wakeup.trigger(DESIRED_CHANGED)
        except Exception:  # the loop still runs on its interval; say why reactions stopped
            log.exception("watching %s failed; rounds continue on the interval only", self.folder)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class RevisionPoller:
    """Triggers a round when ``revision()`` (a repository's head) changes; polls every ``every``."""

    def __init__(self, revision: Callable[[], str], wakeup: Wakeup, *, every: float) -> None:
        self.revision = revision
        self.wakeup = wakeup
        self.every = every
        self.last: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="revision-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def poll_once(self) -> bool:
        """Look once; True when the revision changed since the last look."""
        try:
            rev = self.revision()
        except ReconcilerError as err:
            log.warning("polling the repository failed: %s", err)
            return False
        changed = self.last is not None and rev != self.last
        self.last = rev
        if changed:
            log.info("repository moved to %s", rev[:12])
            self.wakeup.trigger(DESIRED_CHANGED)
        return changed

    def _run(self) -> None:
        self.poll_once()  # the baseline: the loop's first round reads this revision anyway
        while not self._stop.wait(self.every):
            self.poll_once()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
