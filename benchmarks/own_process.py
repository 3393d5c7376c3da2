"""A benchmark's measurement in a fresh Python process of its own, its result read back as JSON.

A fresh process per measurement keeps each one's memory layout and peak its own, and lets an
earlier version's package be imported in place of this tree's (``package``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def measured(module: str, call: str, package: Path | None = None) -> dict[str, object]:
    """``module.call`` (a Python expression, e.g. ``_measure(1000, 3)``) evaluated in a process
    of its own, importing ``reconciler`` from ``package`` when given; the JSON object it
    returns."""
    path = [str(package)] if package is not None else []
    code = (
        "import json, sys; sys.path[:0] = " + json.dumps([*path, str(HERE)]) + "\n"
        f"import {module}\n"
        f"print(json.dumps({module}.{call}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=3600
    )
    found: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return found
