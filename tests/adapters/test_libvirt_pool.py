"""The command's connection pool on libvirt's test driver: opened lazily, shared, reopened.

Each ``open`` of a test-driver node file makes a new private host, so a record is seen by a
later observation only when both went over the same connection: what the pool is for.
"""

from __future__ import annotations

from pathlib import Path

import libvirt
import pytest

from reconciler.adapters.lab import node_xml
from reconciler.adapters.libvirt.cluster_observer import LibvirtClusterObserver
from reconciler.adapters.libvirt.observe_host import STATIC_FACTS
from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.adapters.libvirt.recorder import LibvirtRecorder
from reconciler.errors import HostUnreachable
from reconciler.model.snapshot import ReconcilerState
from tests.adapters.test_libvirt_observer import cluster_of, vm_xml

pytestmark = pytest.mark.libvirt

UUID = "11111111-2222-3333-4444-555555555555"


def node(tmp_path: Path, name: str) -> str:
    path = tmp_path / f"{name}.xml"
    path.write_text(node_xml(vm_xml(f"vm-{name}", UUID)))
    return f"test://{path}"


def test_one_connection_per_host_shared_by_the_observer_and_the_recorder(tmp_path: Path) -> None:
    cluster = cluster_of(("kvm-01", node(tmp_path, "a")), ("kvm-02", node(tmp_path, "b")))
    with ConnectionPool({h.name: h.uri for h in cluster.spec.hosts}) as pool:
        assert pool.opened == 0  # opened on first use
        observer = LibvirtClusterObserver(cluster, pool=pool, sample_interval=0)
        recorder = LibvirtRecorder(cluster, pool=pool)
        first = observer.observe()
        assert pool.opened == 2
        assert {v.name for v in first.vms} == {"vm-a", "vm-b"}
        recorder.record("kvm-01", "vm-a", ReconcilerState(moves=7), uuid=UUID)
        again = observer.observe_hosts(["kvm-01"])
        assert [v.reconciler.moves for v in again.vms] == [7]  # the same private host
        assert pool.opened == 2


def test_a_fresh_look_takes_what_lasts_of_a_host_from_the_last_observation(
    tmp_path: Path,
) -> None:
    cluster = cluster_of(("kvm-01", node(tmp_path, "a")), ("kvm-02", node(tmp_path, "b")))
    with ConnectionPool({h.name: h.uri for h in cluster.spec.hosts}) as pool:
        observer = LibvirtClusterObserver(cluster, pool=pool, sample_interval=0)
        full = {str(h.name): h for h in observer.observe().hosts}
        fresh = observer.observe_hosts(["kvm-01"]).hosts[0]
        lasting = set(STATIC_FACTS)
        assert fresh.model_dump(include=lasting) == full["kvm-01"].model_dump(include=lasting)
        assert None not in (fresh.cpus, fresh.memory_total, fresh.hypervisor)  # not dropped
        assert fresh.memory_free == full["kvm-01"].memory_free  # asked again: it changes
        # neither capabilities, node info, hostname, nor the three versions asked again (nor
        # free huge pages where the host could not tell them: this driver cannot)
        assert full["kvm-01"].libvirt_calls - fresh.libvirt_calls in (6, 7)
        observer.known = {}  # what no observation found is asked
        asked = observer.observe_hosts(["kvm-01"]).hosts[0]
        assert asked.libvirt_calls == full["kvm-01"].libvirt_calls
        assert asked.model_dump(include=lasting) == fresh.model_dump(include=lasting)


def test_a_broken_connection_is_reopened_once_and_close_ends_the_pool(tmp_path: Path) -> None:
    uri = node(tmp_path, "a")
    pool = ConnectionPool({"kvm-01": uri})
    conn = pool.get("kvm-01")
    assert pool.get("kvm-01") is conn
    conn.close()  # libvirt no longer has it: the pool notices without a call to the host
    fresh = pool.get("kvm-01")
    assert fresh is not conn
    assert pool.opened == 2
    calls: list[object] = []

    def lookup(c: libvirt.virConnect) -> str:
        calls.append(c)
        if len(calls) == 1:
            c.close()  # the connection breaks under the first try
        return str(c.lookupByUUIDString(UUID).name())

    assert pool.call("kvm-01", lookup) == "vm-a"
    assert len(calls) == 2
    assert pool.opened == 3
    pool.close()
    with pytest.raises(RuntimeError):
        pool.get("kvm-01")


def test_a_host_that_cannot_be_opened_is_unreachable(tmp_path: Path) -> None:
    pool = ConnectionPool({"kvm-01": f"test://{tmp_path}/missing.xml"})
    with pytest.raises(HostUnreachable):
        pool.get("kvm-01")
    pool.close()


def test_a_dedicated_connection_is_no_one_elses_and_is_kept_for_the_next(tmp_path: Path) -> None:
    pool = ConnectionPool({"kvm-01": node(tmp_path, "a")})
    shared = pool.get("kvm-01")
    with pool.dedicated("kvm-01") as first:
        assert first is not shared
        with pool.dedicated("kvm-01") as second:  # two migrations from one host at once
            assert second is not first
            assert second is not shared
    assert pool.opened == 3
    with pool.dedicated("kvm-01") as again:
        assert again in (first, second)  # kept, not opened anew
    assert pool.opened == 3
    pool.close()
    assert not pool.alive(first)
    assert not pool.alive(second)
    with pytest.raises(RuntimeError), pool.dedicated("kvm-01"):
        pass


def test_a_dedicated_connection_that_broke_or_was_retired_is_not_lent_again(
    tmp_path: Path,
) -> None:
    pool = ConnectionPool({"kvm-01": node(tmp_path, "a")})
    with pool.dedicated("kvm-01") as broken:
        broken.close()
    with pool.dedicated("kvm-01") as retired:
        assert retired is not broken
        pool.retire(retired)
    assert pool.alive(retired)  # a call may still be running on it: not cut off
    with pool.dedicated("kvm-01") as fresh:
        assert fresh is not retired
    assert pool.opened == 3
    pool.close()
    assert not pool.alive(retired)


def test_a_dedicated_connection_to_a_host_that_cannot_be_opened_is_unreachable(
    tmp_path: Path,
) -> None:
    pool = ConnectionPool({"kvm-01": f"test://{tmp_path}/missing.xml"})
    with pytest.raises(HostUnreachable), pool.dedicated("kvm-01"):
        pass
    pool.close()
