"""A host that would refuse a VM (observed CPU, machine type) is never its target,
and the plan says why when no other host is left."""

from __future__ import annotations

from reconciler.core.planner import plan
from reconciler.model.history import History
from reconciler.model.snapshot import VmState
from tests.core.builders import NOW, desired, host, host_state, snapshot, vm


def _refused(base: VmState, **by: str) -> VmState:
    return base.model_copy(update={"refused_by": by})


def test_a_drain_never_sends_a_vm_where_it_would_be_refused() -> None:
    d = desired([host("h0", maintenance=True), host("h1"), host("h2")])
    snap = snapshot(
        [host_state("h0"), host_state("h1"), host_state("h2")],
        [_refused(vm("a", "h0"), h1="its CPU is not compatible with h1")],
    )
    p = plan(d, snap, History(), now=NOW)
    assert [(m.vm, m.target) for m in p.moves] == [("a", "h2")]


def test_a_vm_every_other_host_refuses_stays_and_the_plan_says_why() -> None:
    d = desired([host("h0", maintenance=True), host("h1")])
    snap = snapshot(
        [host_state("h0"), host_state("h1")],
        [_refused(vm("a", "h0"), h1="its CPU (host-model) is not compatible with h1: avx512f")],
    )
    p = plan(d, snap, History(), now=NOW)
    assert p.moves == []
    said = " ".join(f"{u.rule} {u.message}" for u in p.unsatisfiable)
    assert "avx512f" in said, p.unsatisfiable


def test_balance_avoids_a_refusing_host() -> None:
    d = desired([host("h0"), host("h1"), host("h2")], threshold=5)
    busy = [vm(f"v{i}", "h0", cpu_used=3.0) for i in range(6)]
    refused = [_refused(v, h1="machine type pc-q35-9.2 unknown there") for v in busy]
    snap = snapshot([host_state("h0"), host_state("h1"), host_state("h2")], refused)
    p = plan(d, snap, History(), now=NOW)
    assert p.moves, "the imbalance is worth moves"
    assert all(m.target == "h2" for m in p.moves)
