"""VMs on two hosts: which are duplicates (running twice, defined twice), which are moves in
progress, and that the planner moves none of them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core import duplicates
from reconciler.core.planner import plan
from reconciler.model.history import History
from reconciler.model.snapshot import (
    InFlight,
    MoveIntent,
    ReconcilerState,
    Unmigratable,
    UnmigratableReason,
    VmRunState,
    VmState,
)
from reconciler.model.status import Duplicate
from tests.core.builders import NOW, desired, host, host_state, snapshot, vm

HOSTS = [host_state("h0"), host_state("h1"), host_state("h2")]
HOST_NAMES = ["h0", "h1", "h2"]
RUNNING, PAUSED, SHUTOFF = VmRunState.RUNNING, VmRunState.PAUSED, VmRunState.SHUTOFF


def copy(on: str, state: VmRunState = RUNNING, **fields: object) -> VmState:
    return vm("db", on).model_copy(update={"state": state, **fields})


def found(*copies: VmState) -> list[Duplicate]:
    return duplicates.found(snapshot(HOSTS, list(copies)))


def test_a_vm_running_on_two_hosts_is_a_duplicate_however_the_observer_listed_it() -> None:
    twice = snapshot(
        HOSTS,
        [copy("h0"), copy("h2")],
        [InFlight(name="db", uuid="uuid-db", hosts=["h0", "h2"])],  # the observer's guess
    )
    assert duplicates.found(twice) == [
        Duplicate(vm="db", uuid="uuid-db", hosts=["h0", "h2"], running=True)
    ]


def test_a_copy_paused_by_a_person_or_an_error_still_runs() -> None:
    [d] = found(copy("h0"), copy("h1", PAUSED, state_reason="user"))
    assert d.running
    [d] = found(copy("h0", PAUSED, state_reason="I/O error"), copy("h1"))
    assert d.running


def test_a_live_migration_is_not_a_duplicate() -> None:
    # the incoming half is paused by libvirt until the guest switches over, then the outgoing
    assert found(copy("h0"), copy("h1", PAUSED, state_reason="migration", persistent=False)) == []
    assert found(copy("h0", PAUSED, state_reason="migration"), copy("h1")) == []
    assert found(copy("h0", PAUSED, state_reason="post-copy"), copy("h1")) == []
    assert found(copy("h0"), copy("h1", PAUSED, state_reason="starting up")) == []


def test_a_vm_defined_on_two_hosts_outside_a_move_is_a_duplicate() -> None:
    assert found(copy("h0"), copy("h1", SHUTOFF)) == [
        Duplicate(vm="db", uuid="uuid-db", hosts=["h0", "h1"], running=False)
    ]
    [d] = found(copy("h0", SHUTOFF), copy("h1", SHUTOFF), copy("h2", SHUTOFF))
    assert (d.hosts, d.running) == (["h0", "h1", "h2"], False)


def test_a_cold_move_or_a_migration_in_progress_is_not_one() -> None:
    intent = MoveIntent(plan_id="p", source="h0", target="h1", started_at=NOW)
    moving = ReconcilerState(intent=intent)
    assert found(copy("h0", SHUTOFF, reconciler=moving), copy("h1", SHUTOFF)) == []
    assert found(copy("h0"), copy("h1", PAUSED, state_reason="migration")) == []


def test_a_transient_copy_is_not_a_definition() -> None:
    assert found(copy("h0", persistent=False), copy("h1", SHUTOFF)) == []


def test_copies_under_other_names_are_one_vm_by_uuid() -> None:
    other = copy("h1").model_copy(update={"name": "db-restored"})
    [d] = found(copy("h0"), other)
    assert (d.vm, d.running) == ("db/db-restored", True)


def test_one_host_is_never_a_duplicate() -> None:
    assert found(copy("h0")) == []
    assert found(copy("h0"), copy("h0", SHUTOFF)) == []


def test_removed_copies_settle_a_duplicate() -> None:
    [d] = found(copy("h0"), copy("h1", SHUTOFF), copy("h2", SHUTOFF))
    assert duplicates.without_removed([d], [("uuid-db", "h1")]) == [
        d.model_copy(update={"hosts": ["h0", "h2"]})
    ]
    assert duplicates.without_removed([d], [("uuid-db", "h1"), ("uuid-db", "h2")]) == []


def test_a_duplicate_on_a_host_that_does_not_answer_is_carried() -> None:
    d = Duplicate(vm="db", uuid="uuid-db", hosts=["h0", "h1"], running=True)
    down = snapshot([HOSTS[0], host_state("h1", reachable=False), HOSTS[2]], [copy("h0")])
    assert duplicates.carried([d], down) == [d]
    assert duplicates.carried([d], snapshot(HOSTS, [copy("h0")])) == []


def test_a_held_duplicate_says_why_and_is_not_moved_even_when_placed_elsewhere() -> None:
    d = desired([host("h0"), host("h1"), host("h2")], placement={"db": "h1"})
    twice = snapshot(HOSTS, [copy("h0"), copy("h2")])
    held = duplicates.held(twice, duplicates.found(twice))
    assert all(not v.migratable for v in held.vms)
    assert [u.detail for u in held.vms[0].unmigratable] == ["a duplicate: it runs on h0 and h2"]
    p = plan(d, held, History(observed_since=NOW), now=NOW)
    assert p.moves == []
    assert any("a duplicate: it runs on h0 and h2" in u.message for u in p.unsatisfiable)
    # one copy gone: the drift is repaired
    once = snapshot(HOSTS, [copy("h0")])
    assert [m.vm for m in plan(d, once, History(observed_since=NOW), now=NOW).moves] == ["db"]


STATES = st.sampled_from([RUNNING, PAUSED, SHUTOFF, VmRunState.CRASHED])
REASONS = st.sampled_from(["", "user", "migration", "post-copy", "booted"])


@st.composite
def sightings(draw: st.DrawFn) -> list[VmState]:
    out: list[VmState] = []
    for name in ("a", "b", "c"):
        hosts = draw(st.lists(st.sampled_from(["h0", "h1", "h2"]), unique=True, max_size=3))
        for h in hosts:
            out.append(
                vm(name, h).model_copy(
                    update={
                        "state": draw(STATES),
                        "state_reason": draw(REASONS),
                        "persistent": draw(st.booleans()),
                    }
                )
            )
    return out


@settings(max_examples=200, deadline=None)
@given(sightings())
def test_what_is_reported_running_twice_is_live_on_each_host_it_names(
    copies: list[VmState],
) -> None:
    snap = snapshot(HOSTS, copies)
    reported = duplicates.found(snap)
    for d in reported:
        on = [v for v in copies if v.uuid == d.uuid and v.host in d.hosts]
        assert len({v.host for v in on}) == len(d.hosts) >= 2
        if d.running:
            assert all(duplicates.live(v) for v in on)
        else:
            assert all(v.persistent for v in on)
    running = {d.uuid for d in reported if d.running}
    for uuid in {v.uuid for v in copies}:
        live = {v.host for v in copies if v.uuid == uuid and duplicates.live(v)}
        assert (len(live) > 1) == (uuid in running)


@settings(max_examples=100, deadline=None)
@given(
    sightings(),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(["h0", "h1", "h2"])),
)
def test_the_planner_moves_no_duplicate(copies: list[VmState], placement: dict[str, str]) -> None:
    snap = snapshot(HOSTS, copies)
    reported = duplicates.found(snap)
    d = desired([host("h0"), host("h1"), host("h2")], placement=placement)
    p = plan(d, duplicates.held(snap, reported), History(observed_since=NOW), now=NOW)
    held = {x.vm for x in reported}
    assert not held & {m.vm for m in p.moves + p.deferred}


def test_a_duplicate_blocker_replaces_the_observers_in_flight_guess() -> None:
    guess = Unmigratable(code=UnmigratableReason.IN_FLIGHT, detail="seen on more than one host")
    twice = snapshot(
        HOSTS,
        [copy("h0", unmigratable=[guess]), copy("h1", unmigratable=[guess])],
        [InFlight(name="db", uuid="uuid-db", hosts=["h0", "h1"])],
    )
    held = duplicates.held(twice, duplicates.found(twice))
    assert held.in_flight == []
    assert {u.code for v in held.vms for u in v.unmigratable} == {UnmigratableReason.DUPLICATE}
