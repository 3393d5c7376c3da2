"""Fencing a host by running its fence command (a fence agent, IPMI, Redfish, a script), and
asking the fence agent whether a host's power is off.

The command runs through ``run_command`` (``runner``): without a shell, ``{host}`` in an
argument replaced by the host's name, in a session of its own, its timeout bounding the whole
call (a process it left behind holding its output included), every process it started ended
with it (``tree``), so nothing of a fence can power a host off later. Exit 0 is the only
confirmation that the host is off; any other exit, a command that cannot start or one that
runs past its timeout is not.

``status`` runs the agent's status action: the ``status`` argv given, else the fence's own
``status``, or else the fence command with its action replaced by ``status`` (the
fence-agents convention: ``--action=off``, ``--action off``, ``-o off``; an agent named
``fence_*`` without an action gets ``--action=status``). fence-agents answer ``Status: ON``
with exit 0 and ``Status: OFF`` with exit 2; a script may print ``on`` or ``off`` and exit 0.
Anything else (another exit, no such word, both words, a timeout) is ``unknown``: never taken
for off.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Final

from reconciler.adapters.processes.runner import CommandResult, run_command
from reconciler.model.recovery import (
    Fence,
    FenceOutcome,
    FenceResult,
    PowerState,
    PowerStatus,
    status_command,
)

__all__ = ["CommandFencer", "power_state", "status_command"]

TAIL: Final = 300
"""Characters of the command's output kept in the result."""
_STATE_LINE: Final = re.compile(r"^\s*(?:status\s*[:=]\s*)?(on|off)\s*\.?\s*$", re.IGNORECASE)
_OFF_EXITS: Final = frozenset({0, 2})
"""Exit statuses that go with an answer of "off": fence-agents' 2, a script's 0."""


def _argv(command: Sequence[str], host: str) -> list[str]:
    return [a.replace("{host}", host) for a in command]


def _said(result: CommandResult) -> str:
    return result.output.strip()[-TAIL:]


def power_state(result: CommandResult) -> PowerState:
    """What a status action's result says: off, on, or unknown."""
    if result.returncode not in _OFF_EXITS:  # a failure, a timeout, a command not run
        return PowerState.UNKNOWN
    words = {
        m.group(1).lower()
        for line in result.output.splitlines()
        if (m := _STATE_LINE.match(line)) is not None
    }
    if words == {"off"} and result.returncode in _OFF_EXITS:
        return PowerState.OFF
    if words == {"on"} and result.returncode == 0:
        return PowerState.ON
    return PowerState.UNKNOWN


class CommandFencer:
    def fence(self, host: str, fence: Fence) -> FenceResult:
        timeout = fence.timeout.total_seconds()
        result = run_command(_argv(fence.command, host), timeout=timeout)
        said = _said(result)
        if result.ok:
            return FenceResult(
                outcome=FenceOutcome.OK, detail=said or "exit 0", seconds=result.seconds
            )
        outcome = FenceOutcome.TIMEOUT if result.timed_out else FenceOutcome.FAILED
        detail = result.describe(timeout)
        return FenceResult(
            outcome=outcome,
            detail=detail + (f": {said}" if said and result.error is None else ""),
            seconds=result.seconds,
        )

    def status(self, host: str, fence: Fence, command: Sequence[str] | None = None) -> PowerStatus:
        """The power state of ``host`` as its fence agent reports it: ``command`` (argv,
        ``{host}`` replaced) or else the fence's status action, within the fence's timeout.
        Never raises: ``unknown`` with the reason when it cannot tell."""
        argv = list(command) if command is not None else fence.status_action()
        if argv is None:
            return PowerStatus(
                state=PowerState.UNKNOWN,
                detail=f"{os.path.basename(fence.command[0])} has no status action "
                "(no --action or -o to replace, and not a fence_* agent)",
            )
        timeout = fence.timeout.total_seconds()
        result = run_command(_argv(argv, host), timeout=timeout)
        state = power_state(result)
        said = _said(result)
        detail = said if state is not PowerState.UNKNOWN and said else result.describe(timeout)
        if state is PowerState.UNKNOWN and said and result.error is None:
            detail += f": {said}"
        return PowerStatus(state=state, detail=detail, seconds=result.seconds)
