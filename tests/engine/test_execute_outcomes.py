"""What the executor reports and records of each move, pinned in full on canonical examples.

The result of a move (outcome, reason, detail, timings) is what an operator reads in the
report; the record on the domain is what the next round, or another instance, reads. Both are
judged here from the in-memory cluster: where each VM runs and what its domain carries.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from reconciler.engine.execute import FRESH_FOR, Event
from reconciler.engine.ports import MigrationProgress, MigrationResult
from reconciler.model.plan import Move
from reconciler.model.snapshot import (
    FailedMove,
    MigrationClass,
    ReconcilerState,
    VmRunState,
)
from reconciler.model.status import MoveOutcome, MoveResult
from tests.engine.scripted import PLAN, TOOK, Script, Scripted, execution, move, two_hosts
from tests.fakes import GIB, T0, FakeCluster, FakeHost, FakeVm

# --- a move that succeeded --------------------------------------------------------------------


def test_the_record_of_a_successful_move_says_why_it_moved_and_what_it_cost() -> None:
    fake = two_hosts(migration_seconds=0.001)
    m = move("x", "a", "b")
    events: list[Event] = []
    run = execution(fake, [m], on_event=events.append)
    assert run.run() == [
        MoveResult(
            vm="x",
            source="a",
            target="b",
            outcome=MoveOutcome.SUCCEEDED,
            reason="Balance",
            detail="x leaves a: a runs 80% of its CPUs, b 20%",
            started_at=T0,
            seconds=0.001,
            downtime_ms=12.0,
            data_bytes=4 * GIB,
        )
    ]
    assert fake.hosts_of() == {"x": "b"}
    assert fake.vms["x"].record == ReconcilerState(
        last_moved_at=T0 + TOOK,
        last_moved_from="a",
        last_moved_to="b",
        last_plan_id=PLAN,
        moves=1,
        last_reason="Balance",
    )
    (result,) = run.results.values()
    assert events == [
        Event("start", m),
        Event("progress", m, progress=MigrationProgress(vm="x", data_total=4 * GIB)),
        Event(
            "progress",
            m,
            progress=MigrationProgress(vm="x", data_total=4 * GIB, data_processed=4 * GIB),
        ),
        Event("done", m, result=result),
    ]


def test_every_call_on_a_domain_names_it_by_uuid() -> None:
    # a VM of the same name defined again meanwhile must not receive another's record
    fake = two_hosts()
    execution(fake, [move("x", "a", "b")]).run()
    assert fake.calls == [
        ("record", "a", "uuid-x"),  # the intent, on the source
        ("migrate", "a", "uuid-x"),
        ("record", "b", "uuid-x"),  # the outcome, where the VM runs now
    ]


def test_migrations_run_on_threads_named_for_them_in_a_thread_dump() -> None:
    fake = two_hosts()
    execution(fake, [move("x", "a", "b")]).run()
    assert [re.sub(r"\d+$", "N", t) for t in fake.threads] == ["migrate_N"]


@pytest.mark.parametrize(
    ("age", "looks"),
    [(timedelta(0), 0), (FRESH_FOR, 0), (FRESH_FOR + timedelta(microseconds=1), 1)],
    ids=["just-taken", "exactly-fresh-for", "older"],
)
def test_the_first_moves_start_on_a_recent_observation_without_a_second_look(
    age: timedelta, looks: int
) -> None:
    fake = two_hosts()
    run = execution(fake, [move("x", "a", "b")])
    fake.clock.advance(age)
    run.run()
    assert fake.observations - 1 == looks, "the round's own observation, then the looks"
    assert fake.hosts_of() == {"x": "b"}


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_the_work_of_admission_follows_what_starts_not_the_length_of_the_queue(n: int) -> None:
    # one slot: the first pass judges one move; every later one judges the next move twice
    # (on the working view, then after a fresh look at its hosts), never the whole queue
    names = [f"v{i}" for i in range(n)]
    hosts = [FakeHost(f"s{i}") for i in range(n)] + [FakeHost(f"t{i}") for i in range(n)]
    fake = Scripted(hosts, [FakeVm(v, f"s{i}") for i, v in enumerate(names)])
    run = execution(fake, [move(v, f"s{i}", f"t{i}") for i, v in enumerate(names)], parallel=1)
    assert [r.outcome for r in run.run()] == [MoveOutcome.SUCCEEDED] * n
    assert run.verdicts == 2 * n - 1


# --- a move that did not succeed -------------------------------------------------------------


def _result(m: Move, **kw: Any) -> MigrationResult:
    return MigrationResult(vm=m.vm, source=m.source, target=m.target, **kw)


def _raises(m: Move) -> MigrationResult:
    raise RuntimeError("connection to b dropped")


FAILURES: dict[str, tuple[Script | None, MoveOutcome, str, str, str]] = {
    # name: (what the migration returns (None: the fake's own fault), outcome, detail,
    #        host of the record, error recorded)
    "refused": (
        None,
        MoveOutcome.FAILED,
        "migration refused by the target",
        "a",
        "migration refused by the target",
    ),
    "migrator-raised": (
        _raises,
        MoveOutcome.FAILED,
        "connection to b dropped",
        "a",
        "connection to b dropped",
    ),
    "no-error-given": (
        lambda m: _result(m, succeeded=False),
        MoveOutcome.FAILED,
        "failed",
        "a",
        "failed",
    ),
    "aborted": (
        lambda m: _result(m, succeeded=False, aborted=True, running_on=[m.source]),
        MoveOutcome.ABORTED,
        "aborted",
        "a",
        "aborted",
    ),
    "left-running-on-both": (
        lambda m: _result(m, succeeded=False, error="job failed", running_on=["a", "b"]),
        MoveOutcome.FAILED,
        "job failed; found running on ['a', 'b'], paused on []",
        "a",
        "job failed",
    ),
    "left-paused-on-target": (
        lambda m: _result(
            m, succeeded=False, error="job failed", running_on=["a"], paused_on=["b"]
        ),
        MoveOutcome.FAILED,
        "job failed; found running on ['a'], paused on ['b']",
        "a",
        "job failed",
    ),
}


@pytest.mark.parametrize("case", list(FAILURES))
def test_a_move_that_did_not_succeed_says_why_and_is_recorded_where_libvirt_shows_the_vm(
    case: str,
) -> None:
    script, outcome, detail, where, error = FAILURES[case]
    fake = two_hosts()
    if script is None:
        fake.fail_next("x")
    else:
        fake.script["x"] = script
    assert execution(fake, [move("x", "a", "b")]).run() == [
        MoveResult(
            vm="x",
            source="a",
            target="b",
            outcome=outcome,
            reason="Balance",
            detail=detail,
            started_at=T0,
        )
    ]
    assert fake.hosts_of() == {"x": "a"}
    assert fake.records[-1] == (
        where,
        "x",
        ReconcilerState(
            last_failure=FailedMove(at=T0 + TOOK, source="a", target="b", plan_id=PLAN, error=error)
        ),
    )


def test_a_move_that_arrived_although_the_client_failed_is_a_success_saying_so() -> None:
    fake = two_hosts()
    fake.fail_after_copy("x")
    (result,) = execution(fake, [move("x", "a", "b")]).run()
    assert result.outcome is MoveOutcome.SUCCEEDED
    assert result.detail == (
        "x leaves a: a runs 80% of its CPUs, b 20% (the client reported "
        "'client connection reset after the copy', but the VM runs on b)"
    )
    assert fake.hosts_of() == {"x": "b"}
    assert fake.vms["x"].record.last_moved_to == "b"
    assert fake.vms["x"].record.last_failure is None


# --- what the queue knows of a VM after its migration --------------------------------------


def _stays(m: Move) -> MigrationResult:
    return _result(m, succeeded=False, error="refused", running_on=[m.source])


def _unknown(m: Move) -> MigrationResult:
    return _result(m, succeeded=False, error="lost the connection")


class _Arrives:
    """The VM ends on the target; the result says so (or, for a cold move, names no host)."""

    def __init__(self, fake: FakeCluster, *, succeeded: bool, running: bool) -> None:
        self.fake, self.succeeded, self.running = fake, succeeded, running

    def __call__(self, m: Move) -> MigrationResult:
        self.fake.vms[m.vm].host = m.target
        running_on = [m.target] if self.running else []
        error = None if self.succeeded else "the job ended with an error"
        return _result(m, succeeded=self.succeeded, error=error, running_on=running_on)


@pytest.mark.parametrize(
    ("how", "frees"),
    [
        ("stays-on-source", False),
        ("unknown-where", False),
        ("failed-but-arrived", True),
        ("succeeded", True),
        ("cold-succeeded", True),
    ],
)
def test_where_a_migration_left_its_vm_counts_for_the_moves_after_it(how: str, frees: bool) -> None:
    # b has room for one VM: y may go there only once x has left it; every later look at the
    # hosts fails, so the queue knows only what the migration's result said
    fake = Scripted(
        [FakeHost("a"), FakeHost("b", memory=6 * GIB), FakeHost("c")],
        [FakeVm("x", "b"), FakeVm("y", "c")],
    )
    fake.blind = True
    kind: dict[str, Any] = {}
    if how == "stays-on-source":
        fake.script["x"] = _stays
    elif how == "unknown-where":
        fake.script["x"] = _unknown
    elif how == "failed-but-arrived":
        fake.script["x"] = _Arrives(fake, succeeded=False, running=True)
    elif how == "cold-succeeded":
        fake.script["x"] = _Arrives(fake, succeeded=True, running=False)
        fake.vms["x"].state = VmRunState.SHUTOFF
        kind = {"migration_class": MigrationClass.COLD}
    results = execution(fake, [move("x", "b", "a", **kind), move("y", "c", "b")], parallel=1).run()
    y = results[1]
    if frees:
        assert fake.hosts_of() == {"x": "a", "y": "b"}
        assert y.outcome is MoveOutcome.SUCCEEDED
    else:
        assert fake.hosts_of() == {"x": "b", "y": "c"}, "b would hold both"
        assert y.outcome is MoveOutcome.SKIPPED
        assert [c for c in fake.calls if c[0] == "migrate"] == [("migrate", "b", "uuid-x")]
