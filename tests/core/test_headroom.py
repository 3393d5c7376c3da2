"""N+k admission (reserveHosts): properties of the check, and place refusing a VM that breaks it."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core import headroom
from reconciler.core.headroom import HostBin
from reconciler.core.placer import place
from tests.core.builders import GIB, NOW, desired, host, host_state, snapshot, vm

sizes = st.integers(min_value=1, max_value=16)
clusters = st.lists(
    st.tuples(st.integers(min_value=8, max_value=64), st.lists(sizes, max_size=5)),
    min_size=1,
    max_size=5,
)


def as_bins(spec: list[tuple[int, list[int]]]) -> list[HostBin]:
    return [
        HostBin(f"h{i}", room * GIB, tuple((f"v{i}-{j}", m * GIB) for j, m in enumerate(vms)))
        for i, (room, vms) in enumerate(spec)
    ]


@settings(max_examples=200, deadline=None)
@given(clusters, st.integers(min_value=0, max_value=3))
def test_when_it_holds_every_k_hosts_fit_on_the_rest_by_total(
    spec: list[tuple[int, list[int]]], k: int
) -> None:
    bins = as_bins(spec)
    if headroom.problem(bins, k) is not None:
        return
    for failed in combinations(range(len(bins)), min(k, len(bins))):
        need = sum(bins[i].load for i in failed)
        free = sum(max(0, b.room - b.load) for i, b in enumerate(bins) if i not in failed)
        assert need <= free


@settings(max_examples=200, deadline=None)
@given(clusters, st.integers(min_value=0, max_value=3), sizes, st.data())
def test_adding_a_vm_never_makes_room(
    spec: list[tuple[int, list[int]]], k: int, extra: int, data: st.DataObject
) -> None:
    i = data.draw(st.integers(min_value=0, max_value=len(spec) - 1))
    more = [(r, [*vms, extra] if n == i else vms) for n, (r, vms) in enumerate(spec)]
    if headroom.problem(as_bins(spec), k) is not None:
        assert headroom.problem(as_bins(more), k) is not None


@settings(max_examples=200, deadline=None)
@given(clusters, st.integers(min_value=0, max_value=2))
def test_more_reserve_is_never_easier(spec: list[tuple[int, list[int]]], k: int) -> None:
    bins = as_bins(spec)
    if headroom.problem(bins, k) is not None:
        assert headroom.problem(bins, k + 1) is not None


def test_k_zero_always_holds_and_k_of_all_hosts_never() -> None:
    bins = as_bins([(64, [60]), (64, [60])])
    assert headroom.problem(bins, 0) is None
    assert headroom.problem(bins, 2) is not None
    assert headroom.problem(bins, 1) is not None


def test_place_refuses_a_vm_that_leaves_no_room_for_a_failed_host() -> None:
    hosts = [host("a"), host("b")]
    snap = snapshot(
        [host_state("a", memory_gib=16), host_state("b", memory_gib=16)],
        [vm("x", "a", memory_gib=4)],
    )
    free = place(desired(hosts), snap, vcpus=1, memory=11 * GIB, labels={}, now=NOW)
    assert free.host is not None
    kept = place(
        desired(hosts, recovery={"reserveHosts": 1}),
        snap,
        vcpus=1,
        memory=11 * GIB,
        labels={},
        now=NOW,
    )
    assert kept.host is None
    assert any("reserveHosts 1" in r for c in kept.candidates for r in c.reasons)
