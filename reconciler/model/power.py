"""Power saving: the policy (``BalancePolicy.spec.power``), how each host's power is switched
(``Cluster.spec.hosts[].power``, or ``defaults.power``), and what the reconciler keeps of the
hosts it put in standby.

DPM's habit: keep each powered host's demand within a band of its capacity (VMware's 63% +/-
18%: 45-81%); when the cluster's demand over ``powerOffAfter`` fits on fewer hosts within the
band, empty the least efficient, cheapest-to-empty host and power it off; when demand rises
above the band over ``powerOnAfter``, power a standby host on. Nothing is ever powered off
unless ``mode`` asks for it.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AwareDatetime, Field, model_validator

from reconciler.model.base import Frozen
from reconciler.model.quantity import Duration, Percent, duration_within
from reconciler.model.rules import Selector

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"

PowerWait = Annotated[
    Duration,
    duration_within(
        timedelta(seconds=1),
        timedelta(days=1),
        too_short="{value} is too short to tell a trend from a spike; use at least 1s, e.g. 5m",
    ),
]
BootTimeout = Annotated[
    Duration,
    duration_within(
        timedelta(seconds=10),
        timedelta(hours=2),
        too_short="{value} is too short for a server to boot; use at least 10s, e.g. 10m",
    ),
]
PowerCallTimeout = Annotated[
    Duration,
    duration_within(
        timedelta(seconds=1),
        timedelta(minutes=10),
        too_short="{value} is too short for a BMC to answer; use at least 1s, e.g. 30s",
    ),
]


class PowerMode(StrEnum):
    OFF = "off"
    """Nothing is powered off; standby hosts are powered on and taken back into service."""
    PROPOSE = "propose"
    """The power plan is shown (plan, status, pull request); nothing is switched."""
    APPLY = "apply"
    """Hosts are emptied and powered off, and powered on again, within every limit."""


class Band(Frozen):
    """The share of their capacity powered hosts' demand is kept within (DPM's 63 +/- 18)."""

    low: Percent = Field(default=45, description="Below it, over powerOffAfter: consolidate.")
    high: Percent = Field(default=81, description="Above it, over powerOnAfter: power on.")

    @model_validator(mode="after")
    def _ordered(self) -> Band:
        if self.low >= self.high:
            raise ValueError(
                f"band low {self.low:g} must be below high {self.high:g}; "
                "e.g. {low: 45, high: 81}"
            )
        return self


class PowerSpec(Frozen):
    """Consolidate onto fewer hosts when load is low, power the idle ones off, and on again."""

    mode: PowerMode = Field(
        default=PowerMode.OFF,
        description="off | propose | apply. Default off: nothing is ever powered off unasked.",
    )
    band: Band = Field(default_factory=Band)
    power_off_after: PowerWait = Field(
        default=timedelta(minutes=40),
        alias="powerOffAfter",
        json_schema_extra={"default": "40m"},
        description="Demand below the band this long before a host is emptied and powered off.",
    )
    power_on_after: PowerWait = Field(
        default=timedelta(minutes=5),
        alias="powerOnAfter",
        json_schema_extra={"default": "5m"},
        description="Demand above the band this long before a standby host is powered on.",
    )
    min_spare_hosts: int = Field(
        default=1,
        ge=0,
        le=1000,
        alias="minSpareHosts",
        description="Powered-on hosts beyond what the load needs, always (besides recovery's "
        "reserveHosts).",
    )
    max_standby: int | None = Field(
        default=None,
        ge=0,
        le=100_000,
        alias="maxStandby",
        description="At most this many hosts powered off at once. Default: no limit.",
    )
    exclude: Selector | None = Field(
        default=None, description="Hosts never powered off (names and/or labels)."
    )


class PowerDriver(StrEnum):
    REDFISH = "redfish"
    IPMI = "ipmi"
    WOL = "wol"
    COMMAND = "command"


class Credentials(Frozen):
    """Where the BMC's user and password come from: the reconciler's environment, never git."""

    pass_env: list[Annotated[str, Field(pattern=ENV_NAME)]] = Field(
        min_length=2,
        max_length=2,
        alias="passEnv",
        description="Two variable names: the user's and the password's, e.g. [BMC_USER, "
        "BMC_PASSWORD].",
    )


class PowerCommands(Frozen):
    """driver: command - argv run without a shell ({host} replaced), as rollout steps run."""

    on: list[str] = Field(min_length=1, description="Powers the host on; exit 0 on success.")
    off: list[str] = Field(min_length=1, description="Powers the host off; exit 0 on success.")
    status: list[str] = Field(
        min_length=1, description="Prints on or off (the first word that is one of them)."
    )
    pass_env: list[Annotated[str, Field(pattern=ENV_NAME)]] = Field(
        default_factory=list,
        alias="passEnv",
        description="Variables passed on from the reconciler's own environment (secrets).",
    )


class HostPower(Frozen):
    """How one host's power is switched and read."""

    driver: PowerDriver
    address: str | None = Field(
        default=None,
        min_length=1,
        description="redfish: the BMC's URL (https://bmc-kvm-07.example.net); ipmi: its host "
        "name or address; wol: the broadcast address (default 255.255.255.255).",
    )
    system: str | None = Field(
        default=None,
        min_length=1,
        description="redfish: the ComputerSystem's path (default: the only member of "
        "/redfish/v1/Systems).",
    )
    mac: str | None = Field(
        default=None,
        pattern=r"^[0-9A-Fa-f]{2}([:-][0-9A-Fa-f]{2}){5}$",
        description="wol: the MAC address the magic packet wakes.",
    )
    credentials: Credentials | None = Field(
        default=None, description="redfish and ipmi: the BMC's user and password, by variable."
    )
    command: PowerCommands | None = Field(default=None, description="driver: command.")
    verify_tls: bool = Field(
        default=True,
        alias="verifyTls",
        description="redfish: check the BMC's certificate (false only for a lab).",
    )
    timeout: PowerCallTimeout = Field(
        default=timedelta(seconds=30),
        json_schema_extra={"default": "30s"},
        description="The longest one call to the BMC (or one command) may take.",
    )
    idle_watts: float | None = Field(
        default=None,
        ge=0,
        le=100_000,
        allow_inf_nan=False,
        alias="idleWatts",
        description="What the host draws idle, watts (its power curve's first point): the least "
        "efficient hosts (watts per CPU) are emptied first, and a proposal says the energy a "
        "power-off saves per day.",
    )
    boot_timeout: BootTimeout = Field(
        default=timedelta(minutes=10),
        alias="bootTimeout",
        json_schema_extra={"default": "10m"},
        description="From power-on to libvirt answering with the host's capacity; a boot that "
        "takes longer is given up and the next standby host is tried.",
    )

    @model_validator(mode="after")
    def _driver_needs(self) -> HostPower:
        d = self.driver
        if d is PowerDriver.REDFISH and (self.address is None or self.credentials is None):
            raise ValueError(
                "driver redfish needs address (the BMC's URL) and credentials: {passEnv: "
                "[BMC_USER, BMC_PASSWORD]}"
            )
        if (
            d is PowerDriver.REDFISH
            and self.address is not None
            and not self.address.startswith(("https://", "http://"))
        ):
            raise ValueError(f"redfish address {self.address!r} is not a URL; e.g. https://bmc-01")
        if d is PowerDriver.IPMI and (self.address is None or self.credentials is None):
            raise ValueError("driver ipmi needs address and credentials: {passEnv: [U, P]}")
        if d is PowerDriver.WOL and self.mac is None:
            raise ValueError("driver wol needs mac, e.g. 52:54:00:12:34:56")
        if d is PowerDriver.COMMAND and self.command is None:
            raise ValueError("driver command needs command: {on: [...], off: [...], status: [...]}")
        return self


class PowerAction(StrEnum):
    OFF = "off"
    ON = "on"


class PowerIntent(Frozen):
    """Written before a power action starts; resolved from the BMC and libvirt after a crash."""

    host: str
    action: PowerAction
    started_at: AwareDatetime
    why: str
    asked_at: AwareDatetime | None = None
    """When the BMC took the request (None: not known to have, as after a crash before it
    answered). A power-off the BMC took is waited for across rounds, up to bootTimeout."""


class StandbyHost(Frozen):
    """A host the reconciler powered off: capacity that costs a power-on."""

    since: AwareDatetime
    why: str


class HostCapacity(Frozen):
    """What a host brings into service: as last seen answering."""

    cpus: int = Field(ge=0)
    memory: int = Field(ge=0, description="Bytes.")


class PowerBook(Frozen):
    """What power saving remembers between rounds, in the state directory (the simulator
    keeps it in memory)."""

    kind: Literal["PowerBook"] = "PowerBook"
    cluster: str = ""
    standby: dict[str, StandbyHost] = Field(
        default_factory=dict, description="Hosts the reconciler powered off, by name."
    )
    booting: dict[str, AwareDatetime] = Field(
        default_factory=dict, description="Host -> when its power-on was asked."
    )
    emptying: dict[str, AwareDatetime] = Field(
        default_factory=dict, description="Host -> since when it is emptied to be powered off."
    )
    low_since: AwareDatetime | None = Field(
        default=None, description="Since when demand has been below the band (None: it is not)."
    )
    high_since: AwareDatetime | None = Field(
        default=None, description="Since when demand has been above the band (None: it is not)."
    )
    intents: dict[str, PowerIntent] = Field(default_factory=dict, description="By host.")
    failed: dict[str, str] = Field(
        default_factory=dict, description="Host -> why it could not be powered off or on."
    )
    failed_at: dict[str, AwareDatetime] = Field(
        default_factory=dict,
        description="Host -> when its power-off failed: it is not chosen to empty again for "
        "FAILED_OFF_BACKOFF (each attempt would move its VMs for nothing).",
    )
    capacity: dict[str, HostCapacity] = Field(
        default_factory=dict,
        description="Host -> its CPUs and memory as last seen in service: what a standby or "
        "booting host brings back (a host asleep does not answer).",
    )

    def silent(self) -> tuple[str, ...]:
        """Hosts powered off or booting on purpose, or being switched (an intent kept, as
        after a crash in the middle of a switch): they may not answer, and that is known."""
        return tuple(sorted({*self.standby, *self.booting, *self.intents}))
