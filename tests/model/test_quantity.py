from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.model.quantity import format_duration, format_size, parse_duration, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512MiB", 512 * 1024**2),
        ("4GiB", 4 * 1024**3),
        ("1.5TiB", int(1.5 * 1024**4)),
        ("2G", 2 * 1000**3),
        ("100B", 100),
        (2048, 2048),
        (" 8 KiB ", 8 * 1024),
    ],
)
def test_sizes_parse_to_bytes(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["4 gigs", "GiB", "-1GiB", "", "4XiB", True, -5, 3.5, None])
def test_bad_sizes_are_refused_with_the_units(bad: object) -> None:
    with pytest.raises(ValueError, match=r"size"):
        parse_size(bad)


@pytest.mark.parametrize("text", ["4096", "1.5", " 8 "])
def test_a_size_written_as_text_needs_a_unit(text: str) -> None:
    with pytest.raises(ValueError, match=r"has no unit; write a number and a unit: B, KiB, MiB"):
        parse_size(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("6h", timedelta(hours=6)),
        ("7d", timedelta(days=7)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("250ms", timedelta(milliseconds=250)),
        (30, timedelta(seconds=30)),
    ],
)
def test_durations_parse(text: str | int, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("bad", ["15 minutes", "m15", "1h 30m", "", "-5s", True, -1, "6hh"])
def test_bad_durations_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match=r"duration"):
        parse_duration(bad)


@given(st.integers(min_value=0, max_value=2**50))
def test_size_format_round_trips(size: int) -> None:
    text = format_size(size)
    if "." in text:  # an inexact, human-only rendering: within 0.1 of its unit
        assert abs(parse_size(text) - size) <= 0.05 * 1024**3 + 1
    else:
        assert parse_size(text) == size


@given(st.integers(min_value=0, max_value=10**9))
def test_duration_format_round_trips(milliseconds: int) -> None:
    value = timedelta(milliseconds=milliseconds)
    assert parse_duration(format_duration(value)) == value
