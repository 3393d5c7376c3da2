"""Sizes (``4GiB``), durations (``15m``) and percentages as typed values.

Sizes parse to whole bytes, durations to ``timedelta``; both keep a string JSON Schema so
editors show users the form they write. Every size is at most ``MAX_SIZE`` and every duration at
most ``MAX_DURATION``; a field narrows that with ``duration_within``, so a value the runtime
cannot use (a timer of a million weeks, a size past 64 bits) is a validation error, never an
``OverflowError`` later.
"""

from __future__ import annotations

import functools
import math
import re
from datetime import timedelta
from typing import Annotated, Final

from pydantic import BeforeValidator, Field, PlainSerializer, WithJsonSchema

_SIZE_UNITS = {
    "B": 1,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
    "K": 1000,
    "KB": 1000,
    "M": 1000**2,
    "MB": 1000**2,
    "G": 1000**3,
    "GB": 1000**3,
    "T": 1000**4,
    "TB": 1000**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
SIZE_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*(B|KiB|MiB|GiB|TiB|K|KB|M|MB|G|GB|T|TB)\s*$"
_UNITS_TEXT = "B, KiB, MiB, GiB or TiB"

MAX_SIZE: Final = 1024**5
"""1 PiB: more than any host's memory, far within what libvirt and 64-bit counters hold."""
MAX_DURATION: Final = timedelta(days=3650)
"""Ten years: longer than any timer, window or cooldown the reconciler keeps."""

_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h|d|w))+$"


def parse_size(value: object) -> int:
    """Bytes from ``512MiB``, ``4GiB``, ``1.5TiB`` or a plain integer of bytes.

    Text needs a unit: ``"4096"`` is refused, since a user who types it (``place --memory
    4096``) rarely means 4 KiB. Only an integer (a YAML number) is a count of bytes.
    """
    if isinstance(value, bool):
        raise ValueError("a size must be a number of bytes or a string such as 4GiB")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a size cannot be negative")
        if value > MAX_SIZE:
            raise ValueError(f"{value} bytes is too large; {_MAX_SIZE_HINT}")
        return value
    if not isinstance(value, str):
        raise ValueError("a size must be a string such as 512MiB or 4GiB")
    match = _SIZE_RE.match(value)
    if match and not match.group(2):
        raise ValueError(
            f"{value!r} has no unit; write a number and a unit: {_UNITS_TEXT}, e.g. "
            f"{match.group(1)}MiB"
        )
    if not match or match.group(2) not in _SIZE_UNITS:
        raise ValueError(f"{value!r} is not a size; write a number and a unit: {_UNITS_TEXT}")
    size = float(match.group(1)) * _SIZE_UNITS[match.group(2)]
    if not size <= MAX_SIZE:  # also infinity, from hundreds of digits
        raise ValueError(f"{value.strip()} is too large; {_MAX_SIZE_HINT}")
    return int(size)


_MAX_SIZE_HINT: Final = "use at most 1024TiB (1PiB)"


def _seconds(value: object) -> float:
    """Seconds in ``value`` (``90s``, ``1h30m``, a number); infinite when they overflow a float.

    No ``timedelta`` is built here, so no value, however large, raises OverflowError.
    """
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool):
        raise ValueError("a duration must be a string such as 90s, 15m, 6h or 7d")
    if isinstance(value, int | float):
        if math.isnan(value):
            raise ValueError(f"{value} is not a duration; {_DURATION_HINT}")
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if not isinstance(value, str):
        raise ValueError("a duration must be a string such as 90s, 15m, 6h or 7d")
    text = value.strip()
    parts = _DURATION_RE.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{value!r} is not a duration; {_DURATION_HINT}")
    return math.fsum(float(n) * _DURATION_UNITS[u] for n, u in parts)


_DURATION_HINT: Final = "write a number and a unit: ms, s, m, h, d or w (e.g. 90s, 15m, 6h, 1h30m)"


def _shown(value: object) -> str:
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, str):
        return value.strip()
    return f"{value} seconds"


def parse_duration(value: object) -> timedelta:
    """A ``timedelta`` from ``90s``, ``15m``, ``6h``, ``7d``, ``1h30m`` or seconds as a number.

    At most ``MAX_DURATION``; longer is an error (ValueError), as is anything that is no
    duration.
    """
    if isinstance(value, timedelta):
        return value
    seconds = _seconds(value)
    if not seconds <= MAX_DURATION.total_seconds():
        raise ValueError(
            f"{_shown(value)} is too long; use at most {format_duration(MAX_DURATION)}"
        )
    return timedelta(seconds=seconds)


def duration_within(
    low: timedelta,
    high: timedelta,
    *,
    above: bool = False,
    too_short: str | None = None,
    too_long: str | None = None,
) -> BeforeValidator:  # pragma: no mutate block (runs at import; the check is duration_in_bounds)
    """A field's own bounds on a ``Duration``: ``low`` (excluded when ``above``) to ``high``.

    Use as ``Annotated[Duration, duration_within(...)]``; it runs before the parsing, so a
    value past any bound is reported with the field's bound, never as an overflow.
    ``too_short``/``too_long`` replace the default "what; how" messages; ``{value}`` in them is
    the value as written.
    """
    return BeforeValidator(
        functools.partial(
            duration_in_bounds,
            low=low,
            high=high,
            above=above,
            too_short=too_short,
            too_long=too_long,
        )
    )


def duration_in_bounds(
    value: object,
    *,
    low: timedelta,
    high: timedelta,
    above: bool,
    too_short: str | None,
    too_long: str | None,
) -> timedelta:
    """``value`` as a duration within ``duration_within``'s bounds, else ValueError."""
    seconds = _seconds(value)
    shown = _shown(value)
    if not seconds <= high.total_seconds():
        text = too_long or f"{{value}} is too long; use at most {format_duration(high)}"
        raise ValueError(text.format(value=shown))
    # the low bound is checked on the timedelta, to the microsecond: 1e-7s is 0s
    result = value if isinstance(value, timedelta) else timedelta(seconds=seconds)
    if result < low or (above and result <= low):
        bound = "more than" if above else "at least"
        text = too_short or f"{{value}} is too short; use {bound} {format_duration(low)}"
        raise ValueError(text.format(value=shown))
    return result


def format_size(size: int) -> str:
    """The shortest exact binary form of ``size`` (``4GiB``), else MiB with one decimal."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        factor = _SIZE_UNITS[unit]
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    if size >= 1024**2:
        return f"{size / 1024**3:.1f}GiB" if size >= 1024**3 else f"{size / 1024**2:.1f}MiB"
    return f"{size}B"


def format_duration(value: timedelta) -> str:
    """The compact form users write (``1h30m``)."""
    seconds = value.total_seconds()
    if seconds == 0:
        return "0s"
    out = []
    for unit in ("d", "h", "m", "s"):
        factor = _DURATION_UNITS[unit]
        count, seconds = divmod(seconds, factor)
        if count:
            out.append(f"{int(count)}{unit}")
    if seconds:
        out.append(f"{round(seconds * 1000)}ms")
    return "".join(out)


Size = Annotated[
    int,
    BeforeValidator(parse_size),
    Field(ge=0),
    PlainSerializer(format_size, return_type=str, when_used="json"),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": SIZE_PATTERN},
                {"type": "integer", "minimum": 0},
            ],
            "description": "A size: 512MiB, 4GiB, 1TiB (binary units) or bytes as an integer.",
        }
    ),
]
"""Bytes; written as ``512MiB``/``4GiB`` in YAML."""

Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": DURATION_PATTERN},
                {"type": "number", "minimum": 0},
            ],
            "description": "A duration: 90s, 15m, 6h, 7d, 1h30m, or seconds as a number.",
        }
    ),
]
"""A ``timedelta``; written as ``90s``/``15m``/``6h``/``7d`` in YAML."""

Percent = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]
"""A percentage, 0 to 100."""
