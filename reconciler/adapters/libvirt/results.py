"""The result of a move that ends without a live migration to verify: one that never started
(a host not in the cluster or not answering, the VM not found, a target that cannot take its
volumes), and a cold move, verified by its own checks.

A live migration's result is what both hosts show afterwards (``live_move``); these are timed
from the move's start like it.
"""

from __future__ import annotations

import time

from reconciler.model.migration import MigrationResult
from reconciler.model.plan import Move


def ended(
    move: Move,
    began: float,
    *,
    succeeded: bool = False,
    error: str | None = None,
    data_bytes: int | None = None,
) -> MigrationResult:
    """``move``'s result, timed from ``began`` (``time.monotonic``), running nowhere seen."""
    return MigrationResult(
        vm=move.vm,
        source=move.source,
        target=move.target,
        succeeded=succeeded,
        error=error,
        seconds=round(time.monotonic() - began, 3),
        data_bytes=data_bytes,
    )


def failed_before_start(move: Move, began: float, error: str) -> MigrationResult:
    """A move that failed before anything changed: the VM is where it was."""
    return ended(move, began, error=error)
