"""Cooldown and minUptime on fixed examples: held until exactly the end of the hold, free from
then on, with what holds it in words; a VM's age from libvirt's uptime or from when it was seen."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from reconciler.core.vm_facts import age_of, balance_hold
from reconciler.model.history import History
from reconciler.model.policy import BalancePolicySpec
from reconciler.model.snapshot import ReconcilerState, VmState
from tests.core.builders import NOW, vm

SPEC = BalancePolicySpec.model_validate({"cooldown": "6h", "minUptime": "10m"})
SINCE = NOW - timedelta(days=1)
"""When the cluster was first observed."""
SEEN = History(observed_since=SINCE, last_round_at=NOW - timedelta(minutes=15))


def _unmeasured(first_seen: datetime | None = None) -> VmState:
    """A VM libvirt reports no uptime for, first seen by a round at ``first_seen``."""
    v = vm("x", "a")
    return v.model_copy(
        update={"uptime": None, "reconciler": ReconcilerState(first_seen=first_seen)}
    )


def _hold(v: VmState, now: datetime = NOW, history: History = SEEN) -> str | None:
    return balance_hold(v, SPEC, history, NOW, now)


# --- age -----------------------------------------------------------------------------------


def test_libvirt_s_uptime_counts_with_the_time_since_the_observation() -> None:
    v = vm("x", "a", uptime=100)
    assert age_of(v, SEEN, NOW, NOW + timedelta(seconds=50)) == timedelta(seconds=150)
    assert age_of(v, History(), NOW, NOW) == timedelta(seconds=100)


def test_an_observation_taken_after_now_adds_nothing_to_the_uptime() -> None:
    v = vm("x", "a", uptime=100)
    assert age_of(v, SEEN, NOW, NOW - timedelta(seconds=50)) == timedelta(seconds=100)


def test_without_any_round_every_vm_without_uptime_is_old() -> None:
    assert age_of(_unmeasured(NOW), History(), NOW, NOW) is None


@pytest.mark.parametrize(
    ("first_seen", "age"),
    [
        (SINCE - timedelta(seconds=1), None),
        (SINCE, None),
        (SINCE + timedelta(seconds=1), timedelta(days=1, seconds=-1)),
        (NOW - timedelta(minutes=3), timedelta(minutes=3)),
        (NOW + timedelta(minutes=3), timedelta(0)),
    ],
)
def test_a_vm_first_seen_by_the_first_round_is_old_and_one_seen_later_counts_from_then(
    first_seen: datetime, age: timedelta | None
) -> None:
    assert age_of(_unmeasured(first_seen), SEEN, NOW, NOW) == age


@pytest.mark.parametrize(
    ("last_round", "age"),
    [
        (None, None),
        (SINCE - timedelta(seconds=1), None),
        (SINCE, timedelta(days=1)),
        (NOW - timedelta(minutes=15), timedelta(minutes=15)),
        (NOW + timedelta(minutes=1), timedelta(0)),
    ],
)
def test_a_vm_not_stamped_yet_counts_from_the_last_round(
    last_round: datetime | None, age: timedelta | None
) -> None:
    history = History(observed_since=SINCE, last_round_at=last_round)
    assert age_of(_unmeasured(), history, NOW, NOW) == age


# --- holds ---------------------------------------------------------------------------------


def test_an_old_vm_never_moved_and_never_failed_is_free() -> None:
    assert _hold(vm("x", "a", uptime=600)) is None
    assert _hold(_unmeasured(SINCE)) is None


@pytest.mark.parametrize(
    ("moved_ago", "held"),
    [(timedelta(hours=6) - timedelta(seconds=1), True), (timedelta(hours=6), False)],
)
def test_a_moved_vm_is_held_until_exactly_the_end_of_its_cooldown(
    moved_ago: timedelta, held: bool
) -> None:
    at = NOW - moved_ago
    hold = _hold(vm("x", "a", last_moved_at=at))
    assert hold == (f"moved at {at.isoformat()}, within the cooldown" if held else None)


@pytest.mark.parametrize(
    ("failed_ago", "held"),
    [(timedelta(hours=6) - timedelta(seconds=1), True), (timedelta(hours=6), False)],
)
def test_a_vm_whose_move_failed_is_held_until_exactly_the_end_of_its_cooldown(
    failed_ago: timedelta, held: bool
) -> None:
    at = NOW - failed_ago
    hold = _hold(vm("x", "a", failed_at=at))
    assert hold == (f"a move failed at {at.isoformat()}, within the cooldown" if held else None)


def test_a_recent_move_is_named_before_a_recent_failure() -> None:
    moved, failed = NOW - timedelta(hours=1), NOW - timedelta(hours=2)
    hold = _hold(vm("x", "a", last_moved_at=moved, failed_at=failed))
    assert hold == f"moved at {moved.isoformat()}, within the cooldown"


def test_an_old_move_does_not_hide_a_recent_failure() -> None:
    moved, failed = NOW - timedelta(hours=7), NOW - timedelta(hours=1)
    hold = _hold(vm("x", "a", last_moved_at=moved, failed_at=failed))
    assert hold == f"a move failed at {failed.isoformat()}, within the cooldown"


@pytest.mark.parametrize(
    ("uptime", "hold"),
    [
        (0, "running for 0s, less than minUptime"),
        (599, "running for 599s, less than minUptime"),
        (599.9, "running for 599s, less than minUptime"),
        (600, None),
    ],
)
def test_a_vm_is_held_until_it_has_run_exactly_min_uptime(uptime: float, hold: str | None) -> None:
    assert _hold(vm("x", "a", uptime=uptime)) == hold


def test_a_vm_moved_long_ago_is_still_held_by_min_uptime() -> None:
    v = vm("x", "a", uptime=60, last_moved_at=NOW - timedelta(days=2))
    assert _hold(v) == "running for 60s, less than minUptime"
    assert _hold(v, now=NOW + timedelta(seconds=540)) is None


def test_a_vm_without_uptime_is_held_from_when_it_was_first_seen() -> None:
    v = _unmeasured(NOW - timedelta(minutes=9))
    assert _hold(v) == "running for 540s, less than minUptime"
    assert _hold(v, now=NOW + timedelta(minutes=1)) is None
