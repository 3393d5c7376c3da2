"""Fixtures shared by the adapters' tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Protocol

import pytest


class _Job(Protocol):
    ended: threading.Event


@pytest.fixture
def release() -> Iterator[list[_Job]]:
    """Fake domains whose job a test left running end it on teardown, so no thread outlives
    it (``test_migrator_watch.Domain``)."""
    domains: list[_Job] = []
    yield domains
    for dom in domains:
        dom.ended.set()
