"""Watts drawn by a host at a CPU load, from its kind's power curve (linear between points)."""

from __future__ import annotations

from collections.abc import Sequence


def watts(curve: Sequence[float], utilisation: float) -> float:
    """The draw at ``utilisation`` (0-1, clamped) on an 11-point curve (0, 10, ..., 100%)."""
    u = min(1.0, max(0.0, utilisation)) * 10
    low = min(9, int(u))
    return curve[low] + (curve[low + 1] - curve[low]) * (u - low)
