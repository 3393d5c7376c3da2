"""What ``/healthz`` answers: 200 while the loop makes progress, 503 with the reason when not.

Stalled (an invalid desired state, or the round's own Stalled condition), failing (the same
error several rounds in a row) and duplicated (a VM on two hosts, the round's Duplicated
condition) are unhealthy; a standby without the lease is healthy (it is
doing its job), and so is a loop still waiting for its first complete observation.
"""

from __future__ import annotations

import threading
from datetime import datetime

from reconciler.model.status import ReconcileStatus


class Health:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._healthy = True
        self._state = "starting"
        self._reason = "Starting"
        self._message = "no round has run yet"
        self._next: datetime | None = None

    def _set(self, healthy: bool, state: str, reason: str, message: str) -> None:
        with self._lock:
            self._healthy, self._state, self._reason, self._message = (
                healthy,
                state,
                reason,
                message,
            )

    def ok(self, status: ReconcileStatus, *, waiting: bool = False) -> None:
        if waiting:
            self._set(True, "waiting", "WaitingForObservation", "no complete observation yet")
            return
        ready = next((c for c in status.conditions if c.type.value == "Ready"), None)
        reason = ready.reason if ready is not None else "Reconciled"
        self._set(True, "ok", reason, ready.message if ready is not None else "")

    def standby(self, holder: str | None) -> None:
        self._set(
            True, "standby", "Standby", f"the lease is held by {holder or 'another instance'}"
        )

    def leading(self) -> None:
        """The lease was just taken: no longer a standby, though no round of its own has ended
        (``reconciler_leader`` already reads 1; /healthz must not still say standby)."""
        with self._lock:
            if self._state != "standby":
                return
        self._set(True, "starting", "LeaseAcquired", "holds the lease; its first round is running")

    def stalled(self, reason: str, message: str) -> None:
        self._set(False, "stalled", reason, message)

    def duplicated(self, message: str) -> None:
        self._set(False, "duplicated", "Duplicated", message)

    def failing(self, count: int, message: str) -> None:
        self._set(False, "failing", "RoundsFailing", f"{count} rounds in a row failed: {message}")

    def next_round(self, when: datetime) -> None:
        with self._lock:
            self._next = when

    @property
    def healthy(self) -> bool:
        with self._lock:
            return self._healthy

    def report(self) -> dict[str, object]:
        """The body of /healthz, as JSON-ready data."""
        with self._lock:
            return {
                "healthy": self._healthy,
                "state": self._state,
                "reason": self._reason,
                "message": self._message,
                "nextRoundAt": self._next.isoformat() if self._next else None,
            }
