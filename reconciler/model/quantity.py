"""Sizes (``4GiB``), durations (``15m``) and percentages as typed values.

Sizes parse to whole bytes, durations to ``timedelta``; both keep a string JSON Schema so
editors show users the form they write.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

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
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])


def parse_duration(value: object) -> timedelta:
    """A ``timedelta`` from ``90s``, ``15m``, ``6h``, ``7d``, ``1h30m`` or seconds as a number."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError("a duration must be a string such as 90s, 15m, 6h or 7d")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return timedelta(seconds=value)
    if not isinstance(value, str):
        raise ValueError("a duration must be a string such as 90s, 15m, 6h or 7d")
    text = value.strip()
    parts = _DURATION_RE.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ValueError(
            f"{value!r} is not a duration; write a number and a unit: ms, s, m, h, d or w "
            "(e.g. 90s, 15m, 6h, 1h30m)"
        )
    return timedelta(seconds=sum(float(n) * _DURATION_UNITS[u] for n, u in parts))


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

Percent = Annotated[float, Field(ge=0, le=100)]
"""A percentage, 0 to 100."""
