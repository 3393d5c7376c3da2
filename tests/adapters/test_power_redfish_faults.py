"""The Redfish driver against a BMC that refuses, hangs, trickles, answers garbage or
without end, redirects, or lists no graceful shutdown: a small Redfish service on loopback
(``tests.redfishhttp``). Each is a clear error of the right kind, within the call's deadline,
with no password in it; ``power_state`` says unknown, with why."""

from __future__ import annotations

import base64
import logging
import socket
import time
import tracemalloc
from collections.abc import Iterator

import pytest

from reconciler.adapters.power.redfish import MAX_ANSWER, RedfishPower
from reconciler.errors import ConfigError, TerminalError, TransientError
from reconciler.model.power import HostPower
from reconciler.model.recovery import PowerState
from tests.adapters.test_power_redfish import ENV, redfish
from tests.bmcs import PASSWORD, USER
from tests.net import free_port
from tests.redfishhttp import FakeRedfish, System, fake_redfish

MIB = 1024 * 1024


@pytest.fixture
def bmc() -> Iterator[FakeRedfish]:
    with fake_redfish() as server:
        yield server


def quick(url: str, **more: object) -> HostPower:
    return redfish(url, **{"timeout": "1s", **more})


def no_secret(err: BaseException) -> None:
    hint = getattr(err, "hint", None)
    assert PASSWORD not in f"{err} {hint} {err!r}"


def test_the_reset_asked_is_graceful_and_sent_with_basic_auth(bmc: FakeRedfish) -> None:
    switch = RedfishPower(ENV)
    switch.power_off("kvm-07", quick(bmc.url))
    assert bmc.resets == [
        ("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", "GracefulShutdown")
    ]
    assert switch.power_state("kvm-07", quick(bmc.url)).state is PowerState.OFF
    switch.power_on("kvm-07", quick(bmc.url))
    assert bmc.resets[-1][1] == "On"
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert {auth for _, _, auth in bmc.requests} == {f"Basic {token}"}


def test_a_host_in_the_state_asked_is_not_asked_again(bmc: FakeRedfish) -> None:
    switch = RedfishPower(ENV)
    switch.power_on("kvm-07", quick(bmc.url))  # on already
    bmc.systems["1"].power = "Off"
    switch.power_off("kvm-07", quick(bmc.url))  # off already
    assert bmc.resets == []


def test_force_off_only_when_graceful_shutdown_is_not_offered(
    bmc: FakeRedfish, caplog: pytest.LogCaptureFixture
) -> None:
    bmc.systems["1"] = System("On", ["On", "ForceOff", "ForceRestart"])
    with caplog.at_level(logging.WARNING, logger="reconciler.adapters.power.redfish"):
        RedfishPower(ENV).power_off("kvm-07", quick(bmc.url))
    assert bmc.resets[-1][1] == "ForceOff"
    assert "offers no GracefulShutdown" in caplog.text
    assert "ForceOff" in caplog.text

    # a BMC that lists no allowed values is asked for the graceful shutdown
    bmc.systems["1"] = System("On", None)
    RedfishPower(ENV).power_off("kvm-07", quick(bmc.url))
    assert bmc.resets[-1][1] == "GracefulShutdown"

    bmc.systems["1"] = System("On", ["On", "ForceRestart"])
    with pytest.raises(TerminalError, match="neither GracefulShutdown nor ForceOff"):
        RedfishPower(ENV).power_off("kvm-07", quick(bmc.url))


@pytest.mark.parametrize("state", ["PoweringOn", "PoweringOff", "Paused", None])
def test_a_state_between_on_and_off_is_unknown(bmc: FakeRedfish, state: str | None) -> None:
    bmc.systems["1"].power = state  # type: ignore[assignment]
    status = RedfishPower(ENV).power_state("kvm-07", quick(bmc.url))
    assert status.state is PowerState.UNKNOWN
    assert status.detail == (f"PowerState {state}" if state else "no PowerState in the system")


@pytest.mark.parametrize(
    ("status", "kind", "words"),
    [
        (401, TerminalError, "answered 401"),
        (403, TerminalError, "answered 403"),
        (400, TerminalError, "answered 400"),
        (404, TerminalError, "answered 404"),
        (503, TransientError, "answered 503"),
        (429, TransientError, "answered 429"),
    ],
)
def test_refusals_and_failures_are_mapped(
    bmc: FakeRedfish, status: int, kind: type[Exception], words: str
) -> None:
    bmc.fault, bmc.status = "status", status
    bmc.error_text = f"No, said the BMC (it was given {PASSWORD})"
    with pytest.raises(kind, match=words) as err:
        RedfishPower(ENV).power_on("kvm-07", quick(bmc.url))
    assert "No, said the BMC" in str(err.value)  # the BMC's own words, from ExtendedInfo
    no_secret(err.value)
    if status in (401, 403):
        assert "BMC_USER" in (err.value.hint or "")  # type: ignore[attr-defined]
    status_now = RedfishPower(ENV).power_state("kvm-07", quick(bmc.url))
    assert status_now.state is PowerState.UNKNOWN
    assert words in status_now.detail
    assert PASSWORD not in status_now.detail


@pytest.mark.parametrize("fault", ["hang", "trickle"])
def test_a_bmc_that_hangs_or_trickles_is_given_up_at_the_deadline(
    bmc: FakeRedfish, fault: str
) -> None:
    bmc.fault = fault
    started = time.monotonic()
    with pytest.raises(TransientError, match="did not answer within 1s") as err:
        RedfishPower(ENV).power_off("kvm-07", quick(bmc.url))
    took = time.monotonic() - started
    assert 0.9 < took < 4, took  # at the deadline, not when the server gives up (30 s)
    assert isinstance(err.value.__cause__, Exception)  # raised from httpx's error
    if fault == "trickle":
        assert bmc.sent > 1  # it did send: each read alone was within the timeout
    started = time.monotonic()
    status = RedfishPower(ENV).power_state("kvm-07", quick(bmc.url))
    assert status.state is PowerState.UNKNOWN
    assert "did not answer within 1s" in status.detail
    assert 0.9 < status.seconds < 4


def test_garbage_is_not_taken_for_a_state(bmc: FakeRedfish) -> None:
    bmc.fault = "garbage"
    with pytest.raises(TerminalError, match="not a Redfish resource") as err:
        RedfishPower(ENV).power_on("kvm-07", quick(bmc.url))
    assert "Welcome to the BMC" in err.value.message
    assert RedfishPower(ENV).power_state("kvm-07", quick(bmc.url)).state is PowerState.UNKNOWN


def test_an_endless_answer_is_read_no_further_than_the_cap(bmc: FakeRedfish) -> None:
    bmc.fault = "flood"
    tracemalloc.start()
    try:
        with pytest.raises(TerminalError, match="more than 1MiB"):
            RedfishPower(ENV).power_on("kvm-07", redfish(bmc.url))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert MAX_ANSWER == MIB
    assert peak < 8 * MIB, peak
    assert bmc.sent < 64 * MIB, bmc.sent


def test_a_redirect_is_not_followed(bmc: FakeRedfish) -> None:
    bmc.fault = "redirect"
    with pytest.raises(TerminalError, match="redirect .*301.* to https://elsewhere.invalid"):
        RedfishPower(ENV).power_on("kvm-07", quick(bmc.url))
    assert len(bmc.requests) == 1


def test_nothing_listening_is_transient_and_quick() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(TransientError, match="could not be reached: ConnectError"):
        RedfishPower(ENV).power_on("kvm-07", quick(f"http://127.0.0.1:{port}"))
    assert time.monotonic() - started < 1


def test_a_bmc_whose_connection_never_completes_is_given_up_at_the_deadline() -> None:
    with socket.socket() as sock:  # a full backlog: a new connection hangs, as to a dead BMC
        sock.bind(("127.0.0.1", 0))
        sock.listen(0)
        port = sock.getsockname()[1]
        fillers = [socket.socket() for _ in range(3)]
        try:
            for f in fillers:
                f.setblocking(False)
                f.connect_ex(("127.0.0.1", port))
            started = time.monotonic()
            with pytest.raises(TransientError, match="did not answer within 1s"):
                RedfishPower(ENV).power_on("kvm-07", quick(f"http://127.0.0.1:{port}"))
            assert time.monotonic() - started < 4
        finally:
            for f in fillers:
                f.close()


def test_the_system_is_chosen_or_named(bmc: FakeRedfish) -> None:
    bmc.systems = {"1": System("On"), "2": System("Off")}
    switch = RedfishPower(ENV)
    with pytest.raises(
        ConfigError, match="has 2 systems .*/redfish/v1/Systems/1, /redfish/v1/Systems/2"
    ):
        switch.power_on("kvm-07", quick(bmc.url))
    assert switch.power_state("kvm-07", quick(bmc.url, system="2")).state is PowerState.OFF
    path = "/redfish/v1/Systems/2"
    assert switch.power_state("kvm-07", quick(bmc.url, system=path)).state is PowerState.OFF
    switch.power_on("kvm-07", quick(bmc.url, system="2"))
    assert bmc.resets == [(f"{path}/Actions/ComputerSystem.Reset", "On")]
    with pytest.raises(TerminalError, match="answered 404") as err:
        switch.power_on("kvm-07", quick(bmc.url, system="9"))
    assert "power.system" in (err.value.hint or "")
    bmc.systems = {}
    with pytest.raises(TerminalError, match="lists no ComputerSystem"):
        switch.power_on("kvm-07", quick(bmc.url))


def test_an_address_with_credentials_in_it_is_refused_before_anything_is_sent(
    bmc: FakeRedfish,
) -> None:
    host = bmc.url.removeprefix("http://")
    with pytest.raises(ConfigError, match="holds credentials") as err:
        RedfishPower(ENV).power_on("kvm-07", quick(f"http://admin:{PASSWORD}@{host}"))
    no_secret(err.value)
    assert bmc.requests == []
    with pytest.raises(ConfigError, match="is a URL"):
        RedfishPower(ENV).power_on(
            "kvm-07", quick(bmc.url, system=f"{bmc.url}/redfish/v1/Systems/1")
        )


def test_no_secret_in_the_driver_s_repr() -> None:
    assert PASSWORD not in repr(RedfishPower(ENV))
