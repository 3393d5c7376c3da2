"""``PowerSwitches``: the engine's ``PowerSwitch`` port, each call handed to the driver a
host's ``power.driver`` names."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Protocol

from reconciler.adapters.power.command import CommandPower
from reconciler.adapters.power.ipmi import IpmiPower
from reconciler.adapters.power.redfish import RedfishPower
from reconciler.adapters.power.wol import WolPower
from reconciler.model.power import HostPower, PowerDriver
from reconciler.model.recovery import PowerStatus


class Driver(Protocol):
    def power_state(self, host: str, power: HostPower) -> PowerStatus: ...

    def power_on(self, host: str, power: HostPower) -> None: ...

    def power_off(self, host: str, power: HostPower) -> None: ...


class PowerSwitches:
    """Redfish, IPMI, Wake-on-LAN and commands, chosen per host by ``power.driver``.

    ``environ`` is where credentials and ``passEnv`` variables are read (the reconciler's
    environment by default), each time a call needs them, so a rotated password counts at
    the next call."""

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        *,
        drivers: Mapping[PowerDriver, Driver] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        commands = CommandPower(env)
        self.drivers: dict[PowerDriver, Driver] = {
            PowerDriver.REDFISH: RedfishPower(env),
            PowerDriver.IPMI: IpmiPower(env),
            PowerDriver.WOL: WolPower(commands),
            PowerDriver.COMMAND: commands,
        }
        self.drivers.update(drivers or {})

    def __repr__(self) -> str:
        return f"<PowerSwitches {', '.join(sorted(self.drivers))}>"

    def power_state(self, host: str, power: HostPower) -> PowerStatus:
        return self.drivers[power.driver].power_state(host, power)

    def power_on(self, host: str, power: HostPower) -> None:
        self.drivers[power.driver].power_on(host, power)

    def power_off(self, host: str, power: HostPower) -> None:
        self.drivers[power.driver].power_off(host, power)
