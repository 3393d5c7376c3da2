"""``admit``: moves that depend on each other, migrations in flight and the limits."""

from __future__ import annotations

from collections import Counter

from hypothesis import example, given
from hypothesis import strategies as st

from reconciler.core.admission import AdmitCode, Verdict, admit
from reconciler.model.base import HostName, VmName
from reconciler.model.plan import Move, Reason
from reconciler.model.snapshot import InFlight, VmRunState
from tests.core.builders import NOW, desired, host, host_state, rule, snapshot, vm

GIB = 1024**3


def move(
    name: str, source: str, target: str, gib: float = 4, reason: Reason = Reason.DRIFT
) -> Move:
    return Move(
        vm=VmName(name),
        source=HostName(source),
        target=HostName(target),
        memory=int(gib * GIB),
        vcpus=2,
        reason=reason,
        rule=None,
        detail="x",
        wave=0,
    )


def test_a_move_into_room_a_move_admitted_in_the_same_pass_frees_waits_for_it_to_end() -> None:
    # db-a (a) -> b needs the room db-b frees on b by moving to c: db-b is admitted first,
    # db-a must wait until db-b's migration has ended, not start beside it.
    d = desired([host("a"), host("b"), host("c")], hostLimit=100)
    snap = snapshot(
        [host_state("a", memory_gib=8), host_state("b", memory_gib=8), host_state("c")],
        [vm("db-b", "b", memory_gib=6), vm("db-a", "a", memory_gib=6)],
    )
    moves = [move("db-b", "b", "c", 6), move("db-a", "a", "b", 6)]
    verdicts = admit(d, snap, moves, [], NOW)
    assert [(a.move.vm, a.verdict) for a in verdicts] == [
        ("db-b", Verdict.ADMIT),
        ("db-a", Verdict.WAIT),
    ]
    assert verdicts[1].code is AdmitCode.DEPENDS_ON_RUNNING


def test_a_required_anti_affinity_partner_leaving_in_the_same_pass_makes_the_member_wait() -> None:
    # The lab's db-apart: db-a on h1, db-b on h2; placement db-a: h2, db-b: h3.
    d = desired(
        [host("h1"), host("h2"), host("h3")],
        rules=[rule(name="db-apart", type="antiAffinity", vms={"names": ["db-a", "db-b"]})],
        hostLimit=100,
    )
    snap = snapshot(
        [host_state(h) for h in ("h1", "h2", "h3")],
        [vm("db-a", "h1", labels={"app": "db"}), vm("db-b", "h2", labels={"app": "db"})],
    )
    moves = [move("db-b", "h2", "h3"), move("db-a", "h1", "h2")]
    verdicts = admit(d, snap, moves, [], NOW)
    assert verdicts[0].verdict is Verdict.ADMIT
    assert verdicts[1].verdict is Verdict.WAIT, "db-a must not start before db-b has left h2"
    # db-b's migration failed: db-a is judged again and is now stale (skipped), never forced.
    again = admit(d, snap, moves[1:], [], NOW)
    assert again[0].verdict is Verdict.SKIP
    assert again[0].code is AdmitCode.RULE_BROKEN


def test_a_vm_in_flight_is_counted_once_on_its_source_not_again_on_its_target() -> None:
    # mover (4 GiB) runs from a to b and libvirt shows it on both; b has 10 GiB; other (4 GiB)
    # waits to go to c. A move x (4 GiB) into b: b then holds mover + x = 8 GiB: it fits.
    d = desired([host("a"), host("b"), host("c")], hostLimit=100)
    incoming = vm("mover", "b").model_copy(update={"state": VmRunState.PAUSED})
    snap = snapshot(
        [host_state("a"), host_state("b", memory_gib=10), host_state("c")],
        [vm("mover", "a"), incoming, vm("x", "c")],
        [InFlight(name="mover", uuid="uuid-mover", hosts=["a", "b"])],
    )
    verdicts = admit(d, snap, [move("x", "c", "b")], [move("mover", "a", "b")], NOW)
    assert verdicts[0].verdict is Verdict.ADMIT, verdicts[0].message


def test_a_migration_someone_else_started_counts_against_parallel_and_inbound() -> None:
    d = desired([host("a"), host("b", max_inbound=1), host("c")], parallel={"cluster": 4})
    incoming = vm("theirs", "b").model_copy(update={"state": VmRunState.PAUSED})
    snap = snapshot(
        [host_state("a"), host_state("b"), host_state("c")],
        [vm("theirs", "a"), incoming, vm("ours", "c")],
        [InFlight(name="theirs", uuid="uuid-theirs", hosts=["a", "b"])],
    )
    verdicts = admit(d, snap, [move("ours", "c", "b")], [], NOW)
    assert verdicts[0].verdict is Verdict.WAIT
    assert verdicts[0].code is AdmitCode.LIMIT
    assert "maxInbound" in verdicts[0].message
    d1 = desired([host("a"), host("b"), host("c")], parallel={"cluster": 1})
    verdicts = admit(d1, snap, [move("ours", "c", "b")], [], NOW)
    assert verdicts[0].verdict is Verdict.WAIT
    assert "parallel.cluster" in verdicts[0].message


@given(
    n_vms=st.integers(1, 10),
    parallel=st.integers(1, 4),
    max_in=st.integers(1, 3),
    max_out=st.integers(1, 3),
    running=st.integers(0, 3),
    seed=st.randoms(use_true_random=False),
)
@example(n_vms=4, parallel=1, max_in=1, max_out=1, running=1, seed=__import__("random").Random(0))
@example(n_vms=6, parallel=2, max_in=1, max_out=3, running=0, seed=__import__("random").Random(1))
def test_moves_admitted_one_pass_after_another_never_reach_a_limit(
    n_vms: int, parallel: int, max_in: int, max_out: int, running: int, seed: object
) -> None:
    import random

    rnd = seed if isinstance(seed, random.Random) else random.Random(0)
    names = ["a", "b", "c", "d"]
    d = desired(
        [host(h, max_inbound=max_in, max_outbound=max_out) for h in names],
        parallel={"cluster": parallel},
        hostLimit=100,
    )
    vms = [vm(f"v{i}", rnd.choice(names), memory_gib=1) for i in range(n_vms)]
    snap = snapshot([host_state(h) for h in names], vms)
    moves = [move(v.name, v.host, rnd.choice([h for h in names if h != v.host]), 1) for v in vms]
    in_progress = moves[:running]
    pending = moves[running:]
    started = list(in_progress)
    for _ in range(len(pending) + 1):
        verdicts = admit(d, snap, pending, started, NOW)
        admitted = [a.move for a in verdicts if a.verdict is Verdict.ADMIT]
        now = [*started, *admitted]
        if len(started) <= parallel:
            assert len(now) <= max(parallel, len(started))
        for h in names:
            pre_in = Counter(str(m.target) for m in started)[h]
            pre_out = Counter(str(m.source) for m in started)[h]
            assert Counter(str(m.target) for m in now)[h] <= max(max_in, pre_in)
            assert Counter(str(m.source) for m in now)[h] <= max(max_out, pre_out)
        if not admitted:
            break
        started = now
        pending = [a.move for a in verdicts if a.verdict is Verdict.WAIT]
