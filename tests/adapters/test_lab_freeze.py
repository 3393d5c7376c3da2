"""Freezing a process: every one of its threads stopped before ``freeze`` returns."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.lab import processes

# a process of several threads that all spin: the case where SIGSTOP stops them one by one
_SPINNERS = """
import threading
def spin():
    while True:
        pass
for _ in range(7):
    threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
spin()
"""


@pytest.fixture
def spinning() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", _SPINNERS], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def _states(pid: int) -> list[str]:
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        stat = (task / "stat").read_text()
        states.append(stat.rsplit(")", 1)[-1].split()[0])
    return states


def test_freeze_returns_only_when_every_thread_has_stopped(
    spinning: subprocess.Popen[str],
) -> None:
    pid = spinning.pid
    for _ in range(20):
        assert not processes.stopped(pid)
        assert processes.freeze(pid)
        states = _states(pid)
        assert len(states) == 8
        assert set(states) == {"T"}, states
        assert processes.stopped(pid)
        processes.send(pid, signal.SIGCONT)


def test_a_process_that_runs_or_is_gone_is_not_stopped(spinning: subprocess.Popen[str]) -> None:
    assert not processes.stopped(spinning.pid)
    spinning.kill()
    spinning.wait(timeout=10)
    assert not processes.stopped(spinning.pid)
