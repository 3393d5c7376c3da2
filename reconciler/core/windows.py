"""Which mode a policy is in at a given time: ``apply`` only inside its windows.

A window opens at each time its five-field cron ``schedule`` matches, read in the window's
``timezone`` (UTC when absent, daylight saving followed), and stays open for ``duration``.
Outside every window an ``apply`` policy proposes instead. Time is a parameter; a window that
cannot be read (bad cron, unknown zone) is never open, so it can never cause a migration, and
``window_problems`` names it for the caller to report.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from reconciler.model.policy import (
    CRON_EXAMPLE,
    BalancePolicy,
    BalancePolicySpec,
    Mode,
    Window,
    cron_problem,
    timezone_problem,
)


def _zone(window: Window) -> tzinfo | None:
    if window.timezone is None:
        return UTC
    try:
        return ZoneInfo(window.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def window_problems(windows: list[Window] | None) -> list[str]:
    """One sentence per window that cannot be read, naming it and how to fix it."""
    problems: list[str] = []
    for i, window in enumerate(windows or []):
        where = f"spec.windows[{i}]"
        zone = timezone_problem(window.timezone) if window.timezone is not None else None
        if zone is not None:
            problems.append(f"{where}.timezone: {zone}, or remove it for UTC")
        cron = cron_problem(window.schedule)
        if cron is not None:
            problems.append(f"{where}.schedule {window.schedule!r}: {cron}; {CRON_EXAMPLE}")
        if window.duration <= timedelta(0):
            problems.append(f"{where}.duration must be longer than 0")
    return problems


def _last_start(window: Window, now: datetime) -> datetime | None:
    """The latest opening of ``window`` in (now - duration, now], or None."""
    zone = _zone(window)
    if zone is None or window.duration <= timedelta(0):
        return None
    since = (now - window.duration).astimezone(zone)
    try:
        start = next(CronSim(window.schedule, since))
    except (CronSimError, StopIteration):
        return None
    return start if start <= now else None


def window_open(window: Window, now: datetime) -> bool:
    """True while ``now`` is within ``duration`` of one of the window's openings."""
    return _last_start(window, now) is not None


def _spec(policy: BalancePolicy | BalancePolicySpec) -> BalancePolicySpec:
    return policy.spec if isinstance(policy, BalancePolicy) else policy


def mode_now(policy: BalancePolicy | BalancePolicySpec, now: datetime) -> Mode:
    """The policy's mode at ``now``: ``apply`` outside every window is ``propose``."""
    spec = _spec(policy)
    if spec.mode is not Mode.APPLY or spec.windows is None:
        return spec.mode
    return Mode.APPLY if any(window_open(w, now) for w in spec.windows) else Mode.PROPOSE


def next_window_opening(
    policy: BalancePolicy | BalancePolicySpec, now: datetime
) -> datetime | None:
    """When the next window opens after ``now`` (for waking up then), or None."""
    spec = _spec(policy)
    if spec.mode is not Mode.APPLY or not spec.windows:
        return None
    openings: list[datetime] = []
    for window in spec.windows:
        zone = _zone(window)
        if zone is None:
            continue
        try:
            openings.append(next(CronSim(window.schedule, now.astimezone(zone))))
        except (CronSimError, StopIteration):
            continue
    return min(openings, default=None)
