"""Power on by Wake-on-LAN: the magic packet (six bytes 0xFF, then the host's MAC sixteen
times) in a UDP datagram to ``power.address`` (default ``255.255.255.255``; a network's own
broadcast address, e.g. ``192.0.2.255``, reaches it through a router that forwards directed
broadcasts), port 9 unless ``:PORT`` is given. It is sent ``COPIES`` times, since a datagram
may be lost; nothing answers it, so ``power_on`` returns once it is sent and the caller
watches the host come up (libvirt answering).

Wake-on-LAN can neither power a host off nor say whether it is on. Without ``power.command``
``power_off`` is a ``TerminalError`` saying so and ``power_state`` is ``unknown`` (never taken
for off: the host is judged by libvirt answering). With ``power.command`` beside the MAC, its
``off`` and ``status`` are run (``command``), and the magic packet powers on.

The address must be an IP address: a name would need a lookup, which no timeout bounds.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import time
from typing import Final

from reconciler.adapters.power.address import host_port
from reconciler.adapters.power.command import CommandPower
from reconciler.errors import ConfigError, TerminalError, TransientError
from reconciler.model.power import HostPower
from reconciler.model.recovery import PowerState, PowerStatus

log = logging.getLogger(__name__)

BROADCAST: Final = "255.255.255.255"
PORT: Final = 9
"""The discard port, where Wake-on-LAN is sent by custom (7 is the other)."""
COPIES: Final = 3
_GAP: Final = 0.05
"""Seconds between the copies."""


def magic_packet(mac: str) -> bytes:
    """Six 0xFF bytes, then the six bytes of ``mac`` (``52:54:00:12:34:56`` or with ``-``)
    sixteen times: 102 bytes."""
    raw = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    if len(raw) != 6:
        raise ValueError(f"{mac!r} is not a MAC address")
    return b"\xff" * 6 + raw * 16


class WolPower:
    """The ``wol`` driver of the PowerSwitch port."""

    def __init__(self, commands: CommandPower | None = None) -> None:
        self.commands = commands or CommandPower()

    def __repr__(self) -> str:
        return "<WolPower>"

    def power_state(self, host: str, power: HostPower) -> PowerStatus:
        if power.command is not None:
            return self.commands.power_state(host, power)
        return PowerStatus(
            state=PowerState.UNKNOWN,
            detail="Wake-on-LAN cannot tell whether a host is on (give power.command with a "
            "status command to read it)",
        )

    def power_off(self, host: str, power: HostPower) -> None:
        if power.command is not None:
            self.commands.power_off(host, power)
            return
        raise TerminalError(
            f"host {host}: Wake-on-LAN cannot power a host off",
            hint="use another power driver for this host (redfish, ipmi), or add power.command "
            "with an off command (and a status one) beside its mac",
        )

    def power_on(self, host: str, power: HostPower) -> None:
        if power.mac is None:
            raise ConfigError(
                f"host {host}: driver wol needs mac", hint="e.g. mac: 52:54:00:12:34:56"
            )
        target, port = _target(host, power.address or BROADCAST)
        packet = magic_packet(power.mac)
        timeout = power.timeout.total_seconds()
        family = socket.AF_INET6 if target.version == 6 else socket.AF_INET
        started = time.monotonic()
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
                sock.settimeout(timeout)
                for copy in range(COPIES):
                    if copy:
                        time.sleep(_GAP)
                    if time.monotonic() - started > timeout:
                        break
                    sock.sendto(packet, (str(target), port))
        except OSError as err:
            raise TransientError(
                f"host {host}: the Wake-on-LAN packet could not be sent to {target} port "
                f"{port}: {err.strerror or err}",
                hint="check power.address (the broadcast address of the host's network) and "
                "that this machine has a route to it",
            ) from err
        log.info("%s: Wake-on-LAN sent to %s port %s for %s", host, target, port, power.mac)


def _target(host: str, address: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    name, port = host_port(host, address, default_port=PORT, example="192.0.2.255 or 192.0.2.255:7")
    try:
        return ipaddress.ip_address(name), port
    except ValueError as err:
        raise ConfigError(
            f"host {host}: wol power.address {address!r} is not an IP address",
            hint="give the broadcast address of the host's network, e.g. 192.0.2.255 (a name "
            "would need a lookup no timeout bounds)",
        ) from err
