"""Whether libvirt on a host answers, as a fence's confirmation asks it: a host that answers,
one whose socket refuses, and one that accepts the connection and then says nothing (a hung
libvirtd), which must not be taken for an answer nor hold the caller past its timeout."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.lab.testdriver import node_xml
from reconciler.adapters.libvirt.connection import ConnectionSettings
from reconciler.adapters.libvirt.restarter import LibvirtRestarter
from reconciler.model.base import API_VERSION
from reconciler.model.cluster import Cluster, ClusterMetadata, ClusterSpec, Host


def restarter(uri: str, timeout: float = 1.0) -> LibvirtRestarter:
    cluster = Cluster(
        api_version=API_VERSION,
        kind="Cluster",
        metadata=ClusterMetadata(name="lab"),
        spec=ClusterSpec(hosts=[Host(name="kvm-01", uri=uri)]),
    )
    return LibvirtRestarter(cluster, connection=ConnectionSettings(connect_timeout=timeout))


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
    assert said is not None
    assert said.startswith("libvirt ")


def test_a_host_whose_socket_refuses_does_not_answer(tmp_path: Path) -> None:
    uri = f"qemu+unix:///system?socket={tmp_path}/none"
    assert restarter(uri).answers("kvm-01") is None


def test_a_hung_libvirtd_does_not_answer_and_is_given_up_at_the_timeout(hung: Path) -> None:
    began = time.monotonic()
    assert restarter(f"qemu+unix:///system?socket={hung}", timeout=1.0).answers("kvm-01") is None
    assert time.monotonic() - began < 5
