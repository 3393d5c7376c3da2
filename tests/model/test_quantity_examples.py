"""Sizes and durations on fixed examples: every unit's factor, each bound itself and the value
just past it, what a refusal says in full, and how a value is written back."""

from __future__ import annotations

import math
import re
from contextlib import AbstractContextManager
from datetime import timedelta

import pytest

from reconciler.model.quantity import (
    MAX_DURATION,
    MAX_SIZE,
    duration_in_bounds,
    format_duration,
    format_size,
    parse_duration,
    parse_size,
)

KIB, MIB, GIB, TIB = 1024, 1024**2, 1024**3, 1024**4
TOO_LARGE = "is too large; use at most 1024TiB (1PiB)"


def _says(message: str) -> AbstractContextManager[pytest.ExceptionInfo[ValueError]]:
    """A ValueError whose text is exactly ``message``."""
    return pytest.raises(ValueError, match=f"^{re.escape(message)}$")


DURATION_HINT = "write a number and a unit: ms, s, m, h, d or w (e.g. 90s, 15m, 6h, 1h30m)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3B", 3),
        ("3KiB", 3 * KIB),
        ("3MiB", 3 * MIB),
        ("3GiB", 3 * GIB),
        ("3TiB", 3 * TIB),
        ("3K", 3 * 1000),
        ("3KB", 3 * 1000),
        ("3M", 3 * 1000**2),
        ("3MB", 3 * 1000**2),
        ("3G", 3 * 1000**3),
        ("3GB", 3 * 1000**3),
        ("3T", 3 * 1000**4),
        ("3TB", 3 * 1000**4),
        ("0.5KiB", 512),
        ("1.75KiB", 1792),
    ],
)
def test_each_size_unit_multiplies_by_its_own_factor(text: str, expected: int) -> None:
    assert parse_size(text) == expected


def test_a_fraction_of_a_byte_is_dropped() -> None:
    assert parse_size("1.9B") == 1


def test_zero_bytes_is_a_size() -> None:
    assert parse_size(0) == 0
    assert parse_size("0GiB") == 0


def test_the_largest_size_is_accepted_as_bytes_and_as_text() -> None:
    assert parse_size(MAX_SIZE) == MAX_SIZE
    assert parse_size("1024TiB") == MAX_SIZE


def test_one_byte_past_the_largest_size_is_too_large() -> None:
    with pytest.raises(ValueError, match=rf"^{MAX_SIZE + 1} bytes {re.escape(TOO_LARGE)}$"):
        parse_size(MAX_SIZE + 1)


def test_text_past_the_largest_size_is_too_large_shown_without_spaces() -> None:
    with pytest.raises(ValueError, match=rf"^1024\.5TiB {re.escape(TOO_LARGE)}$"):
        parse_size(" 1024.5TiB ")


def test_a_size_of_hundreds_of_digits_is_too_large_not_an_overflow() -> None:
    with pytest.raises(ValueError, match=re.escape(TOO_LARGE)):
        parse_size("9" * 400 + "TiB")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "a size must be a number of bytes or a string such as 4GiB"),
        (-1, "a size cannot be negative"),
        (3.5, "a size must be a string such as 512MiB or 4GiB"),
        (None, "a size must be a string such as 512MiB or 4GiB"),
        (
            "4096",
            "'4096' has no unit; write a number and a unit: B, KiB, MiB, GiB or TiB, e.g. 4096MiB",
        ),
        (
            " 1.5 ",
            "' 1.5 ' has no unit; write a number and a unit: B, KiB, MiB, GiB or TiB, e.g. 1.5MiB",
        ),
        ("4XiB", "'4XiB' is not a size; write a number and a unit: B, KiB, MiB, GiB or TiB"),
        ("GiB", "'GiB' is not a size; write a number and a unit: B, KiB, MiB, GiB or TiB"),
    ],
)
def test_a_refused_size_says_why_and_how_to_write_one(value: object, message: str) -> None:
    with _says(message):
        parse_size(value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3ms", timedelta(milliseconds=3)),
        ("3s", timedelta(seconds=3)),
        ("3m", timedelta(minutes=3)),
        ("3h", timedelta(hours=3)),
        ("3d", timedelta(days=3)),
        ("3w", timedelta(weeks=3)),
        (
            "1w2d3h4m5s6ms",
            timedelta(weeks=1, days=2, hours=3, minutes=4, seconds=5, milliseconds=6),
        ),
        ("1.5h", timedelta(minutes=90)),
        (" 90s ", timedelta(seconds=90)),
        (2.5, timedelta(seconds=2.5)),
        (0, timedelta(0)),
        ("0s", timedelta(0)),
    ],
)
def test_each_duration_unit_multiplies_by_its_own_factor(
    text: str | float, expected: timedelta
) -> None:
    assert parse_duration(text) == expected


def test_an_already_parsed_duration_is_kept_as_it_is() -> None:
    # a model validated again keeps its value, even one past what text may say
    long = MAX_DURATION + timedelta(days=1)
    assert parse_duration(long) is long


def test_one_second_past_the_longest_duration_as_a_number_is_too_long() -> None:
    assert parse_duration(MAX_DURATION.total_seconds()) == MAX_DURATION
    with _says("315360001.0 seconds is too long; use at most 3650d"):
        parse_duration(MAX_DURATION.total_seconds() + 1)


def test_an_endless_duration_is_too_long_not_an_overflow() -> None:
    with _says("inf seconds is too long; use at most 3650d"):
        parse_duration(math.inf)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "a duration must be a string such as 90s, 15m, 6h or 7d"),
        (None, "a duration must be a string such as 90s, 15m, 6h or 7d"),
        ([90], "a duration must be a string such as 90s, 15m, 6h or 7d"),
        (-1, "a duration cannot be negative"),
        (-0.5, "a duration cannot be negative"),
        (math.nan, f"nan is not a duration; {DURATION_HINT}"),
        ("", f"'' is not a duration; {DURATION_HINT}"),
        ("   ", f"'   ' is not a duration; {DURATION_HINT}"),
        ("1h 30m", f"'1h 30m' is not a duration; {DURATION_HINT}"),
        ("15", f"'15' is not a duration; {DURATION_HINT}"),
        ("h", f"'h' is not a duration; {DURATION_HINT}"),
    ],
)
def test_a_refused_duration_says_why_and_how_to_write_one(value: object, message: str) -> None:
    with _says(message):
        parse_duration(value)


def _within(value: object, *, above: bool = False) -> timedelta:
    return duration_in_bounds(
        value,
        low=timedelta(seconds=10),
        high=timedelta(minutes=90),
        above=above,
        too_short=None,
        too_long=None,
    )


def test_bounds_apply_to_a_timedelta_as_to_its_text() -> None:
    assert _within(timedelta(minutes=90)) == timedelta(minutes=90)
    with _says("1h30m1s is too long; use at most 1h30m"):
        _within(timedelta(minutes=90, seconds=1))


def test_a_bound_that_parses_is_given_back_as_a_timedelta() -> None:
    assert _within("1m30s") == timedelta(seconds=90)
    assert _within(90) == timedelta(seconds=90)


def test_below_an_excluded_low_bound_says_more_than() -> None:
    with _says("9s is too short; use more than 10s"):
        _within(timedelta(seconds=9), above=True)


def test_a_number_below_the_low_bound_is_shown_in_seconds() -> None:
    with _says("2.5 seconds is too short; use at least 10s"):
        _within(2.5)


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0B"),
        (1, "1B"),
        (1000, "1000B"),
        (1025, "1025B"),
        (3000, "3000B"),
        (MIB - 1, "1048575B"),
        (KIB, "1KiB"),
        (3 * KIB, "3KiB"),
        (MIB, "1MiB"),
        (MIB + 1, "1.0MiB"),
        (MIB + MIB // 2, "1536KiB"),
        (5 * MIB + 7, "5.0MiB"),
        (GIB - 1, "1024.0MiB"),
        (GIB, "1GiB"),
        (GIB + 1, "1.0GiB"),
        (3 * GIB // 2 + 1, "1.5GiB"),
        (1025**3 + 1, "1.0GiB"),
        (TIB, "1TiB"),
        (TIB + GIB, "1025GiB"),
        (2 * TIB, "2TiB"),
        (TIB + 1, "1024.0GiB"),
    ],
)
def test_a_size_is_written_in_its_largest_exact_unit_else_with_one_decimal(
    size: int, text: str
) -> None:
    assert format_size(size) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=1), "1s"),
        (timedelta(seconds=59), "59s"),
        (timedelta(minutes=1), "1m"),
        (timedelta(hours=1), "1h"),
        (timedelta(days=1), "1d"),
        (timedelta(weeks=1), "7d"),
        (timedelta(days=1, hours=2, minutes=3, seconds=4), "1d2h3m4s"),
        (timedelta(hours=1, seconds=1), "1h1s"),
        (timedelta(milliseconds=250), "250ms"),
        (timedelta(milliseconds=1), "1ms"),
        (timedelta(seconds=1, milliseconds=500), "1s500ms"),
        (timedelta(minutes=2, milliseconds=5), "2m5ms"),
    ],
)
def test_a_duration_is_written_in_the_compact_form_users_write(value: timedelta, text: str) -> None:
    assert format_duration(value) == text
