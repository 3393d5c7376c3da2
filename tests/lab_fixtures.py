"""Shared lab fixtures: one real lab per test session, or a visible skip where it cannot run.

Registered for every test through ``pytest_plugins`` in ``tests/conftest.py``. Tests that use
``lab`` (and are marked ``@pytest.mark.lab``) get a running 3-host lab with the default 8 VMs;
it is started once, under a temporary folder, and stopped at the end of the session, where the
teardown also checks that no process of it is left and that its folder is gone.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters import lab as lab_api
from reconciler.adapters.lab import Lab
from reconciler.config import load_desired
from reconciler.errors import LabError
from reconciler.model.cluster import Cluster

REQUIRE_LAB = "RECONCILER_REQUIRE_LAB"
"""Set (to anything but empty) where the lab must run, as in CI's lab job: a lab that cannot
start then fails the test instead of skipping it, so a green run has really migrated."""


def start_lab_or_skip(directory: Path, **kwargs: object) -> Lab:
    """``start_lab``, or skip the test with LabError's message where the lab cannot run (fail
    it when ``$RECONCILER_REQUIRE_LAB`` is set)."""
    try:
        return lab_api.start_lab(directory, **kwargs)  # type: ignore[arg-type]
    except LabError as err:
        if os.environ.get(REQUIRE_LAB):
            pytest.fail(f"the libvirt lab cannot start and ${REQUIRE_LAB} is set: {err}")
        pytest.skip(f"the libvirt lab cannot start on this machine: {err}")


def pid_alive(pid: int) -> bool:
    """True when ``pid`` runs and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def stop_and_check(directory: Path) -> None:
    """Stop the lab in ``directory``; fail if one of its processes survives or its folder stays."""
    pids = lab_api.lab_processes(directory)
    assert pids, "a running lab has processes"
    lab_api.stop_lab(directory)
    deadline = time.monotonic() + 5
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in pids if pid_alive(p)]
    assert not left, f"lab processes left after lab down: {left}"
    assert not directory.exists(), "lab down leaves the lab folder behind"


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A running 3-host lab with 8 VMs, shared by the whole session."""
    directory = tmp_path_factory.mktemp("lab") / "lab"
    started = start_lab_or_skip(directory)
    yield started
    stop_and_check(directory)


@pytest.fixture(scope="session")
def lab_cluster(lab: Lab) -> Cluster:
    """The Cluster of the running lab, read from the folder ``lab up`` wrote."""
    return load_desired(lab.cluster_dir).cluster


@pytest.fixture
def own_lab(tmp_path: Path) -> Iterator[Lab]:
    """A lab of its own for one test (3 hosts, 6 VMs): for tests that move VMs, so the shared
    session lab stays as it was."""
    directory = tmp_path / "lab"
    started = start_lab_or_skip(directory, hosts=3, vms=6)
    try:
        yield started
    finally:
        stop_and_check(directory)


def lab_with_local_pools(directory: Path, *, hosts: int, vms: int) -> Iterator[Lab]:
    """A lab of its own whose hosts each have a running ``dir`` pool ``local`` (the disks of a
    VM that are not on shared storage), for the moves that copy disks; stopped and checked at
    the end."""
    import libvirt  # the lab tests skip without it; plain tests import this module too

    started = start_lab_or_skip(directory, hosts=hosts, vms=vms)
    try:
        for host in started.hosts:
            conn = libvirt.open(host.uri)
            try:
                path = directory / "pools" / host.name
                path.mkdir(parents=True)
                pool = conn.storagePoolDefineXML(
                    f"<pool type='dir'><name>local</name><target><path>{path}</path></target>"
                    "</pool>"
                )
                pool.setAutostart(1)
                pool.create(0)
            finally:
                conn.close()
        yield started
    finally:
        stop_and_check(directory)


def migrate_plainly(
    lab: Lab, vm: str, source: str, target: str, *, keep_source: bool = False
) -> None:
    """Move ``vm`` from ``source`` to ``target`` of ``lab`` with libvirt alone (no limit), for a
    test's set-up; with ``keep_source`` its source's definition stays, shut off as migrated."""
    import libvirt  # the lab tests skip without it; plain tests import this module too

    uris = {h.name: h.uri for h in lab.hosts}
    flags = libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_PEER2PEER
    flags |= libvirt.VIR_MIGRATE_PERSIST_DEST
    if not keep_source:
        flags |= libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
    conn = libvirt.open(uris[source])
    try:
        conn.lookupByName(vm).migrateToURI3(
            uris[target],
            {
                libvirt.VIR_MIGRATE_PARAM_URI: "tcp://127.0.0.1",
                libvirt.VIR_MIGRATE_PARAM_LISTEN_ADDRESS: "127.0.0.1",
            },
            flags,
        )
    finally:
        conn.close()


@contextlib.contextmanager
def workload_lab(folder: Path, workload: str, **kwargs: object) -> Iterator[Lab]:
    """A lab of its own under ``folder`` whose guests do what ``workload`` (the YAML of ``lab up
    --workload FILE``) declares, with ``start_lab``'s other ``kwargs``; stopped and checked at
    the end."""
    (folder / "workload.yaml").write_text(workload)
    directory = folder / "lab"
    started = start_lab_or_skip(
        directory, workload=True, workload_file=folder / "workload.yaml", **kwargs
    )
    try:
        yield started
    finally:
        stop_and_check(directory)
