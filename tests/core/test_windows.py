"""mode_now: apply only inside windows, read in their time zone; unreadable windows never open."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from reconciler.core.windows import mode_now, next_window_opening, window_open, window_problems
from reconciler.model.policy import BalancePolicySpec, Mode, Window

times = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2035, 1, 1), timezones=st.just(UTC)
)
durations = st.integers(min_value=1, max_value=23 * 60).map(lambda m: timedelta(minutes=m))


def _spec(mode: Mode, windows: list[Window] | None) -> BalancePolicySpec:
    return BalancePolicySpec(mode=mode, windows=windows)


@given(now=times, hour=st.integers(0, 23), minute=st.integers(0, 59), duration=durations)
def test_daily_window_is_open_exactly_within_duration_of_its_opening(
    now: datetime, hour: int, minute: int, duration: timedelta
) -> None:
    window = Window(schedule=f"{minute} {hour} * * *", duration=duration)
    opening = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if opening > now:
        opening -= timedelta(days=1)
    assert window_open(window, now) == (now - opening < duration)
    expected = Mode.APPLY if now - opening < duration else Mode.PROPOSE
    assert mode_now(_spec(Mode.APPLY, [window]), now) is expected


@given(
    now=times,
    windows=st.none()
    | st.lists(st.just(Window(schedule="0 0 1 1 *", duration=timedelta(hours=1)))),
)
def test_observe_and_propose_ignore_windows(now: datetime, windows: list[Window] | None) -> None:
    assert mode_now(_spec(Mode.OBSERVE, windows), now) is Mode.OBSERVE
    assert mode_now(_spec(Mode.PROPOSE, windows), now) is Mode.PROPOSE


@given(now=times)
def test_apply_without_windows_always_applies_and_with_an_empty_list_never(now: datetime) -> None:
    assert mode_now(_spec(Mode.APPLY, None), now) is Mode.APPLY
    assert mode_now(_spec(Mode.APPLY, []), now) is Mode.PROPOSE


@given(now=times, duration=durations)
def test_any_open_window_is_enough(now: datetime, duration: timedelta) -> None:
    # 30 February: validation refuses it, so build it unchecked, as an old status might hold it
    never = Window.model_construct(schedule="0 0 30 2 *", duration=duration, timezone="UTC")
    always = Window(schedule="* * * * *", duration=timedelta(minutes=1))
    assert mode_now(_spec(Mode.APPLY, [never]), now) is Mode.PROPOSE
    assert mode_now(_spec(Mode.APPLY, [never, always]), now) is Mode.APPLY


@given(now=times, duration=durations)
def test_next_opening_is_after_now_and_opens_the_window(now: datetime, duration: timedelta) -> None:
    window = Window(schedule="15 3 * * 1-5", duration=duration)
    opening = next_window_opening(_spec(Mode.APPLY, [window]), now)
    assert opening is not None
    assert opening > now
    assert window_open(window, opening)
    assert not window_open(window, opening - timedelta(seconds=1))


def test_window_follows_its_time_zone_across_daylight_saving() -> None:
    window = Window(schedule="0 22 * * *", duration=timedelta(hours=1), timezone="Europe/Berlin")
    berlin = ZoneInfo("Europe/Berlin")
    winter = datetime(2024, 1, 15, 22, 30, tzinfo=berlin)  # 21:30 UTC
    summer = datetime(2024, 7, 15, 22, 30, tzinfo=berlin)  # 20:30 UTC
    assert window_open(window, winter.astimezone(UTC))
    assert window_open(window, summer.astimezone(UTC))
    assert not window_open(window, datetime(2024, 7, 15, 22, 30, tzinfo=UTC))
    utc_window = Window(schedule="0 22 * * *", duration=timedelta(hours=1))
    assert window_open(utc_window, datetime(2024, 7, 15, 22, 30, tzinfo=UTC))
    assert not window_open(utc_window, summer)


def test_unreadable_windows_never_open_and_are_named() -> None:
    bad_zone = Window(schedule="* * * * *", duration=timedelta(hours=1), timezone="Mars/Base")
    bad_cron = Window(schedule="61 * * * *", duration=timedelta(hours=1))
    now = datetime(2024, 1, 1, tzinfo=UTC)
    assert mode_now(_spec(Mode.APPLY, [bad_zone, bad_cron]), now) is Mode.PROPOSE
    problems = window_problems([bad_zone, bad_cron])
    assert len(problems) == 2
    assert "spec.windows[0].timezone: unknown time zone 'Mars/Base'" in problems[0]
    assert "spec.windows[1].schedule '61 * * * *'" in problems[1]
    assert window_problems([Window(schedule="0 2 * * *", duration=timedelta(hours=1))]) == []
