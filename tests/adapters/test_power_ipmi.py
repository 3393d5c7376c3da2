"""The IPMI driver: ipmitool against pyghmi's BMC simulator on loopback (IPMI 2.0 over UDP),
against a port that never answers, and, through a stand-in ``ipmitool`` script, what the
program is given: the password in its environment only, never on its command line."""

from __future__ import annotations

import json
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.power.ipmi import IpmiPower, host_port
from reconciler.errors import ConfigError, TerminalError, TransientError
from reconciler.model.power import HostPower
from reconciler.model.recovery import PowerState
from tests.bmcs import PASSWORD, USER, IpmiBmc, ipmi_bmc

ENV = {"BMC_USER": USER, "BMC_PASSWORD": PASSWORD}
needs_ipmitool = pytest.mark.skipif(
    shutil.which("ipmitool") is None,
    reason="no ipmitool (apt-get install ipmitool; make system-packages installs it)",
)


def ipmi(address: str, **more: object) -> HostPower:
    return HostPower.model_validate({
        "driver": "ipmi",
        "address": address,
        "credentials": {"passEnv": ["BMC_USER", "BMC_PASSWORD"]},
        "timeout": "10s",
        **more,
    })  # fmt: skip


@pytest.fixture
def bmc() -> Iterator[IpmiBmc]:
    with ipmi_bmc("on") as running:
        yield running


@needs_ipmitool
def test_a_host_is_read_shut_down_softly_and_powered_on(bmc: IpmiBmc) -> None:
    switch = IpmiPower(ENV)
    power = ipmi(bmc.address)
    status = switch.power_state("kvm-07", power)
    assert status.state is PowerState.ON, status
    assert status.detail == "Chassis Power is on"

    switch.power_off("kvm-07", power)
    assert bmc.actions(1) == ["shutdown"]  # chassis power soft: the ACPI shutdown
    assert switch.power_state("kvm-07", power).state is PowerState.OFF
    switch.power_off("kvm-07", power)  # off already: not asked again
    switch.power_on("kvm-07", power)
    assert bmc.actions(2) == ["shutdown", "on"]
    assert switch.power_state("kvm-07", power).state is PowerState.ON
    switch.power_on("kvm-07", power)
    time.sleep(0.2)
    assert bmc.seen == ["shutdown", "on"]


@needs_ipmitool
def test_a_wrong_password_is_refused_and_never_shown(bmc: IpmiBmc) -> None:
    wrong = "Not-The-Pa55word"
    switch = IpmiPower({"BMC_USER": USER, "BMC_PASSWORD": wrong})
    with pytest.raises(TerminalError, match="refused chassis power status") as err:
        switch.power_on("kvm-07", ipmi(bmc.address))
    assert "HMAC is invalid" in err.value.message  # ipmitool's own words (-v)
    assert "BMC_USER/BMC_PASSWORD" in (err.value.hint or "")
    assert wrong not in f"{err.value} {err.value.hint!r}"
    status = switch.power_state("kvm-07", ipmi(bmc.address))
    assert status.state is PowerState.UNKNOWN
    assert "refused" in status.detail
    assert bmc.seen == []


@needs_ipmitool
def test_a_bmc_that_never_answers_is_given_up_at_the_timeout() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))  # takes the packets, answers none
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(TransientError, match="did not answer chassis power status within 1s"):
            IpmiPower(ENV).power_off("kvm-07", ipmi(address, timeout="1s"))
        assert time.monotonic() - started < 4
        status = IpmiPower(ENV).power_state("kvm-07", ipmi(address, timeout="1s"))
    assert status.state is PowerState.UNKNOWN
    assert "did not answer" in status.detail
    assert 0.9 < status.seconds < 4


def stand_in(tmp_path: Path, said: str, code: int = 0) -> Path:
    """An ``ipmitool`` that writes its argv and environment to a file beside it, prints
    ``said`` and exits ``code``."""
    script = tmp_path / "ipmitool"
    seen = tmp_path / "seen.json"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"open({str(seen)!r}, 'a').write(json.dumps([sys.argv, dict(os.environ)]) + '\\n')\n"
        f"print({said!r})\n"
        f"sys.exit({code})\n"
    )
    script.chmod(0o755)
    return script


def calls(tmp_path: Path) -> list[tuple[list[str], dict[str, str]]]:
    out: list[tuple[list[str], dict[str, str]]] = []
    for line in (tmp_path / "seen.json").read_text().splitlines():
        argv, env = json.loads(line)
        out.append((argv, env))
    return out


def test_the_password_reaches_ipmitool_in_its_environment_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECONCILER_GIT_TOKEN", "git-token-1234")
    monkeypatch.setenv("UNRELATED", "kept-out")
    tool = stand_in(tmp_path, "Chassis Power is off")
    env = {**ENV, "BMC_EXTRA": "x"}
    IpmiPower(env, tool=str(tool)).power_on("kvm-07", ipmi("[fd00::7]:6230"))
    (status_argv, env_seen), (on_argv, _) = calls(tmp_path)
    assert status_argv[1:] == [
        "-v", "-I", "lanplus", "-H", "fd00::7", "-p", "6230", "-U", USER, "-E",
        "chassis", "power", "status",
    ]  # fmt: skip
    assert on_argv[-3:] == ["chassis", "power", "on"]
    assert all(PASSWORD not in arg for arg in status_argv + on_argv)
    assert env_seen["IPMI_PASSWORD"] == PASSWORD
    assert set(env_seen) <= {"IPMI_PASSWORD", "PATH", "HOME", "LANG", "TZ", "LC_CTYPE"}


def test_what_ipmitool_says_is_scrubbed_and_read(tmp_path: Path) -> None:
    tool = stand_in(tmp_path, f"Chassis Power is sideways ({PASSWORD})")
    status = IpmiPower(ENV, tool=str(tool)).power_state("kvm-07", ipmi("bmc-07"))
    assert status.state is PowerState.UNKNOWN
    assert "neither on nor off" in status.detail
    assert PASSWORD not in status.detail
    (tmp_path / "failing").mkdir()
    failing = stand_in(tmp_path / "failing", "", 1)
    with pytest.raises(TransientError, match="failed \\(exit 1\\): no output"):
        IpmiPower(ENV, tool=str(failing)).power_on("kvm-07", ipmi("bmc-07"))


def test_no_ipmitool_is_a_terminal_error_saying_how_to_install_it() -> None:
    with pytest.raises(TerminalError, match="cannot run /nonexistent/ipmitool") as err:
        IpmiPower(ENV, tool="/nonexistent/ipmitool").power_on("kvm-07", ipmi("bmc-07"))
    assert "apt-get install ipmitool" in (err.value.hint or "")


def test_a_missing_variable_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="BMC_PASSWORD"):
        IpmiPower({"BMC_USER": USER}, tool="/nonexistent/ipmitool").power_off("h", ipmi("b"))


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("bmc-07", ("bmc-07", 623)),
        ("10.0.0.7:6230", ("10.0.0.7", 6230)),
        ("[fd00::7]:623", ("fd00::7", 623)),
        ("[fd00::7]", ("fd00::7", 623)),
        ("fd00::7", ("fd00::7", 623)),
    ],
)
def test_addresses_are_read_with_their_port(address: str, expected: tuple[str, int]) -> None:
    assert host_port("kvm-07", address) == expected


@pytest.mark.parametrize("address", ["bmc:0", "bmc:99999", "bmc:x", "[fd00::7]x", "-oops", ":1"])
def test_a_bad_address_is_a_config_error(address: str) -> None:
    with pytest.raises(ConfigError, match="is not a host name or address .with :PORT when not 623"):
        host_port("kvm-07", address)
