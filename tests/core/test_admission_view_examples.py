"""``AdmissionView`` on fixed examples: each kind of change either followed in place (no new
build) or dropping the model (one more build), and in both cases the same model and the same
observation a build from scratch gives."""

from __future__ import annotations

from datetime import timedelta

from reconciler.core.admission import admit, judge
from reconciler.core.admission_view import AdmissionView
from reconciler.core.state import build
from reconciler.model.desired import DesiredState
from reconciler.model.snapshot import HostState, InFlight, Snapshot, VmRunState, VmState
from tests.core.builders import NOW, desired, host, host_state, snapshot, vm
from tests.core.test_admission import move
from tests.core.test_admission_view import HOSTS, canonical, cluster, merged, now_on

D = cluster(2)


def _start() -> Snapshot:
    apps = ["db", "db", "web", "web", "other", "other", "other"]
    vms = [
        vm(f"v{i}", HOSTS[i % 4], cpu_used=0.1 * (i + 1), labels={"app": app})
        for i, app in enumerate(apps)
    ]
    return snapshot([host_state(h) for h in HOSTS], vms)


def _same(view: AdmissionView, reference: Snapshot, d: DesiredState = D) -> None:
    """The view shows ``reference`` and, when settled, the model a build of it gives."""
    assert view.snapshot() == reference
    if view.settled:
        model, first, second = view.model()
        rebuilt = canonical(*build(d, reference))
        assert canonical(model, first) == rebuilt
        assert canonical(model, second) == rebuilt
    moves = [move("v0", "a", "c"), move("v2", "c", "d"), move("v5", "b", "d")]
    assert judge(view, moves, []) == admit(d, reference, moves, [], NOW)


def _built() -> tuple[AdmissionView, Snapshot]:
    start = _start()
    view = AdmissionView(D, start)
    view.model()
    assert view.builds == 1
    return view, start


def _fresh(hosts: list[HostState], vms: list[VmState], step: int = 1) -> Snapshot:
    snap = snapshot(hosts, vms)
    return snap.model_copy(update={"taken_at": NOW + timedelta(seconds=step)})


def _on(reference: Snapshot, *hosts: str) -> list[VmState]:
    return [v for v in reference.vms if v.host in hosts]


def test_a_vm_found_on_its_target_is_followed_in_place() -> None:
    view, reference = _built()
    view.vm_now_on("v1", "c")
    _same(view, now_on(reference, "v1", "c"))
    assert view.builds == 1


def test_a_vm_not_known_to_the_view_changes_nothing() -> None:
    view, reference = _built()
    view.vm_now_on("nobody", "c")
    _same(view, reference)
    assert view.builds == 1


def test_new_loads_on_hosts_looked_at_again_are_followed_in_place() -> None:
    view, reference = _built()
    busier = [
        v.model_copy(update={"cpu_used": 1.5, "memory_used": 3 << 30}) for v in _on(reference, "a")
    ]
    fresh = _fresh([host_state("a", cpus=8), host_state("b")], [*busier, *_on(reference, "b")])
    view.replace_hosts(fresh)
    _same(view, merged(reference, fresh))
    assert view.builds == 1
    assert view.taken_at == NOW + timedelta(seconds=1)


def test_a_vm_moving_between_hosts_looked_at_again_is_followed_in_place() -> None:
    view, reference = _built()
    moved = [v.model_copy(update={"host": "b"}) for v in _on(reference, "a")]
    fresh = _fresh([host_state("a"), host_state("b")], [*moved, *_on(reference, "b")])
    view.replace_hosts(fresh)
    _same(view, merged(reference, fresh))
    assert view.builds == 1


def test_changes_a_build_would_index_differently_drop_the_model() -> None:
    start = _start()
    a_vms = _on(start, "a")
    changes = {
        "a VM appears": [*a_vms, vm("v9", "a")],
        "a VM vanishes": a_vms[1:],
        "a VM's labels change": [
            a_vms[0].model_copy(update={"labels": {"app": "web"}}),
            *a_vms[1:],
        ],
    }
    for what, vms in changes.items():
        view, reference = _built()
        fresh = _fresh([host_state("a")], vms)
        view.replace_hosts(fresh)
        _same(view, merged(reference, fresh))
        assert view.builds == 2, what


def test_a_vm_seen_backed_by_huge_pages_drops_the_model_which_then_counts_them() -> None:
    # restarted with huge pages: a host's room counts every VM on it, so the model is built
    # again, and the verdicts are a build's on the merged picture
    view, reference = _built()
    a_vms = _on(reference, "a")
    paged = a_vms[0].model_copy(update={"hugepage_kib": 2048, "hugepages": 64})
    seen = host_state("a").model_copy(update={"hugepages_free": {2048: 0}})
    fresh = _fresh([seen], [paged, *a_vms[1:]])
    view.replace_hosts(fresh)
    _same(view, merged(reference, fresh))
    assert view.builds == 2
    assert view.model()[0].paged


def test_a_host_changing_what_it_can_take_drops_the_model() -> None:
    for what, seen in {
        "unreachable": host_state("b", reachable=False),
        "another architecture": host_state("b", arch="aarch64"),
    }.items():
        view, reference = _built()
        fresh = _fresh([seen], [] if not seen.reachable else _on(reference, "b"))
        view.replace_hosts(fresh)
        _same(view, merged(reference, fresh))
        assert view.builds == 2, what


def test_a_vm_seen_on_two_hosts_is_in_flight_until_found_on_one() -> None:
    view, reference = _built()
    v1 = _on(reference, "b")[0]
    incoming = v1.model_copy(update={"host": "c", "state": VmRunState.PAUSED})
    fresh = _fresh([host_state("c")], [*_on(reference, "c"), incoming])
    view.replace_hosts(fresh)
    reference = merged(reference, fresh)
    assert view.in_flight == {"v1"}
    assert not view.settled
    assert view.snapshot().in_flight == [InFlight(name="v1", uuid="uuid-v1", hosts=["b", "c"])]
    assert [s.host for s in view.sightings("v1")] == ["b", "c"]
    assert view.sighting("v1") == v1
    assert view.sighting("v1", "c") == incoming
    assert view.sighting("v1", "d") is None
    _same(view, reference)
    view.vm_now_on("v1", "c")
    reference = now_on(reference, "v1", "c")
    assert view.in_flight == {"v1"}, "listed in flight until its hosts are looked at again"
    _same(view, reference)
    looked = _fresh([host_state("b"), host_state("c")], _on(reference, "b", "c"), step=2)
    view.replace_hosts(looked)
    reference = merged(reference, looked)
    assert view.settled
    assert view.in_flight == set()
    _same(view, reference)
    assert view.builds == 2


def test_a_vm_seen_twice_and_then_once_again_is_settled_by_the_next_look() -> None:
    view, reference = _built()
    v1 = _on(reference, "b")[0]
    fresh = _fresh([host_state("c")], [*_on(reference, "c"), v1.model_copy(update={"host": "c"})])
    view.replace_hosts(fresh)
    reference = merged(reference, fresh)
    assert not view.settled
    gone = _fresh([host_state("b")], [v for v in _on(reference, "b") if v.name != "v1"], step=2)
    view.replace_hosts(gone)
    reference = merged(reference, gone)
    assert view.settled
    _same(view, reference)
    assert view.builds == 2


def test_a_listed_migration_ends_with_the_next_look_at_its_hosts() -> None:
    start = _start().model_copy(
        update={"in_flight": [InFlight(name="v0", uuid="uuid-v0", hosts=["a", "b"])]}
    )
    view = AdmissionView(D, start)
    assert view.in_flight == {"v0"}
    assert not view.settled
    fresh = _fresh([host_state("a")], _on(start, "a"))
    view.replace_hosts(fresh)
    assert view.settled
    assert view.builds == 0, "nothing was built while in flight"
    _same(view, merged(start, fresh))
    assert view.builds == 1


def test_changes_before_the_first_build_are_in_it() -> None:
    start = _start()
    view = AdmissionView(D, start)
    view.vm_now_on("v1", "d")
    fresh = _fresh([host_state("c", cpus=4)], _on(start, "c"))
    view.replace_hosts(fresh)
    assert view.builds == 0
    _same(view, merged(now_on(start, "v1", "d"), fresh))
    assert view.builds == 1


def test_a_host_outside_the_cluster_is_carried_but_never_modelled() -> None:
    d = desired([host(h) for h in HOSTS])
    start = _start()
    view = AdmissionView(d, start)
    view.model()
    fresh = _fresh([host_state("z")], [vm("v9", "z")])
    view.replace_hosts(fresh)
    _same(view, merged(start, fresh), d)
    assert view.builds == 1


def test_a_vm_the_view_never_saw_has_no_sighting() -> None:
    view = AdmissionView(D, _start())
    assert view.sighting("nobody") is None
    assert view.sighting("nobody", "a") is None
    assert view.sightings("nobody") == []


def test_a_vm_listed_twice_on_one_host_is_settled_once_found_where_it_runs() -> None:
    start = _start()
    twice = start.model_copy(update={"vms": [*start.vms, start.vms[0]]})
    view = AdmissionView(D, twice)
    assert view.in_flight == {"v0"}
    assert view.snapshot().in_flight == []
    view.vm_now_on("v0", "b")
    assert view.in_flight == set()
    assert view.settled
    _same(view, now_on(start, "v0", "b").model_copy(update={"in_flight": []}))


def test_a_name_seen_on_two_hosts_is_listed_in_flight_with_its_last_sighting_s_uuid() -> None:
    view, reference = _built()
    namesake = vm("v1", "c").model_copy(update={"uuid": "uuid-another"})
    fresh = _fresh([host_state("c")], [*_on(reference, "c"), namesake])
    view.replace_hosts(fresh)
    assert view.snapshot().in_flight == [InFlight(name="v1", uuid="uuid-another", hosts=["b", "c"])]
    _same(view, merged(reference, fresh))


def test_a_name_seen_on_three_hosts_is_listed_with_the_last_sighting_s_uuid() -> None:
    view, reference = _built()
    second = vm("v1", "c").model_copy(update={"uuid": "uuid-second"})
    third = vm("v1", "d").model_copy(update={"uuid": "uuid-third"})
    fresh = _fresh([host_state("c"), host_state("d")], [*_on(reference, "c", "d"), second, third])
    view.replace_hosts(fresh)
    listed = [InFlight(name="v1", uuid="uuid-third", hosts=["b", "c", "d"])]
    assert view.snapshot().in_flight == listed
    _same(view, merged(reference, fresh))
