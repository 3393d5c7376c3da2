"""``history --since``: any age is an age or a usage error, never an overflow."""

from __future__ import annotations

import argparse
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.cli.history import duration


def test_ages_as_written() -> None:
    assert duration("30m") == timedelta(minutes=30)
    assert duration("2w") == timedelta(weeks=2)


@pytest.mark.parametrize("text", ["99999999999999999w", "3651d", "x", "7 d"])
def test_an_age_too_long_or_unreadable_is_a_usage_error(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        duration(text)


@given(st.integers(min_value=0, max_value=10**30), st.sampled_from("smhdw"))
def test_any_age_is_bounded_or_refused(count: int, unit: str) -> None:
    try:
        age = duration(f"{count}{unit}")
    except argparse.ArgumentTypeError:
        return
    assert timedelta(0) <= age <= timedelta(days=3650)


def test_a_period_may_be_given_in_seconds_for_a_lab_sampled_every_few() -> None:
    assert duration("15s") == timedelta(seconds=15)
    assert duration("361s") == timedelta(seconds=361)
    with pytest.raises(argparse.ArgumentTypeError, match="90s, 30m"):
        duration("15")
