"""Windows on fixed examples: open at the minute they open, closed at the minute they end,
read in their zone; what a window that cannot be read says; which opening comes next."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from reconciler.core.windows import mode_now, next_window_opening, window_open, window_problems
from reconciler.model.policy import BalancePolicySpec, Mode, Window

HOUR = timedelta(hours=1)
NIGHTLY = Window(schedule="0 23 * * *", duration=HOUR)  # 23:00 to midnight, UTC


def _at(day: int, hour: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime(2024, 3, day, hour, minute, second, tzinfo=UTC)


def _unchecked(schedule: str, duration: timedelta, timezone: str | None = None) -> Window:
    """A window validation would refuse, as an old status or a hand-made object may hold it."""
    return Window.model_construct(schedule=schedule, duration=duration, timezone=timezone)


@pytest.mark.parametrize(
    ("now", "is_open"),
    [
        (_at(4, 22, 59, 59), False),
        (_at(4, 23), True),
        (_at(4, 23, 30), True),
        (_at(4, 23, 59, 59), True),
        (_at(5, 0), False),
        (_at(5, 0, 0, 1), False),
    ],
)
def test_a_window_that_ends_at_midnight_opens_at_its_minute_and_closes_at_midnight(
    now: datetime, is_open: bool
) -> None:
    assert window_open(NIGHTLY, now) is is_open


def test_a_window_is_read_in_its_own_zone() -> None:
    berlin = Window(schedule="0 23 * * *", duration=HOUR, timezone="Europe/Berlin")
    assert window_open(berlin, _at(4, 22, 30))  # 23:30 in Berlin (UTC+1 in March, before DST)
    assert not window_open(berlin, _at(4, 23, 30))


def test_a_window_in_an_unknown_or_unreadable_zone_never_opens() -> None:
    assert not window_open(_unchecked("* * * * *", HOUR, "Mars/Base"), _at(4, 12))
    assert not window_open(_unchecked("* * * * *", HOUR, "../etc/passwd"), _at(4, 12))


def test_a_window_of_no_length_never_opens() -> None:
    assert not window_open(_unchecked("* * * * *", timedelta(0)), _at(4, 12))
    assert not window_open(_unchecked("* * * * *", -HOUR), _at(4, 12))


def test_a_window_on_a_day_that_never_comes_never_opens() -> None:
    assert not window_open(_unchecked("0 0 30 2 *", timedelta(days=366)), _at(4, 12))


def _spec(mode: Mode, windows: list[Window] | None) -> BalancePolicySpec:
    return BalancePolicySpec(mode=mode, windows=windows)


@pytest.mark.parametrize("mode", [Mode.OBSERVE, Mode.PROPOSE])
def test_a_mode_other_than_apply_stays_as_it_is_with_or_without_windows(mode: Mode) -> None:
    assert mode_now(_spec(mode, None), _at(4, 23, 30)) is mode
    assert mode_now(_spec(mode, [NIGHTLY]), _at(4, 23, 30)) is mode
    assert next_window_opening(_spec(mode, [NIGHTLY]), _at(4, 12)) is None


def test_apply_applies_inside_a_window_and_proposes_outside() -> None:
    spec = _spec(Mode.APPLY, [NIGHTLY])
    assert mode_now(spec, _at(4, 23, 30)) is Mode.APPLY
    assert mode_now(spec, _at(4, 12)) is Mode.PROPOSE
    assert mode_now(_spec(Mode.APPLY, None), _at(4, 12)) is Mode.APPLY


def test_the_next_opening_is_the_earliest_of_all_windows() -> None:
    early = Window(schedule="0 14 * * *", duration=HOUR)
    spec = _spec(Mode.APPLY, [NIGHTLY, early])
    assert next_window_opening(spec, _at(4, 12)) == _at(4, 14)
    assert next_window_opening(spec, _at(4, 15)) == _at(4, 23)
    assert next_window_opening(spec, _at(4, 23)) == _at(5, 14)


def test_the_next_opening_is_given_in_the_window_s_zone() -> None:
    berlin = Window(schedule="0 23 * * *", duration=HOUR, timezone="Europe/Berlin")
    opening = next_window_opening(_spec(Mode.APPLY, [berlin]), _at(4, 12))
    assert opening == _at(4, 22)


def test_windows_that_cannot_be_read_are_passed_over_for_the_next_opening() -> None:
    spec = _spec(
        Mode.APPLY,
        [
            _unchecked("0 0 30 2 *", HOUR),
            _unchecked("0 1 * * *", HOUR, "Mars/Base"),
            NIGHTLY,
            _unchecked("61 * * * *", HOUR),
        ],
    )
    assert next_window_opening(spec, _at(4, 12)) == _at(4, 23)


@pytest.mark.parametrize("windows", [None, []])
def test_without_windows_there_is_no_opening_to_wait_for(windows: list[Window] | None) -> None:
    assert next_window_opening(_spec(Mode.APPLY, windows), _at(4, 12)) is None


def test_each_window_that_cannot_be_read_is_named_with_how_to_fix_it() -> None:
    assert window_problems(
        [
            NIGHTLY,
            _unchecked("0 22 * * *", HOUR, "Europe/Berln"),
            _unchecked("61 * * * *", HOUR),
            _unchecked("0 22 * * *", timedelta(0)),
            _unchecked("0 22 * * *", HOUR, "UTC"),
        ]
    ) == [
        "spec.windows[1].timezone: unknown time zone 'Europe/Berln'; did you mean "
        "'Europe/Berlin'?, or remove it for UTC",
        "spec.windows[2].schedule '61 * * * *': the minute field '61' is out of range "
        '(minutes are 0-59); write minute hour day-of-month month day-of-week, e.g. "0 22 * * 1-5"',
        "spec.windows[3].duration must be longer than 0",
    ]


def test_no_windows_have_no_problems() -> None:
    assert window_problems(None) == []
    assert window_problems([]) == []


def test_when_no_window_can_be_read_there_is_no_opening_to_wait_for() -> None:
    spec = _spec(
        Mode.APPLY, [_unchecked("0 0 30 2 *", HOUR), _unchecked("0 1 * * *", HOUR, "Mars")]
    )
    assert next_window_opening(spec, _at(4, 12)) is None
