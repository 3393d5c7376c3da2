"""Huge pages counted like memory: a host's room in pages of a size is what it has free plus
what its VMs of that size hold, and the VMs planned onto it never need more than that.

Fixed examples at each edge, for every place a move or a placement is decided (drain and
balance, the exact model, ``place``, the restart of a dead host's VMs, admission), then a
property over random clusters for the heuristic and the exact plans."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.core import exact, observations, planner
from reconciler.core.admission import AdmitCode, Verdict, admit, judge
from reconciler.core.admission_view import AdmissionView
from reconciler.core.hugepages import (
    kib_of,
    need_in_xml,
    need_of,
    pages_for,
    pages_moved,
    rooms,
    started,
)
from reconciler.core.placer import place
from reconciler.core.planner import plan
from reconciler.core.recovery import restart_plan
from reconciler.core.state import build
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.plan import Move, Plan
from reconciler.model.recovery import SavedVm
from reconciler.model.snapshot import HostState, InFlight, Snapshot, VmRunState, VmState
from tests.core.builders import GIB, NOW, desired, host, host_state, rule, snapshot, vm
from tests.core.test_admission import move

TWO_MIB = 2048
ONE_GIB = 1024 * 1024
PAGES = "hugepages of 2048 KiB"


def paged(base: VmState, pages: int, kib: int = TWO_MIB) -> VmState:
    """``base`` backed by ``pages`` huge pages of ``kib`` KiB."""
    return base.model_copy(update={"hugepage_kib": kib, "hugepages": pages})


def free(state: HostState, **by_size: int) -> HostState:
    """``state`` reporting free pages: ``free(h, p2048=512, p1048576=0)``."""
    pages = {int(k.removeprefix("p")): n for k, n in by_size.items()}
    return state.model_copy(update={"hugepages_free": pages})


def drain(
    *others: HostState, vms: list[VmState], extra: list[VmState] | None = None
) -> tuple[DesiredState, Snapshot]:
    """h0 in maintenance holding ``vms``; ``others`` take them."""
    d = desired(
        [host("h0", maintenance=True), *(host(h.name) for h in others)],
        hostLimit=100,
    )
    return d, snapshot([host_state("h0"), *others], [*vms, *(extra or [])])


def run(d: DesiredState, s: Snapshot) -> Plan:
    return plan(d, s, History(), now=NOW)


def said(p: Plan) -> str:
    return " ".join(u.message for u in p.unsatisfiable)


# --- the edges ----------------------------------------------------------------------------------


def test_exactly_the_room_fits_one_page_over_does_not() -> None:
    d, s = drain(free(host_state("h1"), p2048=512), vms=[paged(vm("a", "h0"), 512)])
    assert [(m.vm, m.target) for m in run(d, s).moves] == [("a", "h1")]
    d, s = drain(free(host_state("h1"), p2048=511), vms=[paged(vm("a", "h0"), 512)])
    p = run(d, s)
    assert p.moves == []
    assert "h1 has room for 511 hugepages of 2048 KiB, the VMs planned there need 512" in said(p)


def test_two_vms_that_fit_alone_but_not_together_go_to_different_hosts() -> None:
    vms = [paged(vm("a", "h0"), 512), paged(vm("b", "h0"), 512)]
    d, s = drain(free(host_state("h1"), p2048=768), free(host_state("h2"), p2048=768), vms=vms)
    p = run(d, s)
    assert sorted(m.target for m in p.moves) == ["h1", "h2"]
    # with one such host, one of them moves and the plan says why the other cannot
    d, s = drain(free(host_state("h1"), p2048=768), vms=vms)
    p = run(d, s)
    assert [m.target for m in p.moves] == ["h1"]
    assert "h1 has room for 768 hugepages of 2048 KiB, the VMs planned there need 1024" in said(p)


def test_pages_of_another_size_are_not_counted() -> None:
    # h1's 1 GiB pages are all held by c; its 2 MiB pages are free for a
    h1 = free(host_state("h1"), p2048=512, p1048576=0)
    c = paged(vm("c", "h1"), 4, ONE_GIB)
    d, s = drain(h1, vms=[paged(vm("a", "h0"), 512)], extra=[c])
    assert [(m.vm, m.target) for m in run(d, s).moves] == [("a", "h1")]
    # a VM of 1 GiB pages finds no room there: c holds them all
    d, s = drain(h1, vms=[paged(vm("g", "h0"), 1, ONE_GIB)], extra=[c])
    p = run(d, s)
    assert p.moves == []
    assert "h1 has room for 4 hugepages of 1048576 KiB, the VMs planned there need 5" in said(p)


def test_a_host_offering_other_sizes_only_has_no_room_for_a_vm_of_this_one() -> None:
    d, s = drain(free(host_state("h1"), p1048576=64), vms=[paged(vm("a", "h0"), 1)])
    p = run(d, s)
    assert p.moves == []
    assert "h1 has room for 0 hugepages of 2048 KiB" in said(p)


def test_a_host_that_reported_no_free_pages_is_not_limited() -> None:
    d, s = drain(host_state("h1"), vms=[paged(vm("a", "h0"), 100_000)])
    assert [(m.vm, m.target) for m in run(d, s).moves] == [("a", "h1")]


def test_a_shut_off_vm_holds_no_pages() -> None:
    off = paged(vm("off", "h1"), 512).model_copy(update={"state": VmRunState.SHUTOFF})
    d, s = drain(free(host_state("h1"), p2048=512), vms=[paged(vm("a", "h0"), 512)], extra=[off])
    assert [(m.vm, m.target) for m in run(d, s).moves] == [("a", "h1")]


def test_a_vm_leaving_a_host_frees_its_pages_for_one_planned_there_in_a_later_wave() -> None:
    # b must go to h2 (a required host rule); a leaves h0 for maintenance and fits on h1 only
    # once b has left it: b's wave comes first
    d = desired(
        [host("h0", maintenance=True), host("h1"), host("h2")],
        hostLimit=100,
        rules=[
            rule(
                name="b-on-h2",
                type="hostAffinity",
                vms={"names": ["b"]},
                hosts={"names": ["h2"]},
                enforcement="required",
            )
        ],
    )
    s = snapshot(
        [host_state("h0"), free(host_state("h1"), p2048=0), free(host_state("h2"), p2048=512)],
        [paged(vm("a", "h0"), 512), paged(vm("b", "h1"), 512)],
    )
    p = run(d, s)
    moves: dict[str, Move] = {m.vm: m for m in [*p.moves, *p.deferred]}
    assert {n: m.target for n, m in moves.items()} == {"a": "h1", "b": "h2"}
    assert moves["a"].wave > moves["b"].wave
    # admission agrees: b starts, a waits for b's migration to end, then starts
    verdicts = admit(d, s, [moves["b"], moves["a"]], [], NOW)
    assert [(v.move.vm, v.verdict) for v in verdicts] == [("b", Verdict.ADMIT), ("a", Verdict.WAIT)]
    assert verdicts[1].code is AdmitCode.DEPENDS_ON_RUNNING
    ended = s.model_copy(
        update={"vms": [v if v.name != "b" else v.model_copy(update={"host": "h2"}) for v in s.vms]}
    )
    after = ended.model_copy(
        update={
            "hosts": [
                free(host_state("h0")),
                free(host_state("h1"), p2048=512),
                free(host_state("h2"), p2048=0),
            ]
        }
    )
    (verdict,) = admit(d, after, [moves["a"]], [], NOW)
    assert verdict.verdict is Verdict.ADMIT, verdict.message


def test_balance_does_not_pile_pages_on_the_coolest_host() -> None:
    # h0 is busy; h1 is idle but its room takes one of the paged VMs only
    d = desired([host("h0"), host("h1"), host("h2")], threshold=5, hostLimit=100)
    vms = [paged(vm(f"p{i}", "h0", cpu_used=3.0), 256) for i in range(4)]
    s = snapshot(
        [
            free(host_state("h0"), p2048=0),
            free(host_state("h1"), p2048=256),
            free(host_state("h2"), p2048=256),
        ],
        vms,
    )
    p = run(d, s)
    assert p.moves, "the imbalance is worth moves"
    assert Counter(m.target for m in [*p.moves, *p.deferred]) <= Counter({"h1": 1, "h2": 1})


def test_the_exact_model_keeps_pages_within_each_room() -> None:
    # a and b leave h0 (not in the scope); the spread target wants both beside c's load on h1
    # and h2 alike, so both on h1: within its room of 1,024 pages, not of 768
    d = desired([host("h0"), host("h1"), host("h2")], hostLimit=100)
    vms = [paged(vm(n, "h0", cpu_used=4.0), 512) for n in ("a", "b")]
    vms.append(vm("c", "h2", vcpus=4, cpu_used=8.0, memory_gib=8))

    def solve(room: int) -> exact.Solution | None:
        hosts = [host_state("h0"), free(host_state("h1"), p2048=room), host_state("h2")]
        model, state = build(d, snapshot(hosts, vms))
        fixed = model.vm_index["c"]
        return exact.solve(state, {"x86_64": [1, 2]}, lambda v: v != fixed, {}, {"x86_64": 5.0})

    found = solve(1024)
    assert found is not None
    assert sorted(found.target.values()) == [1, 1]
    assert solve(1023) is None


def test_place_counts_the_pages_of_a_new_vm() -> None:
    d = desired([host("h1"), host("h2")], hostLimit=100)
    s = snapshot(
        [free(host_state("h1"), p2048=511), free(host_state("h2"), p2048=512)],
        [paged(vm("x", "h2"), 1)],
    )

    def answer(pages: int) -> tuple[str | None, dict[str, list[str]]]:
        found = place(
            d, s, vcpus=2, memory=GIB, labels={}, name="db", now=NOW, hugepages=(TWO_MIB, pages)
        )
        return found.host, {c.host: c.reasons for c in found.candidates if not c.fits}

    where, why = answer(512)
    assert where == "h2"
    assert why == {
        "h1": ["h1 has room for 511 hugepages of 2048 KiB, the VMs planned there need 512"]
    }
    where, why = answer(513)
    assert where is None
    assert why["h2"] == [
        "h2 has room for 513 hugepages of 2048 KiB, the VMs planned there need 514"
    ]


def _saved(name: str, pages: int) -> SavedVm:
    xml = (
        f"<domain type='kvm'><name>{name}</name><memory unit='KiB'>{pages * TWO_MIB}</memory>"
        "<memoryBacking><hugepages/></memoryBacking></domain>"
    )
    return SavedVm(
        name=name, uuid=f"uuid-{name}", host="dead", running=True, vcpus=1, memory=pages << 21,
        xml=xml, seen_at=NOW,
    )  # fmt: skip


def test_restarts_of_a_dead_hosts_vms_are_summed_on_their_targets() -> None:
    d = desired([host("dead"), host("h1"), host("h2")], hostLimit=100)
    s = snapshot(
        [
            host_state("dead", reachable=False),
            free(host_state("h1"), p2048=768),
            free(host_state("h2"), p2048=768),
        ],
        [],
    )
    restarts = restart_plan(d, s, [_saved("a", 512), _saved("b", 512)], now=NOW)
    assert sorted(r.target or "-" for r in restarts) == ["h1", "h2"], [r.why for r in restarts]
    only = s.model_copy(update={"hosts": s.hosts[:2]})
    d1 = desired([host("dead"), host("h1")], hostLimit=100)
    a, b = restart_plan(d1, only, [_saved("a", 512), _saved("b", 512)], now=NOW)
    assert a.target == "h1"
    assert b.target is None
    assert "h1 has room for 768 hugepages of 2048 KiB, the VMs planned there need 1024" in b.why


# --- admission ----------------------------------------------------------------------------------


def _two_for_h1(room: int) -> tuple[DesiredState, Snapshot]:
    d = desired([host("h0"), host("h1")], hostLimit=100)
    s = snapshot(
        [free(host_state("h0"), p2048=0), free(host_state("h1"), p2048=room)],
        [paged(vm("a", "h0"), 512), paged(vm("b", "h0"), 512)],
    )
    return d, s


def _to_h1(name: str) -> Move:
    return move(name, "h0", "h1")


def test_admission_sums_two_moves_to_one_host_in_the_same_pass() -> None:
    d, s = _two_for_h1(768)
    first, second = admit(d, s, [_to_h1("a"), _to_h1("b")], [], NOW)
    assert (first.verdict, second.verdict) == (Verdict.ADMIT, Verdict.SKIP)
    assert second.code is AdmitCode.NO_ROOM
    assert second.message == (
        "h1 has room for 768 hugepages of 2048 KiB, the VMs planned there need 1024"
    )
    d, s = _two_for_h1(1024)
    verdicts = admit(d, s, [_to_h1("a"), _to_h1("b")], [], NOW)
    assert [v.verdict for v in verdicts] == [Verdict.ADMIT, Verdict.ADMIT]


def test_admission_counts_a_move_in_flight_on_its_target() -> None:
    d, s = _two_for_h1(768)
    (verdict,) = admit(d, s, [_to_h1("b")], [_to_h1("a")], NOW)
    assert (verdict.verdict, verdict.code) == (Verdict.SKIP, AdmitCode.NO_ROOM)
    # the same while libvirt shows a's incoming copy on h1, holding its pages already
    incoming = paged(vm("a", "h1"), 512).model_copy(update={"state": VmRunState.PAUSED})
    flying = snapshot(
        [free(host_state("h0"), p2048=0), free(host_state("h1"), p2048=768 - 512)],
        [*s.vms, incoming],
        [InFlight(name="a", uuid="uuid-a", hosts=["h0", "h1"])],
    )
    (verdict,) = admit(d, flying, [_to_h1("b")], [_to_h1("a")], NOW)
    assert (verdict.verdict, verdict.code) == (Verdict.SKIP, AdmitCode.NO_ROOM)
    assert "room for 768 hugepages" in verdict.message
    # and a smaller VM that fits beside it is admitted: the incoming copy is counted once
    small = paged(vm("c", "h0"), 256)
    roomy = flying.model_copy(update={"vms": [*flying.vms, small]})
    (verdict,) = admit(d, roomy, [_to_h1("c")], [_to_h1("a")], NOW)
    assert verdict.verdict is Verdict.ADMIT, verdict.message


def test_the_admission_view_follows_a_vm_to_its_target_with_its_pages() -> None:
    # the executor's view learns a's migration ended (no fresh look at h1 yet): h1's room
    # stays 768, a holds 512 of it, so b does not fit; once a is back on h0, b does
    d, s = _two_for_h1(768)
    view = AdmissionView(d, s)
    assert [v.verdict for v in judge(view, [_to_h1("a")], [])] == [Verdict.ADMIT]
    view.vm_now_on("a", "h1")
    (verdict,) = judge(view, [_to_h1("b")], [])
    assert (verdict.verdict, verdict.code) == (Verdict.SKIP, AdmitCode.NO_ROOM), verdict.message
    view.vm_now_on("a", "h0")
    (verdict,) = judge(view, [_to_h1("b")], [])
    assert verdict.verdict is Verdict.ADMIT, verdict.message


def test_a_unit_moving_together_is_summed_against_the_room() -> None:
    # x and y must stay together (required affinity) and leave h0: h1 scores lower but has
    # room for one of them only; h2 takes both
    d = desired(
        [host("h0", maintenance=True), host("h1"), host("h2")],
        hostLimit=100,
        rules=[rule(name="pair", type="affinity", vms={"names": ["x", "y"]})],
    )
    s = snapshot(
        [
            host_state("h0"),
            free(host_state("h1"), p2048=768),
            free(host_state("h2"), p2048=1024),
        ],
        [
            paged(vm("x", "h0"), 512),
            paged(vm("y", "h0"), 512),
            vm("busy", "h2", vcpus=4, cpu_used=8.0, migratable=False),
        ],
    )
    p = run(d, s)
    assert sorted((m.vm, m.target) for m in [*p.moves, *p.deferred]) == [("x", "h2"), ("y", "h2")]


def test_a_vm_resting_on_the_target_is_counted_once_beside_an_incoming_copy() -> None:
    # h1's room is 768: a's incoming copy holds 512 of it, r (not moving) the other 256, so
    # nothing is free for c; only the incoming copy's pages are counted as the move's, not r's
    d, s = _two_for_h1(768)
    incoming = paged(vm("a", "h1"), 512).model_copy(update={"state": VmRunState.PAUSED})
    flying = snapshot(
        [free(host_state("h0"), p2048=0), free(host_state("h1"), p2048=0)],
        [*s.vms, incoming, paged(vm("r", "h1"), 256), paged(vm("c", "h0"), 256)],
        [InFlight(name="a", uuid="uuid-a", hosts=["h0", "h1"])],
    )
    (verdict,) = admit(d, flying, [_to_h1("c")], [_to_h1("a")], NOW)
    assert (verdict.verdict, verdict.code) == (Verdict.SKIP, AdmitCode.NO_ROOM), verdict.message
    assert verdict.message == (
        "h1 has room for 768 hugepages of 2048 KiB, the VMs planned there need 1024"
    )


# --- helpers ------------------------------------------------------------------------------------


def test_pages_round_up_and_an_xml_tells_its_need() -> None:
    assert pages_for(GIB, TWO_MIB) == 512
    assert pages_for(GIB + 1, TWO_MIB) == 513
    assert pages_for(GIB, ONE_GIB) == 1
    assert need_in_xml(_saved("a", 3).xml) == (TWO_MIB, 3)
    one_gib = (
        "<domain><memory unit='GiB'>4</memory><memoryBacking><hugepages>"
        "<page size='1' unit='GiB'/></hugepages></memoryBacking></domain>"
    )
    assert need_in_xml(one_gib) == (ONE_GIB, 4)
    assert need_in_xml("<domain><memory>1024</memory></domain>") is None
    assert need_in_xml("not xml") is None
    # backed by huge pages but no memory given: no page to hold
    no_memory = "<domain><memoryBacking><hugepages/></memoryBacking></domain>"
    assert need_in_xml(no_memory) == (TWO_MIB, 0)


def test_a_page_size_of_nothing_holds_no_memory_and_of_one_kib_a_page_a_kib() -> None:
    assert pages_for(GIB, 0) == 0
    assert pages_for(GIB, -4) == 0
    assert pages_for(1024, 1) == 1
    assert pages_for(1025, 1) == 2


def test_libvirt_sizes_read_in_their_unit_kib_without_one_and_none_when_unreadable() -> None:
    assert kib_of("4", None) == 4
    assert kib_of(" 8 ", "k") == 8
    assert kib_of("4", "MiB") == 4096
    assert kib_of("2", "GiB") == 2 * 1024 * 1024
    assert kib_of("1024", "bytes") == 1
    assert kib_of("x", "KiB") is None
    assert kib_of(None, None) is None
    assert kib_of("4", "furlongs") is None


def test_a_vm_holds_pages_only_with_a_size_a_count_and_while_active() -> None:
    base = vm("a", "h0")
    assert need_of(paged(base, 4)) == (TWO_MIB, 4)
    assert need_of(paged(base, 0)) is None
    assert need_of(base.model_copy(update={"hugepages": 4})) is None  # no page size
    assert need_of(paged(base, 4).model_copy(update={"state": VmRunState.SHUTOFF})) is None


def test_moves_in_a_snapshot_shift_pages_per_host_and_size_and_leave_the_rest_as_they_were() -> (
    None
):
    hosts = [
        free(host_state("h0"), p2048=0, p1048576=1),
        host_state("h1"),  # reported no free pages: not limited, nothing to shift
        free(host_state("h2"), p2048=1024),
        free(host_state("h3"), p2048=5),  # untouched
    ]
    moves = [
        (vm("plain", "h0"), "h2"),  # no pages: skipped, the later moves still count
        (paged(vm("a", "h0"), 100), "h2"),
        (paged(vm("b", "h0"), 50), "h2"),  # same size, same hosts: summed with a's
        (paged(vm("c", "h0"), 7), "h0"),  # stays: nothing moves
        (paged(vm("d", "h0"), 10), "h1"),
        (paged(vm("big", "h2"), 2000), "h0"),  # more than h0 has free: floored at 0
    ]
    after = pages_moved(hosts, moves)
    assert [h.name for h in after] == ["h0", "h1", "h2", "h3"]
    assert after[0].hugepages_free == {TWO_MIB: 0, ONE_GIB: 1}
    assert after[1] == hosts[1]
    assert after[2].hugepages_free == {TWO_MIB: 1024 - 150 + 2000}
    assert after[3] == hosts[3]
    moved_out = pages_moved(hosts, [(paged(vm("a", "h0"), 100), "h2")])
    assert moved_out[0].hugepages_free == {TWO_MIB: 100, ONE_GIB: 1}
    assert moved_out[2].hugepages_free == {TWO_MIB: 924}


def test_a_vm_started_takes_pages_of_a_size_its_host_listed_none_free_of() -> None:
    h1 = free(host_state("h1"), p2048=10)
    s = snapshot([h1], [])
    after = started(s, paged(vm("big", "h1"), 2, kib=ONE_GIB))
    assert after.hosts[0].hugepages_free == {TWO_MIB: 10, ONE_GIB: -2}
    after = started(s, paged(vm("small", "h1"), 4))
    assert after.hosts[0].hugepages_free == {TWO_MIB: 6}


def test_a_hosts_room_is_its_free_pages_plus_what_its_running_vms_hold() -> None:
    hosts = [free(host_state("h1"), p2048=100), host_state("h2")]
    vms = [
        paged(vm("a", "h1"), 50),
        paged(vm("b", "h1"), 3, ONE_GIB),
        paged(vm("c", "h1"), 7).model_copy(update={"state": VmRunState.SHUTOFF}),
        paged(vm("d", "h2"), 9),
    ]
    assert rooms(hosts, vms) == {"h1": {TWO_MIB: 150, ONE_GIB: 3}}


def test_a_vm_moved_in_a_snapshot_takes_its_pages_along_and_every_room_stays() -> None:
    # what the engine does after a round's moves and a backtest while replaying: without the
    # shift, h2's room would grow by a's pages and h1's shrink
    hosts = [free(host_state("h1"), p2048=100), free(host_state("h2"), p2048=600)]
    a, b = paged(vm("a", "h1"), 500), vm("b", "h1")
    before = rooms(hosts, [a, b])
    after_hosts = pages_moved(hosts, [(a, "h2"), (b, "h2")])
    moved = [v.model_copy(update={"host": "h2"}) for v in (a, b)]
    assert rooms(after_hosts, moved) == before == {"h1": {TWO_MIB: 600}, "h2": {TWO_MIB: 600}}
    assert [h.hugepages_free for h in after_hosts] == [{TWO_MIB: 600}, {TWO_MIB: 100}]
    assert pages_moved(hosts, [(b, "h2")]) == hosts  # no pages, nothing changes


def test_free_huge_pages_and_a_vms_pages_are_changes_worth_recording() -> None:
    base = snapshot([free(host_state("h1"), p2048=512)], [paged(vm("a", "h1"), 100)])
    same = base.model_copy(update={"taken_at": NOW})
    assert observations.change(base, same) is None
    fewer = base.model_copy(update={"hosts": [free(host_state("h1"), p2048=256)]})
    assert observations.change(base, fewer) == "host h1 changed"
    bigger = base.model_copy(update={"vms": [paged(vm("a", "h1"), 200)]})
    assert observations.change(base, bigger) == "VM a changed"


# --- the property -------------------------------------------------------------------------------


@st.composite
def paged_clusters(draw: st.DrawFn) -> tuple[DesiredState, Snapshot]:
    n = draw(st.integers(2, 4))
    names = [f"h{i}" for i in range(n)]
    maintenance = draw(st.sampled_from([None, *names]))
    states: list[HostState] = []
    for name in names:
        hs = host_state(name, memory_gib=256, cpus=32)
        reported = draw(
            st.one_of(
                st.none(),
                st.fixed_dictionaries(
                    {TWO_MIB: st.integers(0, 1024)},
                    optional={ONE_GIB: st.integers(0, 4)},
                ),
            )
        )
        states.append(hs.model_copy(update={"hugepages_free": reported}))
    vms: list[VmState] = []
    for i in range(draw(st.integers(1, 8))):
        on = draw(st.sampled_from(names))
        base = vm(f"v{i}", on, cpu_used=draw(st.sampled_from([0.5, 2.0, 6.0])), memory_gib=2)
        kind = draw(st.sampled_from(["plain", "2m", "2m", "1g"]))
        if kind == "2m":
            base = paged(base, draw(st.integers(1, 600)))
        elif kind == "1g":
            base = paged(base, draw(st.integers(1, 3)), ONE_GIB)
        vms.append(base)
    d = desired(
        [host(name, maintenance=name == maintenance) for name in names],
        threshold=draw(st.sampled_from([5, 20])),
        hostLimit=100,
    )
    return d, snapshot(states, vms)


def _over_room(s: Snapshot, where: dict[str, str]) -> list[str]:
    """Hosts whose room some size exceeds with the VMs at ``where`` (name -> host).

    Only rooms the hosts had room to spare in to begin with are judged: a cluster observed over
    a room (impossible on a real host) is not the plan's doing."""
    room = rooms(s.hosts, s.vms)
    held: Counter[tuple[str, int]] = Counter()
    for v in s.vms:
        if v.hugepage_kib and v.state is VmRunState.RUNNING:
            held[where[v.name], v.hugepage_kib] += v.hugepages
    return [
        f"{h} {kib}: {n} > {room[h].get(kib, 0)}"
        for (h, kib), n in held.items()
        if h in room and n > room[h].get(kib, 0)
    ]


def _check_steps(s: Snapshot, p: Plan) -> None:
    where: dict[str, str] = {v.name: v.host for v in s.vms}
    assert not _over_room(s, where)
    for m in sorted([*p.moves, *p.deferred], key=lambda m: m.wave):
        where[m.vm] = m.target
        assert not _over_room(s, where), (m, _over_room(s, where))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(paged_clusters())
def test_no_plan_puts_more_pages_on_a_host_than_its_room(
    case: tuple[DesiredState, Snapshot],
) -> None:
    d, s = case
    _check_steps(s, run(d, s))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(paged_clusters())
def test_no_heuristic_plan_puts_more_pages_on_a_host_than_its_room(
    case: tuple[DesiredState, Snapshot],
) -> None:
    d, s = case
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(planner, "improve", lambda before, state, steps, *rest: (steps, None))
        _check_steps(s, run(d, s))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(paged_clusters(), st.sampled_from([0.0, 10.0, 100.0]))
def test_no_exact_placement_puts_more_pages_on_a_host_than_its_room(
    case: tuple[DesiredState, Snapshot], spread: float
) -> None:
    d, s = case
    model, state = build(d, s)
    hosts_of = {a: list(h) for a, h in model.arches.items()}
    found = exact.solve(state, hosts_of, lambda v: True, {}, dict.fromkeys(hosts_of, spread))
    if found is None:
        return
    where: dict[str, str] = {v.name: v.host for v in s.vms}
    for v, h in found.target.items():
        where[model.vms[v].name] = model.hosts[h].name
    assert not _over_room(s, where)
