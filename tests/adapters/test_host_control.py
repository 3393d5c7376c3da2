"""The hosts' libvirt as a rollout uses it, on libvirt's test driver (test:///default, shared
by every connection of the process) and, for a guest that ignores the shutdown, on a domain
that never goes off."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("libvirt")

import libvirt  # noqa: E402

from reconciler.adapters.libvirt import host_control  # noqa: E402
from reconciler.adapters.libvirt.connection import ConnectionSettings  # noqa: E402
from reconciler.adapters.libvirt.host_control import LibvirtHostControl  # noqa: E402
from tests.core.builders import desired, host  # noqa: E402

pytestmark = pytest.mark.libvirt


def control(uri: str = "test:///default") -> LibvirtHostControl:
    cluster = desired([host("h0")]).cluster
    hosts = [cluster.spec.hosts[0].model_copy(update={"uri": uri})]
    cluster = cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"hosts": hosts})})
    return LibvirtHostControl(cluster, connection=ConnectionSettings(connect_timeout=2))


@pytest.fixture
def running() -> Iterator[Any]:
    """The test driver's domain ``test``, running, and running again afterwards."""
    conn = libvirt.open("test:///default")
    dom = conn.lookupByName("test")
    if not dom.isActive():
        dom.create()
    yield dom
    if not dom.isActive():
        dom.create()
    conn.close()


def test_a_host_that_answers_and_one_that_does_not() -> None:
    said = control().answers("h0")
    assert said.why is None
    assert said.version is not None
    said = control("test+tcp://127.0.0.1:1/default").answers("h0")
    assert said.version is None
    assert said.why is not None
    assert "127.0.0.1" in said.why


def test_shut_down_and_start_again(running: Any) -> None:
    hosts = control()
    assert hosts.shut_down("h0", ["test"], timedelta(seconds=5)) == {}
    assert not running.isActive()
    assert hosts.start("h0", ["test"]) == {}
    assert running.isActive()
    assert hosts.start("h0", ["test"]) == {}  # running already: started


def test_an_unknown_vm_is_named() -> None:
    hosts = control()
    left = hosts.shut_down("h0", ["nope"], timedelta(seconds=1))
    assert list(left) == ["nope"]
    assert "not there" in left["nope"]
    assert list(hosts.start("h0", ["nope"])) == ["nope"]


class _Stubborn:
    """A guest that ignores the graceful shutdown."""

    def __init__(self) -> None:
        self.asked = 0

    def isActive(self) -> bool:  # noqa: N802 - libvirt's name
        return True

    def shutdown(self) -> None:
        self.asked += 1

    def destroy(self) -> None:  # pragma: no cover - must never be called
        raise AssertionError("forced off")


class _Conn:
    def __init__(self, dom: _Stubborn) -> None:
        self.dom = dom

    def lookupByName(self, name: str) -> _Stubborn:  # noqa: N802
        return self.dom

    def close(self) -> None:
        pass


def test_a_guest_that_ignores_the_shutdown_is_reported_never_forced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dom = _Stubborn()
    monkeypatch.setattr(host_control, "open_connection", lambda uri, settings: _Conn(dom))
    clock = [0.0]
    hosts = control()
    hosts.sleep = lambda s: clock.__setitem__(0, clock[0] + s)
    hosts.monotonic = lambda: clock[0]
    left = hosts.shut_down("h0", ["stubborn"], timedelta(minutes=5))
    assert left == {"stubborn": "still running after 300s (not forced off)"}
    assert dom.asked == 1
    assert clock[0] == 300.0
