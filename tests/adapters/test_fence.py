"""The fence command: exit 0 only confirms; a failure and a timeout do not."""

from __future__ import annotations

import sys
import time
from datetime import timedelta

from reconciler.adapters.processes.fence import CommandFencer
from reconciler.model.recovery import Fence, FenceOutcome


def run(*argv: str, timeout: float = 5) -> tuple[FenceOutcome, str]:
    result = CommandFencer().fence(
        "kvm-07", Fence(command=list(argv), timeout=timedelta(seconds=timeout))
    )
    return result.outcome, result.detail


def test_exit_zero_confirms_and_the_host_is_substituted() -> None:
    outcome, detail = run(sys.executable, "-c", "import sys; print(sys.argv[1])", "{host}")
    assert outcome is FenceOutcome.OK
    assert detail == "kvm-07"


def test_a_non_zero_exit_is_a_failure() -> None:
    outcome, detail = run(sys.executable, "-c", "print('no power'); raise SystemExit(3)")
    assert outcome is FenceOutcome.FAILED
    assert detail == "exit 3: no power"


def test_a_command_that_hangs_is_killed_at_its_timeout() -> None:
    began = time.monotonic()
    outcome, _ = run(sys.executable, "-c", "import time; time.sleep(60)", timeout=1)
    assert outcome is FenceOutcome.TIMEOUT
    assert time.monotonic() - began < 10


def test_a_missing_command_is_a_failure() -> None:
    outcome, detail = run("/nonexistent/fence_agent")
    assert outcome is FenceOutcome.FAILED
    assert "cannot run" in detail
