"""The commands of a rollout, run through the one process runner, their output kept.

Each command runs without a shell (``run_command``): ``{host}`` and ``{uri}`` replaced in its
arguments and its ``env`` values, its timeout bounding the whole call, output included. Its
environment is ``PATH``, ``HOME``, ``LANG`` and ``TZ`` of the reconciler's, its ``env`` and
the ``passEnv`` variables of the reconciler's environment, nothing else: those values are
secrets to the runner (never on argv, scrubbed from the output). A ``passEnv`` variable the
reconciler does not have fails the step before anything runs.

The output of every run is kept in ``<logs>/<host>/<step>-<time>.log`` (``<logs>/rollout/``
for the steps before and after), at most ``MAX_OUTPUT`` bytes of it (the first and the last
half), so a person finds it after the run; the record names the file. It is the runner's
scrubbed output: no ``passEnv`` value, whole or cut in two at the middle left out.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from reconciler.adapters.files.atomic import write_atomically
from reconciler.adapters.processes.runner import run_command
from reconciler.model.quantity import format_duration
from reconciler.model.rollout import Command
from reconciler.model.rollout_progress import CommandOutcome, Target

INHERITED: Final = ("PATH", "HOME", "LANG", "TZ")
"""What a rollout command gets of the reconciler's environment without asking."""
MAX_OUTPUT: Final = 256 * 1024
"""Bytes of a command's output kept in its log."""
TAIL_LINES: Final = 20
"""Lines of the output's end given back with the outcome (for the record's message)."""


def _filled(text: str, target: Target | None) -> str:
    if target is None:
        return text
    return text.replace("{host}", target.host).replace("{uri}", target.uri)


class ProcessRolloutCommands:
    """``RolloutCommands`` through ``run_command``, logs kept under ``logs/<rollout>/``."""

    def __init__(
        self,
        logs: Path,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.logs = logs
        self.environ = os.environ if environ is None else environ
        self.clock = clock

    def run(
        self, rollout: str, step: str, command: Command, *, target: Target | None
    ) -> CommandOutcome:
        argv = [_filled(a, target) for a in command.argv]
        missing = [name for name in command.pass_env if name not in self.environ]
        if missing:
            return CommandOutcome(
                ok=False,
                detail=f"not run: passEnv {', '.join(missing)} not set in the reconciler's "
                "environment",
            )
        passed = {name: self.environ[name] for name in command.pass_env}
        env = {k: _filled(v, target) for k, v in command.env.items()} | passed
        started = self.clock()
        done = run_command(
            argv,
            timeout=command.timeout.total_seconds(),
            env=env,
            inherit=INHERITED,
            secrets=list(passed.values()),
            max_output=MAX_OUTPUT,
        )
        if done.error is not None:
            detail = done.error
        elif done.timed_out:
            detail = (
                f"ran longer than {format_duration(command.timeout)} and was killed, with "
                "everything it started"
            )
        else:
            detail = done.describe(command.timeout.total_seconds())
        where = self._keep(rollout, step, target, started, done.argv, detail, done.output)
        tail = "\n".join(done.output.rstrip().splitlines()[-TAIL_LINES:])
        return CommandOutcome(ok=done.ok, detail=detail, output=tail, log=where)

    def _keep(
        self,
        rollout: str,
        step: str,
        target: Target | None,
        started: datetime,
        argv: tuple[str, ...],
        detail: str,
        output: str,
    ) -> str | None:
        """The output in a log file of its own; its path, or None when it cannot be written
        (the outcome stands without it)."""
        stamp = started.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        name = f"{step.replace('/', '-')}-{stamp}.log"
        path = self.logs / rollout / (target.host if target is not None else "rollout") / name
        header = f"# {' '.join(argv)}\n# started {started.isoformat()}: {detail}\n"
        with contextlib.suppress(OSError):
            write_atomically(path, (header + output).encode(), mode=0o640, make_parents=True)
            return str(path)
        return None


__all__ = ["ProcessRolloutCommands"]
