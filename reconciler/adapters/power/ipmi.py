"""Power through an IPMI BMC, by ``ipmitool`` over the network (IPMI 2.0, ``-I lanplus``).

``ipmitool`` (Debian's package of the same name) runs through the one process runner
(``processes.runner.run_command``): without a shell, bounded by the host's ``power.timeout``
as a whole with every process it started, its output scrubbed; ``-v`` makes it say why a
session failed. The password reaches it in
its environment (``IPMI_PASSWORD``, read with ``-E``), never on its command line, which
every user of the machine can read; the user name is on it (``-U``). The environment holds
nothing else of the reconciler's but ``PATH``, ``HOME``, ``LANG`` and ``TZ``.

``power.address`` is the BMC's host name or address, with ``:PORT`` when it does not listen
on 623 (``[ADDRESS]:PORT`` for IPv6). The state is ``chassis power status`` ("Chassis Power
is on"); ``power_on`` asks ``chassis power on``, ``power_off`` ``chassis power soft`` (the
ACPI shutdown: the host's system shuts itself down; IPMI has no list of what a BMC allows,
so it is never forced). Both read the state first and ask nothing when the host already is
as asked, within the same ``power.timeout``.

A run killed at the timeout is a ``TransientError``, and so is a session ipmitool could not
establish without the BMC saying why (no answer, or a BMC that drops a wrong password
silently); a BMC that refuses the user, the password or the privilege is a
``TerminalError``; ipmitool missing is a ``TerminalError`` saying how to install it.
``power_state`` never raises: it answers ``unknown`` with the reason.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from typing import Final

from reconciler.adapters.power.address import host_port as address_port
from reconciler.adapters.power.credentials import Login, login
from reconciler.adapters.processes.runner import CommandResult, run_command
from reconciler.errors import ReconcilerError, TerminalError, TransientError
from reconciler.model.power import HostPower
from reconciler.model.recovery import PowerState, PowerStatus

log = logging.getLogger(__name__)

IPMITOOL: Final = "ipmitool"
INHERITED: Final = ("PATH", "HOME", "LANG", "TZ")
"""What ipmitool gets of the reconciler's environment, besides the password."""
DEFAULT_PORT: Final = 623
_STATE: Final = re.compile(r"Chassis Power is (on|off)\b", re.IGNORECASE)
_REFUSED: Final = re.compile(
    r"unauthorized name|invalid user|HMAC is invalid|insufficient privilege|"
    r"unauthorized role|invalid password|authentication",
    re.IGNORECASE,
)
"""What ipmitool prints when the BMC refused the session's user, password or privilege."""
_SHOWN: Final = 300
"""Characters of ipmitool's output kept in a message."""


class IpmiPower:
    """The ``ipmi`` driver of the PowerSwitch port."""

    def __init__(self, environ: Mapping[str, str] | None = None, *, tool: str = IPMITOOL) -> None:
        self.environ = os.environ if environ is None else environ
        self.tool = tool

    def __repr__(self) -> str:
        return "<IpmiPower>"

    def power_state(self, host: str, power: HostPower) -> PowerStatus:
        started = time.monotonic()
        try:
            state, said = self._state(host, power, login(host, power, self.environ), started)
        except ReconcilerError as err:
            return PowerStatus(
                state=PowerState.UNKNOWN, detail=str(err), seconds=time.monotonic() - started
            )
        return PowerStatus(state=state, detail=said, seconds=time.monotonic() - started)

    def power_on(self, host: str, power: HostPower) -> None:
        self._switch(host, power, "on", PowerState.ON)

    def power_off(self, host: str, power: HostPower) -> None:
        self._switch(host, power, "soft", PowerState.OFF)

    def _switch(self, host: str, power: HostPower, action: str, wanted: PowerState) -> None:
        started = time.monotonic()
        creds = login(host, power, self.environ)
        state, _ = self._state(host, power, creds, started)
        if state is wanted:
            log.info("%s is %s already (IPMI): not asked again", host, wanted)
            return
        self._run(host, power, creds, ["chassis", "power", action], started)
        log.info("%s: asked the IPMI BMC for chassis power %s", host, action)

    def _state(
        self, host: str, power: HostPower, creds: Login, started: float
    ) -> tuple[PowerState, str]:
        done = self._run(host, power, creds, ["chassis", "power", "status"], started)
        match = _STATE.search(done.output)
        if match is None:
            return PowerState.UNKNOWN, f"ipmitool said neither on nor off: {_tail(done)!r}"
        return PowerState(match.group(1).lower()), match.group(0)

    def _run(
        self, host: str, power: HostPower, creds: Login, command: list[str], started: float
    ) -> CommandResult:
        name, port = host_port(host, power.address or "")
        where = f"the IPMI BMC of {host} at {power.address}"
        timeout = power.timeout.total_seconds()
        left = timeout - (time.monotonic() - started)
        if left <= 0:
            raise TransientError(f"{where} did not answer within {timeout:g}s")
        # -v: ipmitool says why a session failed (RAKP 2 HMAC is invalid: the password)
        argv = [self.tool, "-v", "-I", "lanplus", "-H", name, "-p", str(port), "-U", creds.user]
        argv.append("-E")
        done = run_command(
            argv + command,
            timeout=left,
            env={"IPMI_PASSWORD": creds.password},
            inherit=INHERITED,
            secrets=[creds.password],
        )
        if done.ok:
            return done
        said = _tail(done)
        what = " ".join(command)
        if done.error is not None:
            raise TerminalError(
                f"{where}: {done.error}",
                hint="install ipmitool on the reconciler's machine (Debian: apt-get install "
                "ipmitool)",
            )
        if done.timed_out:
            raise TransientError(
                f"{where} did not answer {what} within {timeout:g}s (ipmitool was stopped)",
                hint="check that the BMC is up and answers IPMI over LAN; raise power.timeout "
                "for a slow one",
            )
        if _REFUSED.search(done.output):
            raise TerminalError(
                f"{where} refused {what}: {said}",
                hint=f"check the user and password in {creds.names} and that the user may "
                "control the chassis (operator or administrator)",
            )
        raise TransientError(
            f"{where}: {what} failed ({done.describe(timeout)}): {said}",
            hint=f"check power.address, that the BMC answers IPMI 2.0 over LAN, and the user "
            f"and password in {creds.names}",
        )


def host_port(host: str, address: str) -> tuple[str, int]:
    """The BMC's host name or address and its UDP port (623 unless given)."""
    return address_port(
        host,
        address,
        default_port=DEFAULT_PORT,
        example="bmc-kvm-07, 10.0.0.7:6230 or [fd00::7]:623",
    )


def _tail(done: CommandResult) -> str:
    lines = [line.strip() for line in done.output.strip().splitlines() if line.strip()]
    return " / ".join(lines)[-_SHOWN:] or "no output"
