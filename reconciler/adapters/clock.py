"""The machine's clock: the engine's ``Clock`` port (``engine/ports.py``) as the time now."""

from __future__ import annotations

from datetime import UTC, datetime


class SystemClock:
    def now(self) -> datetime:
        """The current time, in UTC."""
        return datetime.now(UTC)
