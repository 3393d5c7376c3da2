"""A duration's bounds on fixed examples: each bound itself is accepted, the next value past it
is refused with a message naming the value as written and the bound."""

from __future__ import annotations

from datetime import timedelta

import pytest

from reconciler.model.quantity import MAX_DURATION, duration_in_bounds, parse_duration

BOUNDS = {"low": timedelta(seconds=10), "high": timedelta(hours=1)}


def check(value: object, *, above: bool = False, **messages: str) -> timedelta:
    return duration_in_bounds(
        value,
        above=above,
        too_short=messages.get("too_short"),
        too_long=messages.get("too_long"),
        **BOUNDS,
    )


def test_both_bounds_are_accepted() -> None:
    assert check("10s") == timedelta(seconds=10)
    assert check("1h") == timedelta(hours=1)
    assert check(timedelta(minutes=5)) == timedelta(minutes=5)


def test_past_the_high_bound_is_too_long_shown_as_written_without_spaces() -> None:
    with pytest.raises(ValueError, match=r"^3601s is too long; use at most 1h$"):
        check(" 3601s ")


def test_below_the_low_bound_is_too_short() -> None:
    with pytest.raises(ValueError, match=r"^9s is too short; use at least 10s$"):
        check("9s")


def test_an_excluded_low_bound_refuses_the_bound_itself() -> None:
    assert check("11s", above=True) == timedelta(seconds=11)
    with pytest.raises(ValueError, match=r"^10s is too short; use more than 10s$"):
        check("10s", above=True)


def test_a_field_s_own_messages_replace_the_default_ones() -> None:
    with pytest.raises(ValueError, match=r"^2h: too long for a lease$"):
        check("2h", too_long="{value}: too long for a lease")
    with pytest.raises(ValueError, match=r"^1s: too short for a lease$"):
        check("1s", too_short="{value}: too short for a lease")


def test_a_timedelta_and_a_number_are_shown_as_written() -> None:
    with pytest.raises(ValueError, match=r"^2h is too long"):
        check(timedelta(hours=2))
    with pytest.raises(ValueError, match=r"^5 seconds is too short"):
        check(5)


def test_the_longest_duration_is_accepted_and_one_second_more_is_refused() -> None:
    assert parse_duration("3650d") == MAX_DURATION
    with pytest.raises(ValueError, match=r"^3650d1s is too long; use at most 3650d$"):
        parse_duration("3650d1s")


def test_a_duration_of_another_type_is_refused_saying_how_to_write_one() -> None:
    with pytest.raises(ValueError, match=r"^a duration must be a string such as 90s, 15m"):
        parse_duration([90])
