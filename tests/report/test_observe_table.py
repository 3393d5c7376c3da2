"""`reconciler observe` as a table: a VM on two hosts is named as a duplicate, not as a
migration."""

from __future__ import annotations

from reconciler.model.snapshot import InFlight, VmRunState
from reconciler.report.observe_table import observe_table
from tests.core.builders import host_state, snapshot, vm

HOSTS = [host_state("h0"), host_state("h1")]


def test_a_vm_running_on_two_hosts_is_listed_as_a_duplicate() -> None:
    text = observe_table(
        snapshot(
            HOSTS,
            [vm("db", "h0"), vm("db", "h1")],
            [InFlight(name="db", uuid="uuid-db", hosts=["h0", "h1"])],
        )
    )
    assert "DUPLICATES" in text
    assert "  db (uuid-db) runs on h0 and h1" in text
    assert "in flight" not in text


def test_a_migration_is_listed_in_flight() -> None:
    incoming = vm("db", "h1").model_copy(
        update={"state": VmRunState.PAUSED, "state_reason": "migration", "persistent": False}
    )
    text = observe_table(
        snapshot(
            HOSTS,
            [vm("db", "h0"), incoming],
            [InFlight(name="db", uuid="uuid-db", hosts=["h0", "h1"])],
        )
    )
    assert "in flight (seen on more than one host):\n  db (uuid-db) on h0, h1" in text
    assert "DUPLICATES" not in text
