"""What the executor reports and records of each move, pinned in full on canonical examples.

The result of a move (outcome, reason, detail, timings) is what an operator reads in the
report; the record on the domain is what the next round, or another instance, reads. Both are
judged here from the in-memory cluster: where each VM runs and what its domain carries.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest

from reconciler.engine import execute
from reconciler.engine.execute import FRESH_FOR, Event, Execution, Gate, Ports
from reconciler.engine.ports import MigrationProgress, MigrationResult
from reconciler.errors import HostUnreachable
from reconciler.model.base import HostName, VmName
from reconciler.model.plan import Move, Reason
from reconciler.model.snapshot import (
    FailedMove,
    MigrationClass,
    ReconcilerState,
    Snapshot,
    VmRunState,
    VmState,
)
from reconciler.model.status import MoveOutcome, MoveResult
from tests.core.builders import desired, host
from tests.fakes import GIB, T0, FakeCluster, FakeHost, FakeVm

PLAN = "plan-7"
TOOK = timedelta(seconds=30)
"""How long each migration of these examples takes on the fake clock."""


def move(vm: str, source: str, target: str, **kw: Any) -> Move:
    return Move(
        vm=VmName(vm),
        source=HostName(source),
        target=HostName(target),
        memory=4 * GIB,
        vcpus=2,
        reason=Reason.BALANCE,
        detail=f"{vm} leaves {source}: {source} runs 80% of its CPUs, {target} 20%",
        wave=0,
        **kw,
    )


Script = Callable[[Move], MigrationResult]


class Scripted(FakeCluster):
    """The fake cluster, noting the UUID each call names and the thread each migration runs
    on; ``script`` (when set) replaces the fake's migration for the VMs it names."""

    def __init__(self, hosts: Sequence[FakeHost], vms: Sequence[FakeVm], **kw: Any) -> None:
        super().__init__("t", hosts, vms, **kw)
        self.calls: list[tuple[str, str, str | None]] = []
        self.threads: list[str] = []
        self.script: dict[str, Script] = {}
        self.blind = False
        """Every look after the round's own observation fails."""
        self.looks: list[tuple[list[str], list[Move]]] = []
        """The hosts of every look, with the migrations running then."""

    def _vm_state(self, v: FakeVm) -> VmState:
        seen = super()._vm_state(v)
        if v.state is VmRunState.SHUTOFF:  # moved cold: only its definition moves
            return seen.model_copy(update={"migration_class": MigrationClass.COLD})
        return seen

    def observe_hosts(self, hosts: Sequence[str]) -> Snapshot:
        with self.lock:
            self.looks.append((list(hosts), list(self.running)))
        if self.blind and self.observations:
            self.observations += 1
            raise HostUnreachable(f"cannot connect to {', '.join(hosts)}")
        return super().observe_hosts(hosts)

    def migrate(
        self,
        move: Move,
        *,
        on_progress: Callable[[MigrationProgress], None],
        abort: threading.Event,
        uuid: str | None = None,
    ) -> MigrationResult:
        self.calls.append(("migrate", move.source, uuid))
        self.threads.append(threading.current_thread().name)
        self.clock.advance(TOOK)
        if move.vm in self.script:
            return self.script[move.vm](move)
        return super().migrate(move, on_progress=on_progress, abort=abort, uuid=uuid)

    def record(
        self, host: str, vm: str, state: ReconcilerState, *, uuid: str | None = None
    ) -> None:
        self.calls.append(("record", host, uuid))
        super().record(host, vm, state, uuid=uuid)


def execution(
    fake: FakeCluster,
    moves: Sequence[Move],
    *,
    parallel: int = 2,
    stop: threading.Event | None = None,
    abort: threading.Event | None = None,
    gate: Gate | None = None,
    on_event: Callable[[Event], None] = lambda e: None,
) -> Execution:
    hosts = [host(h, max_inbound=4, max_outbound=4) for h in fake.hosts]
    d = desired(hosts, hostLimit=100, parallel={"cluster": parallel}, batch=100)
    return Execution(
        d,
        fake.observe(),
        moves,
        Ports(fake, fake, fake, fake.clock),
        plan_id=PLAN,
        stop=stop or threading.Event(),
        abort=abort or threading.Event(),
        gate=gate,
        on_event=on_event,
    )


def two_hosts(**kw: Any) -> Scripted:
    return Scripted([FakeHost("a"), FakeHost("b")], [FakeVm("x", "a")], **kw)


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


# --- stopping ---------------------------------------------------------------------------------


class _StopOnLook(Scripted):
    def __init__(self, stop: threading.Event, *args: Any) -> None:
        super().__init__(*args)
        self.stop = stop

    def observe_hosts(self, hosts: Sequence[str]) -> Snapshot:
        if self.observations:
            self.stop.set()  # the request arrives while the queue looks at the hosts
        return super().observe_hosts(hosts)


def test_a_stop_during_the_look_before_a_start_starts_nothing_and_reports_in_plan_order() -> None:
    stop = threading.Event()
    fake = _StopOnLook(
        stop,
        [FakeHost(h) for h in "abcd"],
        [FakeVm("v1", "a"), FakeVm("v2", "c"), FakeVm("v3", "a")],
    )
    events: list[Event] = []
    moves = [move("v1", "a", "b"), move("v2", "c", "d"), move("v3", "a", "c")]
    run = execution(fake, moves, stop=stop, on_event=events.append)
    fake.clock.advance(FRESH_FOR * 2)  # the first pass looks at its hosts again
    results = run.run()
    assert fake.migrations == []
    assert fake.hosts_of() == {"v1": "a", "v2": "c", "v3": "a"}
    assert results == [
        MoveResult(
            vm=m.vm,
            source=m.source,
            target=m.target,
            outcome=MoveOutcome.SKIPPED,
            reason="Interrupted",
            detail="not started: the run was interrupted",
        )
        for m in moves
    ]
    assert events == [Event("skip", m, result=r) for m, r in zip(moves, results, strict=True)]


def test_a_stop_while_a_migration_runs_reports_the_moves_not_started_before_it_ends() -> None:
    # the queue notices a stop within its poll, not only when a migration ends
    stop, skipped = threading.Event(), threading.Event()
    fake = Scripted(
        [FakeHost(h) for h in "abc"], [FakeVm("v1", "a"), FakeVm("v2", "a"), FakeVm("v3", "c")]
    )

    def on_migrate(m: Move) -> None:
        stop.set()
        skipped.wait(10)

    fake.on_migrate = on_migrate
    events: list[Event] = []

    def note(e: Event) -> None:
        events.append(e)
        if e.kind == "skip":
            skipped.set()

    moves = [move("v1", "a", "b"), move("v2", "a", "c"), move("v3", "c", "b")]
    results = execution(fake, moves, parallel=1, stop=stop, on_event=note).run()
    assert [(e.kind, e.move.vm) for e in events if e.kind != "progress"] == [
        ("start", "v1"),
        ("skip", "v2"),
        ("skip", "v3"),
        ("done", "v1"),
    ]
    assert [r.outcome for r in results] == [MoveOutcome.SUCCEEDED] + [MoveOutcome.SKIPPED] * 2
    assert fake.hosts_of() == {"v1": "b", "v2": "a", "v3": "c"}


class CountingStop(threading.Event):
    """A stop request that counts how often the queue checked it."""

    def __init__(self) -> None:
        super().__init__()
        self.checks = 0

    def is_set(self) -> bool:
        self.checks += 1
        return super().is_set()

    def checked_twice_more(self) -> None:
        seen = self.checks
        for _ in range(500):
            if self.checks >= seen + 2:
                return
            threading.Event().wait(0.01)


@pytest.mark.parametrize("first", ["stop", "hold-lost"])
def test_the_queue_keeps_polling_after_it_gave_up_its_pending_moves(first: str) -> None:
    # the pending moves are given up (a stop, or the hold lost), then a stop arrives while the
    # migration still runs: the queue polls on until it ends, and reports every move once
    stop, skipped = CountingStop(), threading.Event()
    held = [True]
    fake = Scripted([FakeHost(h) for h in "abc"], [FakeVm("v1", "a"), FakeVm("v2", "a")])

    def on_migrate(m: Move) -> None:
        if first == "stop":
            stop.set()
        else:
            held[0] = False
        skipped.wait(10)
        stop.set()
        stop.checked_twice_more()

    fake.on_migrate = on_migrate
    moves = [move("v1", "a", "b"), move("v2", "a", "c")]
    results = execution(
        fake,
        moves,
        parallel=1,
        stop=stop,
        gate=lambda: None if held[0] else "the hold is no longer confirmed",
        on_event=lambda e: skipped.set() if e.kind == "skip" else None,
    ).run()
    why = {
        "stop": ("Interrupted", "not started: the run was interrupted"),
        "hold-lost": ("NotStarted", "not started: the hold is no longer confirmed"),
    }[first]
    assert [(r.vm, r.outcome, r.reason, r.detail) for r in results] == [
        ("v1", MoveOutcome.SUCCEEDED, "Balance", moves[0].detail),
        ("v2", MoveOutcome.SKIPPED, *why),
    ]
    assert fake.hosts_of() == {"v1": "b", "v2": "a"}


def test_as_many_migrations_run_at_once_as_the_cluster_allows() -> None:
    # more than a thread pool's default size: every admitted migration runs, none queues
    n = 40
    fake = Scripted(
        [FakeHost("a", cpus=256, memory=1024 * GIB), FakeHost("b", cpus=256, memory=1024 * GIB)],
        [FakeVm(f"v{i}", "a") for i in range(n)],
    )
    together = threading.Barrier(n, timeout=10)

    def all_at_once(m: Move) -> None:
        together.wait()

    fake.on_migrate = all_at_once
    hosts = [host(h, max_outbound=n, max_inbound=n) for h in fake.hosts]
    run = Execution(
        desired(hosts, hostLimit=100, parallel={"cluster": n}, batch=n),
        fake.observe(),
        [move(f"v{i}", "a", "b") for i in range(n)],
        Ports(fake, fake, fake, fake.clock),
        plan_id=PLAN,
        stop=threading.Event(),
        abort=threading.Event(),
    )
    assert [r.outcome for r in run.run()] == [MoveOutcome.SUCCEEDED] * n
    assert fake.max_running == n


# --- a move that could not start -------------------------------------------------------------


class _OthersMigrate(Scripted):
    """VMs migrated by someone else: ``theirs[vm] = (target, looks)`` shows ``vm`` paused on
    ``target`` as well, in the first ``looks`` looks at that host (the round's own included)."""

    def __init__(self, hosts: str, vms: dict[str, str], theirs: dict[str, tuple[str, int]]) -> None:
        super().__init__([FakeHost(h) for h in hosts], [FakeVm(v, h) for v, h in vms.items()])
        self.theirs = theirs

    def observe_hosts(self, hosts: Sequence[str]) -> Snapshot:
        snap = super().observe_hosts(hosts)
        copies = []
        for vm, (target, looks) in self.theirs.items():
            if target in hosts and looks > 0:
                self.theirs[vm] = (target, looks - 1)
                copies.append(
                    self._vm_state(self.vms[vm]).model_copy(
                        update={"host": HostName(target), "state": VmRunState.PAUSED}
                    )
                )
        return snap.model_copy(update={"vms": [*snap.vms, *copies]})


def test_a_move_that_could_not_start_says_why_it_waited() -> None:
    # the only slot of the cluster is taken by someone else's migration in every look
    fake = _OthersMigrate("abc", {"theirs": "a", "x": "c"}, {"theirs": ("b", 1000)})
    (result,) = execution(fake, [move("x", "c", "b")], parallel=1).run()
    assert fake.migrations == []
    assert (result.outcome, result.reason, result.detail) == (
        MoveOutcome.SKIPPED,
        "Blocked",
        "could not start: parallel.cluster 1 migrations already run",
    )


def test_before_giving_up_a_waiting_move_its_hosts_are_looked_at_once_more() -> None:
    # the migration that held it was over by then
    fake = _OthersMigrate("abc", {"theirs": "a", "x": "c"}, {"theirs": ("b", 1)})
    (result,) = execution(fake, [move("x", "c", "b")], parallel=1).run()
    assert result.outcome is MoveOutcome.SUCCEEDED
    assert fake.hosts_of() == {"theirs": "a", "x": "b"}


def test_after_a_migration_ends_the_waiting_moves_get_another_look_before_giving_up() -> None:
    # x and y wait for others' migrations into b and e (maxInbound 1). The look before giving
    # up finds the one into e over: y starts. When y has ended, x gets a look of its own,
    # and the one into b is over by then
    fake = _OthersMigrate(
        "abcdef",
        {"theirs": "a", "others": "f", "x": "c", "y": "d"},
        {"theirs": ("b", 2), "others": ("e", 1)},
    )
    hosts = [host(h, max_inbound=1) for h in fake.hosts]
    run = Execution(
        desired(hosts, hostLimit=100, parallel={"cluster": 4}, batch=100),
        fake.observe(),
        [move("x", "c", "b"), move("y", "d", "e")],
        Ports(fake, fake, fake, fake.clock),
        plan_id=PLAN,
        stop=threading.Event(),
        abort=threading.Event(),
    )
    assert [r.outcome for r in run.run()] == [MoveOutcome.SUCCEEDED] * 2
    assert [m.vm for m, _ in fake.migrations] == ["y", "x"]
    assert fake.hosts_of() == {"theirs": "a", "others": "f", "x": "b", "y": "e"}


def test_a_free_slot_starts_the_next_move_at_once_while_others_still_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the queue does not wait for its poll, nor for every migration running, to fill a slot
    monkeypatch.setattr(execute, "POLL_SECONDS", 60.0)
    fake = Scripted([FakeHost(h) for h in "abcd"], [FakeVm(f"v{i}", "a") for i in (1, 2, 3)])
    v1_running, v3_started = threading.Event(), threading.Event()

    def on_migrate(m: Move) -> None:
        if m.vm == "v1":
            v1_running.set()
            v3_started.wait(5)
        if m.vm == "v2":
            v1_running.wait(5)
        if m.vm == "v3":
            v3_started.set()

    fake.on_migrate = on_migrate
    moves = [move("v1", "a", "b"), move("v2", "a", "c"), move("v3", "a", "d")]
    assert [r.outcome for r in execution(fake, moves, parallel=2).run()] == [
        MoveOutcome.SUCCEEDED
    ] * 3
    assert [(m.vm, [r.vm for r in running]) for m, running in fake.migrations][2] == (
        "v3",
        ["v1"],
    )


# --- what the queue looks at ------------------------------------------------------------------


def test_a_host_a_migration_runs_on_is_not_looked_at_even_when_a_look_admits_a_move_from_it() -> (
    None
):
    # q runs from a. w's move to e waited for x's, and y's to d for room on d; when x has
    # ended, w may start, and the look at d and e that its start needs shows z gone from d:
    # then y, from a, may start too, and a is still not looked at while q runs
    fake = Scripted(
        [FakeHost(h) for h in "abcef"] + [FakeHost("d", memory=10 * GIB)],
        [FakeVm(vm, on) for vm, on in [("x", "c"), ("q", "a"), ("w", "d"), ("z", "d"), ("y", "a")]],
    )
    q_running, y_started = threading.Event(), threading.Event()

    def on_migrate(m: Move) -> None:
        if m.vm == "x":
            q_running.wait(5)
            del fake.vms["z"]  # shut down and undefined by someone meanwhile
        if m.vm == "q":
            q_running.set()
            y_started.wait(5)

    fake.on_migrate = on_migrate
    hosts = [host(h, max_outbound=4, max_inbound=1 if h == "e" else 4) for h in fake.hosts]
    moves = [move("x", "c", "e"), move("q", "a", "b"), move("w", "d", "e"), move("y", "a", "d")]
    run = Execution(
        desired(hosts, hostLimit=100, parallel={"cluster": 3}, batch=100),
        fake.observe(),
        moves,
        Ports(fake, fake, fake, fake.clock),
        plan_id=PLAN,
        stop=threading.Event(),
        abort=threading.Event(),
        on_event=lambda e: y_started.set() if (e.kind, e.move.vm) == ("start", "y") else None,
    )
    assert [r.outcome for r in run.run()] == [MoveOutcome.SUCCEEDED] * 4
    assert fake.hosts_of() == {"x": "e", "q": "b", "w": "e", "y": "d"}
    assert fake.looks[1:], "later passes look at the hosts that are free"
    for looked, running in fake.looks:
        busy = {h for m in running for h in (m.source, m.target)}
        assert not busy.intersection(looked), (looked, running)
