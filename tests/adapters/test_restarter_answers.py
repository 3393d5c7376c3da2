"""Whether libvirt on a host answers, as a fence's confirmation asks it: a host that answers,
one whose socket refuses, and one that accepts the connection and then says nothing (a hung
libvirtd), which must not be taken for an answer nor hold the caller past its timeout. A
rollout's host control asks the same question and gets the same answer."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest

from reconciler.adapters.lab.testdriver import node_xml
from reconciler.adapters.libvirt import connection
from reconciler.adapters.libvirt.connection import ConnectionSettings
from reconciler.adapters.libvirt.host_control import LibvirtHostControl
from reconciler.adapters.libvirt.restarter import LibvirtRestarter
from reconciler.model.base import API_VERSION
from reconciler.model.cluster import Cluster, ClusterMetadata, ClusterSpec, Host


def cluster(uri: str) -> Cluster:
    return Cluster(
        api_version=API_VERSION,
        kind="Cluster",
        metadata=ClusterMetadata(name="lab"),
        spec=ClusterSpec(hosts=[Host(name="kvm-01", uri=uri)]),
    )


def restarter(uri: str, timeout: float = 1.0) -> LibvirtRestarter:
    return LibvirtRestarter(cluster(uri), connection=ConnectionSettings(connect_timeout=timeout))


def host_control(uri: str, timeout: float = 1.0) -> LibvirtHostControl:
    return LibvirtHostControl(cluster(uri), connection=ConnectionSettings(connect_timeout=timeout))


@pytest.fixture
def hung(tmp_path: Path) -> Iterator[Path]:
    """A unix socket that accepts connections and never answers."""
    path = tmp_path / "libvirt-sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield path
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


def test_a_host_that_answers_says_its_version(tmp_path: Path) -> None:
    node = tmp_path / "kvm-01.xml"
    node.write_text(node_xml(""))
    said = restarter(f"test://{node}").answers("kvm-01")
    assert said.version is not None
    assert said.version.startswith("libvirt ")
    assert said.why is None


def test_a_host_whose_socket_refuses_does_not_answer(tmp_path: Path) -> None:
    uri = f"qemu+unix:///system?socket={tmp_path}/none"
    said = restarter(uri).answers("kvm-01")
    assert said.version is None
    assert said.why is not None
    assert uri in said.why


def test_a_hung_libvirtd_does_not_answer_and_is_given_up_at_the_timeout(hung: Path) -> None:
    began = time.monotonic()
    said = restarter(f"qemu+unix:///system?socket={hung}", timeout=1.0).answers("kvm-01")
    assert said.version is None
    assert said.why is not None
    assert "did not answer within 1s" in said.why
    assert time.monotonic() - began < 5


def test_the_restarter_and_a_rollouts_host_control_give_one_answer(
    tmp_path: Path, hung: Path
) -> None:
    node = tmp_path / "kvm-01.xml"
    node.write_text(node_xml(""))
    for uri in (
        f"test://{node}",
        f"qemu+unix:///system?socket={tmp_path}/none",
        f"qemu+unix:///system?socket={hung}",
    ):
        assert restarter(uri).answers("kvm-01") == host_control(uri).answers("kvm-01"), uri


class _NoDomains:
    """A libvirtd that says its version but cannot list its domains yet (just restarted)."""

    closed = False

    def getLibVersion(self) -> int:  # noqa: N802 - libvirt's name
        return 10_000_000

    def listAllDomains(self, flags: int) -> list[object]:  # noqa: N802
        raise libvirt.libvirtError("internal error: the domains are still being loaded")

    def close(self) -> int:
        self.closed = True
        return 0


def test_a_host_that_says_its_version_but_not_its_domains_answers_yet_is_not_ready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    daemon = _NoDomains()
    monkeypatch.setattr(connection, "open_connection", lambda uri, settings: daemon)
    uri = "qemu+ssh://kvm-01/system"
    said = restarter(uri).answers("kvm-01")
    assert said.version == "libvirt 10.0.0"  # a fence is not confirmed: it answers
    assert said.why is not None  # a rollout waits: it cannot be worked with yet
    assert "look failed on kvm-01" in said.why
    assert host_control(uri).answers("kvm-01") == said
    assert daemon.closed
