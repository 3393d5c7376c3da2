"""Where Prometheus's binaries are, or why a test that needs them is skipped."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
RULE_TESTS = DEPLOY / "prometheus" / "alerts_test.yml"
DASHBOARD = DEPLOY / "grafana" / "reconciler.json"
OPERATE = REPO / "docs" / "operate.md"


def binary(name: str) -> str:
    """The path of ``name`` (promtool, prometheus), or skip: `make setup` installs both."""
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (Debian package prometheus; make setup installs it)")
    return found
