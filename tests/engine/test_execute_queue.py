"""The executor's queue on the in-memory cluster: a stop or a closed gate mid-queue, how soon
a free slot is filled, the looks it takes (and the hosts it must not look at), and what it
says of a move that never started."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest

from reconciler.engine import execute
from reconciler.engine.execute import FRESH_FOR, Event, Execution, Ports
from reconciler.model.base import HostName
from reconciler.model.plan import Move
from reconciler.model.snapshot import (
    Snapshot,
    VmRunState,
)
from reconciler.model.status import MoveOutcome, MoveResult
from tests.core.builders import desired, host
from tests.engine.scripted import PLAN, Scripted, execution, move
from tests.fakes import GIB, FakeHost, FakeVm

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
