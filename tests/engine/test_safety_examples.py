"""One example per behaviour that guards a move, so a bug there fails on every run (not only
when a property test happens to draw the case)."""

from __future__ import annotations

import threading

from reconciler.core.admission import AdmitCode, Verdict, admit
from reconciler.core.feasibility import check_move
from reconciler.core.state import build
from reconciler.engine.execute import Execution, Ports
from reconciler.engine.ports import MigrationResult
from reconciler.model.base import HostName, VmName
from reconciler.model.plan import Move, Reason
from reconciler.model.snapshot import InFlight
from tests.core.builders import NOW, desired, host, host_state, rule, snapshot, vm
from tests.fakes import GIB, FakeCluster, FakeHost, FakeVm


def mv(name: str, source: str, target: str, reason: Reason = Reason.DRIFT, **kw: object) -> Move:
    return Move(
        vm=VmName(name),
        source=HostName(source),
        target=HostName(target),
        memory=4 * GIB,
        vcpus=2,
        reason=reason,
        detail="x",
        wave=0,
        **kw,  # type: ignore[arg-type]
    )


def test_a_member_waits_while_its_required_affinity_partner_is_in_flight() -> None:
    d = desired(
        [host("a"), host("b")],
        rules=[rule(name="pair", type="affinity", vms={"names": ["p1", "p2"]})],
        hostLimit=100,
    )
    snap = snapshot([host_state("a"), host_state("b")], [vm("p1", "a"), vm("p2", "a")])
    running = [mv("p1", "a", "b", Reason.AFFINITY, rule="pair")]
    (verdict,) = admit(d, snap, [mv("p2", "a", "b", Reason.AFFINITY, rule="pair")], running, NOW)
    assert verdict.verdict is Verdict.WAIT
    assert verdict.code is AdmitCode.DEPENDS_ON_RUNNING


def test_a_vm_libvirt_reports_in_flight_is_never_moved_again() -> None:
    d = desired([host("a"), host("b"), host("c")], hostLimit=100)
    snap = snapshot(
        [host_state(h) for h in "abc"],
        [vm("x", "a")],
        [InFlight(name="x", uuid="uuid-x", hosts=["a", "c"])],
    )
    (verdict,) = admit(d, snap, [mv("x", "a", "b")], [], NOW)
    assert verdict.verdict is Verdict.SKIP
    assert verdict.code is AdmitCode.IN_FLIGHT


def test_a_vm_that_exactly_fits_the_free_memory_is_accepted() -> None:
    d = desired([host("a"), host("b")], hostLimit=100, cpuOvercommit=16)
    snap = snapshot(
        [host_state("a"), host_state("b", memory_gib=8)],
        [vm("x", "a", memory_gib=8, cpu_used=0.0)],
    )
    model, state = build(d, snap)
    assert check_move(state, model.vm_index["x"], model.host_index["b"]) is None
    bigger = snapshot(
        [host_state("a"), host_state("b", memory_gib=8)],
        [vm("x", "a", memory_gib=8.001, cpu_used=0.0)],
    )
    model, state = build(d, bigger)
    refusal = check_move(state, model.vm_index["x"], model.host_index["b"])
    assert refusal is not None
    assert refusal.category == "memory"


def _execution(fake: FakeCluster, moves: list[Move], **kw: object) -> Execution:
    d = desired([host(h) for h in fake.hosts], hostLimit=100, parallel={"cluster": 2}, batch=10)
    return Execution(
        d,
        fake.observe(),
        moves,
        Ports(fake, fake, fake, fake.clock),
        plan_id="p",
        stop=kw.pop("stop", threading.Event()),  # type: ignore[arg-type]
        abort=threading.Event(),
    )


def test_one_vm_one_migration_even_when_a_plan_lists_it_twice() -> None:
    fake = FakeCluster("t", [FakeHost("a"), FakeHost("b"), FakeHost("c")], [FakeVm("x", "a")])
    results = _execution(fake, [mv("x", "a", "b"), mv("x", "a", "c")]).run()
    assert [m.vm for m, _ in fake.migrations] == ["x"]
    assert len(results) == 1


def test_the_failure_record_goes_where_the_vm_runs() -> None:
    fake = FakeCluster("t", [FakeHost("a"), FakeHost("b")], [FakeVm("x", "a")])
    original = fake.migrate

    def arrived_but_failed(move: Move, **kw: object) -> MigrationResult:
        original(move, **kw)  # type: ignore[arg-type]
        return MigrationResult(
            vm=move.vm,
            source=move.source,
            target=move.target,
            succeeded=False,
            error="the job ended with an error",
            running_on=[move.target],
        )

    fake.migrate = arrived_but_failed  # type: ignore[method-assign]
    _execution(fake, [mv("x", "a", "b")]).run()
    assert fake.vms["x"].host == "b"
    hosts = [h for h, name, state in fake.records if name == "x" and state.last_failure]
    assert hosts == ["b"], "recorded on the host the VM runs on, not on its source"


def test_after_a_stop_no_pending_move_starts_while_others_run() -> None:
    fake = FakeCluster(
        "t",
        [FakeHost("a"), FakeHost("b"), FakeHost("c")],
        [FakeVm(f"v{i}", "a") for i in range(6)],
        migration_seconds=0.3,
    )
    stop = threading.Event()
    fake.on_migrate = lambda m: stop.set()
    moves = [mv(f"v{i}", "a", "b" if i % 2 else "c") for i in range(6)]
    results = _execution(fake, moves, stop=stop).run()
    assert len(fake.migrations) <= 2, "only the first admitted pair may have started"
    assert {r.reason for r in results if r.outcome.value == "skipped"} == {"Interrupted"}
