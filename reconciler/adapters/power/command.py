"""Power through commands of the operator's own (``power.command``: ``on``, ``off``,
``status``), run as rollout steps are.

Each is an argv run without a shell, ``{host}`` in an argument replaced by the host's name,
through the one process runner (``processes.runner.run_command``): bounded by the host's
``power.timeout`` with every process it started, output scrubbed. Its environment is
``PATH``, ``HOME``, ``LANG`` and ``TZ`` of the reconciler's and the ``command.passEnv``
variables, nothing else; their values are secrets to the runner (never on argv, scrubbed from
the output), and one the reconciler does not have stops the call before anything runs
(``ConfigError``).

``on`` and ``off`` succeed on exit 0. ``status`` says on or off: the first word of its
output that is ``on`` or ``off`` (any case: ``Status: ON``, ``Chassis Power is off``), with
exit 0, or exit 2 with ``off`` (the fence-agents convention). Anything else (another exit, no
such word, a timeout) is ``unknown``, never taken for off.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from typing import Final

from reconciler.adapters.processes.runner import CommandResult, run_command
from reconciler.errors import ConfigError, ReconcilerError, TerminalError, TransientError
from reconciler.model.power import HostPower, PowerCommands
from reconciler.model.recovery import PowerState, PowerStatus

log = logging.getLogger(__name__)

INHERITED: Final = ("PATH", "HOME", "LANG", "TZ")
"""What a power command gets of the reconciler's environment without asking."""
_WORD: Final = re.compile(r"[A-Za-z]+")
_SHOWN: Final = 300
"""Characters of a command's output kept in a message."""


def said_state(output: str, returncode: int | None) -> PowerState:
    """What a status command's output and exit say: the first word that is on or off."""
    word = next(
        (w.lower() for w in _WORD.findall(output) if w.lower() in ("on", "off")),
        None,
    )
    if word == "on" and returncode == 0:
        return PowerState.ON
    if word == "off" and returncode in (0, 2):
        return PowerState.OFF
    return PowerState.UNKNOWN


class CommandPower:
    """The ``command`` driver of the PowerSwitch port."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ

    def __repr__(self) -> str:
        return "<CommandPower>"

    def power_state(self, host: str, power: HostPower) -> PowerStatus:
        started = time.monotonic()
        try:
            done = self._run(host, power, "status")
        except ReconcilerError as err:
            return PowerStatus(
                state=PowerState.UNKNOWN, detail=str(err), seconds=time.monotonic() - started
            )
        state = said_state(done.output, done.returncode)
        said = _tail(done)
        if state is PowerState.UNKNOWN:
            detail = done.describe(power.timeout.total_seconds())
            detail += f": {said}" if done.error is None and not done.timed_out else ""
        else:
            detail = said
        return PowerStatus(state=state, detail=detail, seconds=done.seconds)

    def power_on(self, host: str, power: HostPower) -> None:
        self._act(host, power, "on")

    def power_off(self, host: str, power: HostPower) -> None:
        self._act(host, power, "off")

    def _act(self, host: str, power: HostPower, action: str) -> None:
        done = self._run(host, power, action)
        timeout = power.timeout.total_seconds()
        where = f"host {host}: the power {action} command ({done.name})"
        if done.ok:
            log.info("%s: exit 0 in %.1fs", where, done.seconds)
            return
        if done.error is not None:
            raise ConfigError(
                f"{where}: {done.error}",
                hint=f"check command.{action} of the host's power (an argv, run without a shell)",
            )
        if done.timed_out:
            raise TransientError(
                f"{where} ran longer than {timeout:g}s and was stopped, with everything it "
                "started",
                hint="raise power.timeout for a slow one",
            )
        raise TerminalError(f"{where} failed ({done.describe(timeout)}): {_tail(done)}")

    def _run(self, host: str, power: HostPower, action: str) -> CommandResult:
        commands = _commands(host, power)
        argv = [a.replace("{host}", host) for a in getattr(commands, action)]
        missing = [name for name in commands.pass_env if name not in self.environ]
        if missing:
            raise ConfigError(
                f"host {host}: the power {action} command was not run: "
                f"{', '.join(missing)} (command.passEnv) not set in the reconciler's "
                "environment",
                hint="set them where the reconciler runs, never in the state repository",
            )
        passed = {name: self.environ[name] for name in commands.pass_env}
        return run_command(
            argv,
            timeout=power.timeout.total_seconds(),
            env=passed,
            inherit=INHERITED,
            secrets=[v for v in passed.values() if v],
        )


def _commands(host: str, power: HostPower) -> PowerCommands:
    if power.command is None:
        raise ConfigError(
            f"host {host}: its power has no command",
            hint="give command: {on: [...], off: [...], status: [...]}",
        )
    return power.command


def _tail(done: CommandResult) -> str:
    lines = [line.strip() for line in done.output.strip().splitlines() if line.strip()]
    return " / ".join(lines)[-_SHOWN:] or "no output"
