"""Bounded waits: a condition polled until it holds or its time is up.

What a test waits for happens in another process or thread (a daemon answering, a killed
process ending, a round written), and on a loaded machine it may take many seconds; every
wait is bounded, so a test that waits for something that never happens fails, not hangs.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def waited(check: Callable[[], object], timeout: float, *, every: float = 0.1) -> float | None:
    """Seconds until ``check()`` held, polled every ``every`` seconds; None when it did not
    within ``timeout`` (checked once more at the end, so a slow poll cannot miss it)."""
    start = time.monotonic()
    while True:
        if check():
            return time.monotonic() - start
        if time.monotonic() - start >= timeout:
            return None
        time.sleep(every)


def wait_for(
    check: Callable[[], object],
    timeout: float = 60,
    what: str = "the condition",
    *,
    every: float = 0.1,
    context: Callable[[], str] | None = None,
) -> float:
    """Seconds until ``check()`` holds; past ``timeout`` an AssertionError that names
    ``what`` and adds ``context()`` (e.g. the end of a process's log). The default timeout is
    generous: a process starting on a loaded machine may take many seconds to answer."""
    seconds = waited(check, timeout, every=every)
    if seconds is None:
        detail = f"\n{context()}" if context is not None else ""
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{detail}")
    return seconds
