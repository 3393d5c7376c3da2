"""Wake-on-LAN: the magic packet received by a UDP socket on loopback (IPv4 and IPv6); what
it cannot do (power off, tell the state) said plainly, or done by the host's commands; and the
dispatcher that picks each host's driver."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.power.switches import PowerSwitches
from reconciler.adapters.power.wol import COPIES, WolPower, magic_packet
from reconciler.engine.ports import PowerSwitch
from reconciler.errors import ConfigError, TerminalError
from reconciler.model.power import HostPower
from reconciler.model.recovery import PowerState
from tests.redfishhttp import fake_redfish

MAC = "52:54:00:12:34:56"


@pytest.fixture
def receiver() -> Iterator[socket.socket]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(2)
        yield sock


def wol(address: str | None = None, **more: object) -> HostPower:
    return HostPower.model_validate({
        "driver": "wol", "mac": MAC, **({"address": address} if address else {}), **more,
    })  # fmt: skip


def received(sock: socket.socket, count: int) -> list[bytes]:
    return [sock.recvfrom(4096)[0] for _ in range(count)]


def test_the_magic_packet_reaches_the_network(receiver: socket.socket) -> None:
    port = receiver.getsockname()[1]
    WolPower().power_on("kvm-07", wol(f"127.0.0.1:{port}"))
    packets = received(receiver, COPIES)
    assert COPIES == 3
    for packet in packets:
        assert len(packet) == 102
        assert packet[:6] == b"\xff" * 6
        assert packet[6:] == bytes.fromhex("525400123456") * 16


def test_ipv6_and_a_mac_with_dashes() -> None:
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
        sock.bind(("::1", 0))
        sock.settimeout(2)
        port = sock.getsockname()[1]
        power = wol(f"[::1]:{port}", mac="52-54-00-AB-cd-EF")
        WolPower().power_on("kvm-07", power)
        packet = sock.recvfrom(4096)[0]
    assert packet == magic_packet("52:54:00:ab:cd:ef")


def test_power_off_and_state_are_beyond_wake_on_lan_alone() -> None:
    with pytest.raises(TerminalError, match="Wake-on-LAN cannot power a host off") as err:
        WolPower().power_off("kvm-07", wol())
    assert "another power driver" in (err.value.hint or "")
    status = WolPower().power_state("kvm-07", wol())
    assert status.state is PowerState.UNKNOWN
    assert "cannot tell" in status.detail


def test_with_commands_beside_it_they_power_off_and_tell_the_state(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("on")
    script = tmp_path / "power.py"
    script.write_text(
        f"#!{sys.executable}\nimport sys, pathlib\np = pathlib.Path({str(state)!r})\n"
        "p.write_text(sys.argv[1]) if sys.argv[1] != 'status' else print(p.read_text())\n"
    )
    script.chmod(0o755)
    commands = {"on": [str(script), "on"], "off": [str(script), "off"]}
    power = wol(command={**commands, "status": [str(script), "status"]})
    switch = WolPower()
    assert switch.power_state("kvm-07", power).state is PowerState.ON
    switch.power_off("kvm-07", power)
    assert state.read_text() == "off"
    assert switch.power_state("kvm-07", power).state is PowerState.OFF


@pytest.mark.parametrize("address", ["bmc.example.net", "192.0.2.255:0", "-x"])
def test_an_address_that_is_not_an_ip_address_is_a_config_error(address: str) -> None:
    with pytest.raises(ConfigError, match="power.address"):
        WolPower().power_on("kvm-07", wol(address))


def test_the_switches_pick_each_host_s_driver(receiver: socket.socket, tmp_path: Path) -> None:
    switches: PowerSwitch = PowerSwitches({"BMC_USER": "admin", "BMC_PASSWORD": "pw-1234"})
    port = receiver.getsockname()[1]
    switches.power_on("kvm-07", wol(f"127.0.0.1:{port}"))
    assert received(receiver, 1)[0] == magic_packet(MAC)
    assert switches.power_state("kvm-07", wol()).state is PowerState.UNKNOWN

    with fake_redfish() as bmc:
        redfish = HostPower.model_validate({
            "driver": "redfish", "address": bmc.url, "timeout": "2s",
            "credentials": {"passEnv": ["BMC_USER", "BMC_PASSWORD"]},
        })  # fmt: skip
        assert switches.power_state("kvm-08", redfish).state is PowerState.ON
        switches.power_off("kvm-08", redfish)
        assert bmc.resets[-1][1] == "GracefulShutdown"

    marker = tmp_path / "marker"
    command = HostPower.model_validate({
        "driver": "command",
        "command": {"on": ["touch", str(marker)], "off": ["false"], "status": ["echo", "off"]},
    })  # fmt: skip
    switches.power_on("kvm-09", command)
    assert marker.exists()
    assert switches.power_state("kvm-09", command).state is PowerState.OFF
    assert "pw-1234" not in repr(switches)
