"""``admit`` on fixed examples: each reason a planned move is stale with what it says in full,
migrations in flight (ours and someone else's) counted once and where they go, and a move
that depends on a running one waiting for it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from reconciler.core.admission import AdmitCode, Verdict, admit, judge
from reconciler.core.admission_view import AdmissionView
from reconciler.model.cluster import Host
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Move, Reason
from reconciler.model.snapshot import (
    InFlight,
    MigrationClass,
    Snapshot,
    Unmigratable,
    UnmigratableReason,
    VmDisk,
    VmRunState,
    VmState,
)
from tests.core.builders import NOW, desired, host, host_state, rule, snapshot, vm
from tests.core.test_admission import move

ABC = [host("a"), host("b"), host("c")]


def _one(
    d: DesiredState, snap: Snapshot, m: Move, running: Sequence[Move] = ()
) -> tuple[Verdict, AdmitCode, str]:
    (a,) = admit(d, snap, [m], running, NOW)
    return a.verdict, a.code, a.message


def _abc(*vms: VmState, b_gib: int = 64) -> tuple[DesiredState, Snapshot]:
    """Hosts a, b (``b_gib`` of memory) and c, no rules, no host limit."""
    states = [host_state("a"), host_state("b", memory_gib=b_gib), host_state("c")]
    return desired(ABC, hostLimit=100), snapshot(states, list(vms))


def _paused(v: VmState) -> VmState:
    return v.model_copy(update={"state": VmRunState.PAUSED})


# --- stale moves -------------------------------------------------------------------------


def test_a_vm_no_longer_seen_is_skipped_as_gone() -> None:
    d, snap = _abc(vm("y", "a"))
    assert _one(d, snap, move("x", "a", "b")) == (
        Verdict.SKIP,
        AdmitCode.VM_GONE,
        "x is no longer seen on any host",
    )


def test_a_vm_not_seen_because_its_source_is_unreachable_is_skipped_for_that() -> None:
    d = desired(ABC, hostLimit=100)
    snap = snapshot([host_state("a", reachable=False), host_state("b"), host_state("c")], [])
    assert _one(d, snap, move("x", "a", "b")) == (
        Verdict.SKIP,
        AdmitCode.SOURCE_UNREACHABLE,
        "a is unreachable",
    )


def test_a_vm_seen_on_two_hosts_is_never_moved_again() -> None:
    d, snap = _abc(vm("x", "a"), _paused(vm("x", "c")))
    assert _one(d, snap, move("x", "a", "b")) == (
        Verdict.SKIP,
        AdmitCode.IN_FLIGHT,
        "x is being migrated (seen on a, c)",
    )


def test_a_vm_libvirt_reports_in_flight_is_never_moved_again() -> None:
    d = desired(ABC, hostLimit=100)
    snap = snapshot(
        [host_state(h) for h in "abc"],
        [vm("x", "a"), vm("y", "b")],
        [InFlight(name="x", uuid="uuid-x", hosts=["a", "c"])],
    )
    assert _one(d, snap, move("x", "a", "b")) == (
        Verdict.SKIP,
        AdmitCode.IN_FLIGHT,
        "x is being migrated (seen on a)",
    )
    assert _one(d, snap, move("y", "b", "c"))[0] is Verdict.ADMIT


def test_a_vm_already_on_its_target_is_skipped() -> None:
    d, snap = _abc(vm("x", "b"))
    assert _one(d, snap, move("x", "a", "b")) == (
        Verdict.SKIP,
        AdmitCode.ALREADY_ON_TARGET,
        "x already runs on b",
    )


def test_a_vm_moved_by_someone_else_is_skipped() -> None:
    d, snap = _abc(vm("x", "c"))
    assert _one(d, snap, move("x", "a", "b")) == (
        Verdict.SKIP,
        AdmitCode.MOVED_ELSEWHERE,
        "x now runs on c, not on a",
    )


def test_a_live_move_of_a_vm_no_longer_running_is_skipped() -> None:
    d, snap = _abc(_paused(vm("x", "a")))
    assert _one(d, snap, move("x", "a", "b")) == (
        Verdict.SKIP,
        AdmitCode.NOT_RUNNING,
        "x is paused, not running",
    )


def _cold(v: VmState) -> VmState:
    return v.model_copy(
        update={"state": VmRunState.SHUTOFF, "migration_class": MigrationClass.COLD}
    )


def _cold_move() -> Move:
    return move("x", "a", "b").model_copy(update={"migration_class": MigrationClass.COLD})


def test_a_cold_move_waits_for_a_vm_shut_off_and_skips_one_started_again() -> None:
    d, snap = _abc(_cold(vm("x", "a")))
    assert _one(d, snap, _cold_move()) == (Verdict.ADMIT, AdmitCode.ADMITTED, "admitted")
    started = _cold(vm("x", "a")).model_copy(update={"state": VmRunState.RUNNING})
    d, snap = _abc(started)
    assert _one(d, snap, _cold_move()) == (
        Verdict.SKIP,
        AdmitCode.NOT_RUNNING,
        "x is running, not shut off",
    )


def test_a_vm_whose_class_changed_since_planning_is_skipped() -> None:
    d, snap = _abc(_cold(vm("x", "a")).model_copy(update={"state": VmRunState.RUNNING}))
    assert _one(d, snap, move("x", "a", "b")) == (
        Verdict.SKIP,
        AdmitCode.UNMIGRATABLE,
        "x is now of class cold, planned as shared",
    )


def test_a_vm_that_can_no_longer_be_live_migrated_is_skipped_saying_why() -> None:
    stuck = vm("x", "a", migratable=False).model_copy(
        update={
            "unmigratable": [
                Unmigratable(code=UnmigratableReason.HOST_DEVICE, detail="hostdev 0000:01:00.0")
            ]
        }
    )
    d, snap = _abc(stuck)
    assert _one(d, snap, move("x", "a", "b")) == (
        Verdict.SKIP,
        AdmitCode.UNMIGRATABLE,
        "x cannot be live-migrated: hostdev 0000:01:00.0",
    )


def test_a_vm_on_a_host_outside_the_cluster_is_skipped_as_unreachable() -> None:
    d = desired(ABC, hostLimit=100)
    snap = snapshot([host_state(h) for h in "abc"] + [host_state("z")], [vm("x", "z")])
    assert _one(d, snap, move("x", "z", "b")) == (
        Verdict.SKIP,
        AdmitCode.SOURCE_UNREACHABLE,
        "z is unreachable",
    )
    stuck = vm("x", "z", migratable=False).model_copy(
        update={
            "unmigratable": [
                Unmigratable(code=UnmigratableReason.VTPM, detail="a vTPM"),
                Unmigratable(code=UnmigratableReason.HOST_DEVICE, detail="hostdev 0000:01:00.0"),
            ]
        }
    )
    snap = snapshot([host_state(h) for h in "abc"] + [host_state("z")], [stuck])
    assert _one(d, snap, move("x", "z", "b")) == (
        Verdict.SKIP,
        AdmitCode.UNMIGRATABLE,
        "x cannot be live-migrated: a vTPM; hostdev 0000:01:00.0",
    )
    plain = vm("x", "z", migratable=False)
    snap = snapshot([host_state(h) for h in "abc"] + [host_state("z")], [plain])
    assert _one(d, snap, move("x", "z", "b"))[2] == "x cannot be live-migrated: not live-migratable"


@pytest.mark.parametrize(
    ("target", "hosts", "code", "message"),
    [
        ("b", [host("a"), host("b"), host("c")], AdmitCode.TARGET_UNREACHABLE, "b is unreachable"),
        ("q", [host("a"), host("b"), host("c")], AdmitCode.TARGET_UNREACHABLE, "q is unreachable"),
        (
            "c",
            [host("a"), host("b"), host("c", maintenance=True)],
            AdmitCode.TARGET_MAINTENANCE,
            "c is in maintenance",
        ),
    ],
)
def test_a_target_that_cannot_take_the_vm_now_is_skipped(
    target: str, hosts: list[Host], code: AdmitCode, message: str
) -> None:
    d = desired(hosts, hostLimit=100)
    snap = snapshot(
        [host_state("a"), host_state("b", reachable=False), host_state("c")], [vm("x", "a")]
    )
    assert _one(d, snap, move("x", "a", target)) == (Verdict.SKIP, code, message)


def test_a_target_without_room_is_skipped_saying_how_much_is_free() -> None:
    d, snap = _abc(vm("x", "a", memory_gib=4), vm("y", "b", memory_gib=6), b_gib=8)
    assert _one(d, snap, move("x", "a", "b")) == (
        Verdict.SKIP,
        AdmitCode.NO_ROOM,
        "b has 2GiB free, the VM needs 4GiB",
    )


def test_a_vm_that_exactly_fits_the_room_left_is_admitted() -> None:
    d, snap = _abc(vm("x", "a", memory_gib=4), vm("y", "b", memory_gib=4), b_gib=8)
    assert _one(d, snap, move("x", "a", "b")) == (Verdict.ADMIT, AdmitCode.ADMITTED, "admitted")


# --- migrations in flight ------------------------------------------------------------------


def test_our_own_migration_seen_on_both_hosts_counts_once_against_parallel() -> None:
    d = desired(ABC, hostLimit=100, parallel={"cluster": 2})
    snap = snapshot(
        [host_state(h) for h in "abc"],
        [vm("mover", "a"), _paused(vm("mover", "b")), vm("x", "c")],
        [InFlight(name="mover", uuid="uuid-mover", hosts=["a", "b"])],
    )
    assert _one(d, snap, move("x", "c", "a"), [move("mover", "a", "b")])[0] is Verdict.ADMIT


def test_someone_else_s_migration_goes_from_the_running_copy_to_the_paused_one() -> None:
    # theirs runs on b and arrives paused on a: a's inbound is taken, b's is not
    hosts = [host("a", max_inbound=1), host("b", max_inbound=1), host("c")]
    d = desired(hosts, hostLimit=100)
    snap = snapshot(
        [host_state(h) for h in "abc"],
        [_paused(vm("theirs", "a")), vm("theirs", "b"), vm("x", "c"), vm("y", "c")],
    )
    assert _one(d, snap, move("x", "c", "a")) == (
        Verdict.WAIT,
        AdmitCode.LIMIT,
        "maxInbound 1 of a reached",
    )
    assert _one(d, snap, move("y", "c", "b"))[0] is Verdict.ADMIT


def test_a_vm_listed_in_flight_but_seen_once_is_no_one_s_migration() -> None:
    d = desired(ABC, hostLimit=100, parallel={"cluster": 1})
    snap = snapshot(
        [host_state(h) for h in "abc"],
        [vm("theirs", "a"), vm("x", "c")],
        [InFlight(name="theirs", uuid="uuid-theirs", hosts=["a", "b"])],
    )
    assert _one(d, snap, move("x", "c", "b"))[0] is Verdict.ADMIT


def test_a_running_move_already_ended_still_takes_its_room_on_the_target() -> None:
    # mover arrived on b (seen there only); another VM in flight keeps the pass unsettled
    d = desired(ABC, hostLimit=100)
    snap = snapshot(
        [host_state("a"), host_state("b", memory_gib=8), host_state("c")],
        [vm("mover", "b", memory_gib=6), vm("x", "c", memory_gib=4), vm("other", "a")],
        [InFlight(name="other", uuid="uuid-other", hosts=["a", "c"])],
    )
    verdict = _one(d, snap, move("x", "c", "b"), [move("mover", "a", "b", 6)])
    assert verdict == (Verdict.SKIP, AdmitCode.NO_ROOM, "b has 2GiB free, the VM needs 4GiB")


# --- moves that depend on one running ------------------------------------------------------

TOGETHER = rule(name="together", type="affinity", vms={"names": ["x", "y"]})


def test_a_required_affinity_partner_in_flight_makes_the_member_wait() -> None:
    d = desired(ABC, rules=[TOGETHER], hostLimit=100)
    snap = snapshot([host_state(h) for h in "abc"], [vm("x", "a"), vm("y", "a")])
    x, y = move("x", "a", "b"), move("y", "a", "b")
    assert _one(d, snap, x, [y]) == (
        Verdict.WAIT,
        AdmitCode.DEPENDS_ON_RUNNING,
        "waits for an earlier move: affinity together would be broken on b",
    )


def test_a_running_move_of_a_vm_gone_does_not_hide_the_partner_running_after_it() -> None:
    roomy = [host(h, max_inbound=4, max_outbound=4) for h in "abc"]
    d = desired(roomy, rules=[TOGETHER], hostLimit=100, parallel={"cluster": 4})
    snap = snapshot([host_state(h) for h in "abc"], [vm("x", "a"), vm("y", "a")])
    running = [move("gone", "c", "b"), move("y", "a", "b")]
    assert _one(d, snap, move("x", "a", "b"), running)[:2] == (
        Verdict.WAIT,
        AdmitCode.DEPENDS_ON_RUNNING,
    )


def test_a_move_that_depends_on_no_running_move_is_admitted_beside_them() -> None:
    d = desired(ABC, rules=[TOGETHER], hostLimit=100)
    snap = snapshot(
        [host_state("a"), host_state("b", memory_gib=8), host_state("c")],
        [vm("x", "a"), vm("y", "a"), vm("z", "c", memory_gib=6)],
    )
    # z leaving c frees nothing x needs on b, and z is in none of x's rules
    assert (
        _one(d, snap, move("x", "a", "b"), [move("z", "c", "a", 6), move("y", "a", "b")])[0]
        is Verdict.WAIT
    )
    assert _one(d, snap, move("z", "c", "b", 6), [move("y", "a", "c")])[0] is Verdict.ADMIT


# --- a pass that stops once full -------------------------------------------------------------


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_pass_until_full_stops_once_parallel_migrations_are_admitted(parallel: int) -> None:
    d = desired(ABC, hostLimit=100, parallel={"cluster": parallel})
    names = ["v1", "v2", "v3"]
    snap = snapshot([host_state(h) for h in "abc"], [vm(n, "a", memory_gib=1) for n in names])
    moves = [move(n, "a", "b", 1) for n in names]
    verdicts = judge(AdmissionView(d, snap), moves, [], until_full=True)
    assert [a.verdict for a in verdicts] == [Verdict.ADMIT] * parallel
    everything = judge(AdmissionView(d, snap), moves, [])
    assert [a.verdict for a in everything] == [Verdict.ADMIT] * parallel + [Verdict.WAIT] * (
        3 - parallel
    )


def test_migrations_listed_in_flight_but_not_seen_twice_hide_none_seen_twice() -> None:
    # "aa" is listed but seen once, "ghost" listed and seen nowhere: neither is a migration to
    # count; "theirs" runs on b and arrives on a, and takes a's inbound and b's outbound
    hosts = [host("a", max_inbound=1, max_outbound=1), host("b", max_outbound=1), host("c")]
    d = desired(hosts, hostLimit=100)
    snap = snapshot(
        [host_state(h) for h in "abc"],
        [
            vm("aa", "c"),
            _paused(vm("theirs", "a")),
            vm("theirs", "b"),
            vm("x", "c"),
            vm("y", "b"),
            vm("z", "a"),
        ],
        [
            InFlight(name="aa", uuid="uuid-aa", hosts=["b", "c"]),
            InFlight(name="ghost", uuid="uuid-ghost", hosts=["a", "b"]),
        ],
    )
    assert _one(d, snap, move("x", "c", "a")) == (
        Verdict.WAIT,
        AdmitCode.LIMIT,
        "maxInbound 1 of a reached",
    )
    assert _one(d, snap, move("y", "b", "c")) == (
        Verdict.WAIT,
        AdmitCode.LIMIT,
        "maxOutbound 1 of b reached",
    )
    assert _one(d, snap, move("z", "a", "c"))[0] is Verdict.ADMIT


FOUR = rule(name="four", type="affinity", vms={"names": ["w", "x", "y", "z"]})


def _four_moves(target_of_last: str = "b") -> list[Move]:
    moves = [
        move(n, "a", "b", reason=Reason.AFFINITY).model_copy(update={"rule": "four"})
        for n in ("w", "x", "y", "z")
    ]
    moves[-1] = moves[-1].model_copy(update={"target": target_of_last})
    return moves


def test_a_group_that_is_worse_half_way_but_whole_at_the_end_starts_its_first_member() -> None:
    # with two of four on b the group is split 2:2, worse than 3:1: that is the way there
    d = desired(ABC, rules=[FOUR], hostLimit=100)
    snap = snapshot([host_state(h) for h in "abc"], [vm(n, "a") for n in ("w", "x", "y", "z")])
    verdicts = admit(d, snap, _four_moves(), [], NOW)
    assert [a.verdict for a in verdicts] == [Verdict.ADMIT] + [Verdict.WAIT] * 3


def test_a_group_one_of_whose_members_goes_to_an_unknown_host_does_not_start() -> None:
    d = desired(ABC, rules=[FOUR], hostLimit=100)
    snap = snapshot([host_state(h) for h in "abc"], [vm(n, "a") for n in ("w", "x", "y", "z")])
    verdicts = admit(d, snap, _four_moves("q"), [], NOW)
    assert (verdicts[0].verdict, verdicts[0].code) == (Verdict.SKIP, AdmitCode.RULE_BROKEN)
    gone = snapshot([host_state(h) for h in "abc"], [vm(n, "a") for n in ("w", "x", "y")])
    verdicts = admit(d, gone, _four_moves(), [], NOW)
    assert (verdicts[0].verdict, verdicts[0].code) == (Verdict.SKIP, AdmitCode.RULE_BROKEN)


def test_a_vm_in_flight_weighs_what_its_running_copy_uses_not_the_incoming_one() -> None:
    # the incoming copy on b has 0.5 GiB of 4 so far: b must still count mover's 4 GiB
    d = desired(ABC, hostLimit=50)
    incoming = _paused(vm("mover", "b")).model_copy(update={"memory_used": 1 << 29})
    snap = snapshot(
        [host_state("a"), host_state("b", memory_gib=16), host_state("c")],
        [vm("mover", "a"), incoming, vm("x", "c", memory_gib=4.5)],
        [InFlight(name="mover", uuid="uuid-mover", hosts=["a", "b"])],
    )
    assert _one(d, snap, move("x", "c", "b", 4.5), [move("mover", "a", "b")]) == (
        Verdict.SKIP,
        AdmitCode.NO_ROOM,
        "b memory would reach 53% (hostLimit 50%)",
    )


def test_a_stale_move_does_not_keep_the_moves_after_it_from_being_judged() -> None:
    d, snap = _abc(vm("y", "a"))
    first, second = admit(d, snap, [move("x", "a", "b"), move("y", "a", "b")], [], NOW)
    assert (first.verdict, first.code) == (Verdict.SKIP, AdmitCode.VM_GONE)
    assert second.move.vm == "y"
    assert second.verdict is Verdict.ADMIT


def test_a_vm_with_local_disks_is_skipped_when_the_policy_no_longer_lets_them_be_copied() -> None:
    # planned as a copy move, but localDisks is block (the default) now: the policy's reason
    local = vm("x", "a").model_copy(
        update={
            "migration_class": MigrationClass.COPY,
            "disks": [VmDisk(target="vdb", source="/var/lib/x.qcow2", shared=False)],
        }
    )
    d, snap = _abc(local)
    planned = move("x", "a", "b").model_copy(update={"migration_class": MigrationClass.COPY})
    assert _one(d, snap, planned) == (
        Verdict.SKIP,
        AdmitCode.UNMIGRATABLE,
        "x has local disks vdb (/var/lib/x.qcow2) and spec.migration.localDisks is block "
        "(copy would move it live with its disks)",
    )
