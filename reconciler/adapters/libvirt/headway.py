"""Whether a live migration is getting anywhere, judged reading by reading of its job: pure.

Pre-copy sends all memory once, then pass after pass what the guest wrote meanwhile. Within a
later pass the memory still to send always falls, to near nothing at its end, and jumps back at
the next pass; so a new low of it says nothing about convergence (the bottoms of passes that go
nowhere keep setting new lows by chance). Headway is, instead (``Headway.saw``):

- in the first pass, memory still to send reaching a new low (the first copy of everything);
- a later pass that starts with at least ``PASS_GAIN`` less to send than every pass before it;
- a rise of auto-converge's throttle (libvirt is slowing the guest down so the move converges);
- after the switch to post-copy, memory still to fetch reaching a new low.

Without libvirt's pass counter (``memory_iteration``) a new low of memory still to send counts,
as it always did. ``reconciler.core.convergence`` predicts moves by the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.core.convergence import PASS_GAIN


def _int(stats: Mapping[str, Any], key: str) -> int | None:
    value = stats.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass
class Headway:
    """What the readings of one migration showed so far."""

    post_copy: bool = False
    """Set once the migration switched to post-copy."""
    passes: int = 0
    """The highest pass seen."""
    throttle: int = 0
    """The highest auto-converge throttle seen, percent."""
    least: int | None = None
    """The least memory still to send seen in the current phase (first pass, or post-copy)."""
    least_start: int | None = None
    """The least memory a pass after the first started with (the first pass: all of it)."""

    def saw(self, stats: Mapping[str, Any]) -> bool:
        """Take one reading of ``virDomainGetJobStats``; whether it shows headway."""
        remaining = _int(stats, "memory_remaining")
        if remaining is None or not stats.get("memory_total"):
            return False
        throttle = _int(stats, "auto_converge_throttle") or 0
        raised = throttle > self.throttle
        self.throttle = max(self.throttle, throttle)
        iteration = _int(stats, "memory_iteration")
        if self.post_copy or iteration is None or iteration <= 1:
            if iteration is not None:
                self.passes = max(self.passes, iteration)
            lower = self.least is None or remaining < self.least
            if lower:
                self.least = remaining
            return lower or raised
        if iteration <= self.passes:
            return raised  # within a pass: its falling says nothing
        self.passes = iteration
        start = self.least_start
        if start is None:
            start = int(stats["memory_total"])
        gained = remaining <= start * (1 - PASS_GAIN)
        self.least_start = remaining if gained else start
        return gained or raised

    def switched(self) -> None:
        """The migration switched to post-copy: what is left now falls as the target fetches."""
        self.post_copy, self.least = True, None
