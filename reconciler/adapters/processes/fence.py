"""Fencing a host by running its fence command (a fence agent, IPMI, Redfish, a script).

The command runs without a shell, ``{host}`` in an argument replaced by the host's name, in a
session of its own so that a timeout kills it and everything it started. Exit 0 is the only
confirmation that the host is off; any other exit, a command that cannot start or one that
runs past its timeout is not.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

from reconciler.model.recovery import Fence, FenceOutcome, FenceResult

TAIL = 300
"""Characters of the command's output kept in the result."""


class CommandFencer:
    def fence(self, host: str, fence: Fence) -> FenceResult:
        argv = [a.replace("{host}", host) for a in fence.command]
        timeout = fence.timeout.total_seconds()
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as err:
            return FenceResult(
                outcome=FenceOutcome.FAILED,
                detail=f"cannot run {argv[0]}: {err.strerror or err}",
                seconds=time.monotonic() - started,
            )
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return FenceResult(
                outcome=FenceOutcome.TIMEOUT,
                detail=f"{argv[0]} ran longer than {timeout:g} s and was killed",
                seconds=time.monotonic() - started,
            )
        seconds = time.monotonic() - started
        said = out.decode(errors="replace").strip()[-TAIL:]
        if proc.returncode == 0:
            return FenceResult(outcome=FenceOutcome.OK, detail=said or "exit 0", seconds=seconds)
        return FenceResult(
            outcome=FenceOutcome.FAILED,
            detail=f"exit {proc.returncode}" + (f": {said}" if said else ""),
            seconds=seconds,
        )
