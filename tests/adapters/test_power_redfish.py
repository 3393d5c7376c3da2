"""The Redfish driver against a real third-party Redfish service: OpenStack's sushy-tools
emulator (``sushy-emulator``, its fake systems driver), on loopback, with basic
authentication, over HTTP and HTTPS. Its systems take a moment to change state after a
reset, as hardware does, so each change is read back until it shows."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.power.redfish import RedfishPower
from reconciler.errors import ConfigError, TerminalError
from reconciler.model.power import HostPower
from reconciler.model.recovery import PowerState
from tests.bmcs import PASSWORD, USER, Emulator, self_signed, sushy_emulator

ENV = {"BMC_USER": USER, "BMC_PASSWORD": PASSWORD}


def redfish(address: str, **more: object) -> HostPower:
    return HostPower.model_validate({
        "driver": "redfish",
        "address": address,
        "credentials": {"passEnv": ["BMC_USER", "BMC_PASSWORD"]},
        "timeout": "5s",
        **more,
    })  # fmt: skip


def wait_for(switch: RedfishPower, power: HostPower, state: PowerState) -> float:
    """Seconds until the BMC says ``state`` (within 5 s, else the test fails)."""
    started = time.monotonic()
    seen = switch.power_state("kvm-07", power)
    while seen.state is not state and time.monotonic() - started < 5:
        time.sleep(0.1)
        seen = switch.power_state("kvm-07", power)
    assert seen.state is state, seen
    return time.monotonic() - started


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    with sushy_emulator(tmp_path_factory.mktemp("sushy")) as running:
        yield running


def test_a_host_is_read_powered_off_gracefully_and_on_again(emulator: Emulator) -> None:
    switch = RedfishPower(ENV)
    power = redfish(emulator.url)  # no system: the only member of /redfish/v1/Systems

    status = switch.power_state("kvm-07", power)
    assert status.state is PowerState.ON
    assert status.detail == "PowerState On"

    switch.power_off("kvm-07", power)
    wait_for(switch, power, PowerState.OFF)
    switch.power_off("kvm-07", power)  # off already: harmless
    switch.power_on("kvm-07", power)
    wait_for(switch, power, PowerState.ON)

    # the emulator carried out what was asked: a graceful shutdown, then On
    said = emulator.said()
    assert said.count("POST /redfish/v1/Systems/00000000-0000-0000-0000-000000000001/Actions/") == 2


def test_a_refused_password_is_a_terminal_error_that_names_the_variables(
    emulator: Emulator,
) -> None:
    switch = RedfishPower({"BMC_USER": USER, "BMC_PASSWORD": "not-the-Pa55word"})
    power = redfish(emulator.url, system="/redfish/v1/Systems/00000000-0000-0000-0000-000000000001")
    with pytest.raises(TerminalError, match="answered 401") as err:
        switch.power_on("kvm-07", power)
    assert "BMC_USER/BMC_PASSWORD" in (err.value.hint or "")
    assert "not-the-Pa55word" not in f"{err.value} {err.value.hint} {err.value!r}"
    assert err.value.__cause__ is None  # an answer, not a library failure: nothing to chain

    status = switch.power_state("kvm-07", power)
    assert status.state is PowerState.UNKNOWN
    assert "401" in status.detail
    assert "not-the-Pa55word" not in status.detail


def test_a_missing_variable_is_named_and_nothing_is_sent(emulator: Emulator) -> None:
    before = emulator.said().count("GET /redfish/v1/Systems")
    switch = RedfishPower({"BMC_USER": USER})
    with pytest.raises(ConfigError, match="BMC_PASSWORD .* is not set") as err:
        switch.power_off("kvm-07", redfish(emulator.url))
    assert "never in the state repository" in (err.value.hint or "")
    empty = RedfishPower({"BMC_USER": "", "BMC_PASSWORD": PASSWORD})
    with pytest.raises(ConfigError, match="BMC_USER .* is empty"):
        empty.power_on("kvm-07", redfish(emulator.url))
    assert switch.power_state("kvm-07", redfish(emulator.url)).state is PowerState.UNKNOWN
    assert emulator.said().count("GET /redfish/v1/Systems") == before


def test_https_is_verified_unless_verify_tls_is_false(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert = self_signed(tmp_path)
    systems = (("kvm-07", "On"), ("kvm-08", "Off"))
    with sushy_emulator(tmp_path / "tls", systems, tls=cert) as emulator:
        assert emulator.url.startswith("https://")
        switch = RedfishPower(ENV)
        second = "00000000-0000-0000-0000-000000000002"  # an Id: under /redfish/v1/Systems

        with pytest.raises(TerminalError, match="TLS failed") as err:
            switch.power_on("kvm-08", redfish(emulator.url, system=second))
        assert "verifyTls: false" in (err.value.hint or "")
        assert switch.power_state("kvm-08", redfish(emulator.url)).state is PowerState.UNKNOWN

        # a certificate this machine trusts (here: the test's own, through SSL_CERT_FILE)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert[0]))
        trusted = RedfishPower(ENV).power_state("kvm-08", redfish(emulator.url, system=second))
        assert trusted.state is PowerState.OFF, trusted
        monkeypatch.delenv("SSL_CERT_FILE")

        lab = redfish(emulator.url, system=second, verifyTls=False)
        assert switch.power_state("kvm-08", lab).state is PowerState.OFF
        switch.power_on("kvm-08", lab)
        wait_for(switch, lab, PowerState.ON)

        # two systems and none named: which is the host cannot be guessed
        with pytest.raises(ConfigError, match="has 2 systems") as chosen:
            switch.power_off("kvm-07", redfish(emulator.url, verifyTls=False))
        assert "power.system" in (chosen.value.hint or "")
        assert f"/redfish/v1/Systems/{second}" in chosen.value.message
