"""What the executor looks at and writes around each start, on the in-memory cluster."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import timedelta

from reconciler.engine.execute import FRESH_FOR, Execution, Ports
from reconciler.model.base import HostName, VmName
from reconciler.model.plan import Move, Reason
from reconciler.model.snapshot import Snapshot
from reconciler.model.status import MoveOutcome
from tests.core.builders import desired, host
from tests.fakes import GIB, FakeCluster, FakeHost, FakeVm

HOSTS = ["a", "b", "c", "d"]


class Watched:
    """The fake's observer, noting each look's hosts with the migrations running then."""

    def __init__(self, fake: FakeCluster) -> None:
        self.fake = fake
        self.looks: list[tuple[list[str], list[Move]]] = []

    def observe(self) -> Snapshot:
        return self.fake.observe()

    def observe_hosts(self, hosts: Sequence[str]) -> Snapshot:
        with self.fake.lock:
            self.looks.append((list(hosts), list(self.fake.running)))
        return self.fake.observe_hosts(hosts)


def _move(vm: str, source: str, target: str) -> Move:
    return Move(
        vm=VmName(vm),
        source=HostName(source),
        target=HostName(target),
        memory=2 * GIB,
        vcpus=2,
        reason=Reason.BALANCE,
        detail="x",
        wave=0,
    )


def _run(moves: list[Move], parallel: int = 2) -> tuple[FakeCluster, Watched, list[MoveOutcome]]:
    vms = [FakeVm(m.vm, m.source, memory=2 * GIB, cpu_used=0.5) for m in moves]
    fake = FakeCluster("test", [FakeHost(h) for h in HOSTS], vms, migration_seconds=0.05)
    d = desired([host(h) for h in HOSTS], parallel={"cluster": parallel}, hostLimit=100, batch=100)
    snapshot = fake.observe()
    fake.clock.advance(FRESH_FOR + timedelta(seconds=1))  # every pass looks
    watched = Watched(fake)
    execution = Execution(
        d,
        snapshot,
        moves,
        Ports(watched, fake, fake, fake.clock),
        plan_id="p",
        stop=threading.Event(),
        abort=threading.Event(),
    )
    return fake, watched, [r.outcome for r in execution.run()]


def test_a_host_one_of_the_runs_migrations_is_on_is_not_looked_at_while_it_runs() -> None:
    # every later move shares a host with one running: a look there would wait for its end
    moves = [_move("v1", "a", "b"), _move("v2", "c", "d"), _move("v3", "b", "c")]
    moves += [_move("v4", "d", "a"), _move("v5", "a", "c")]
    fake, watched, outcomes = _run(moves)
    assert outcomes == [MoveOutcome.SUCCEEDED] * 5
    assert watched.looks, "later passes look at the hosts that are free"
    for hosts, running in watched.looks:
        busy = {h for m in running for h in (m.source, m.target)}
        assert not busy.intersection(hosts), (hosts, running)
    assert fake.hosts_of() == {"v1": "b", "v2": "d", "v3": "c", "v4": "a", "v5": "c"}


def test_the_outcome_of_a_move_is_written_after_the_next_move_starts() -> None:
    # one slot: v2 starts when v1 has ended; v1's outcome does not hold up v2's start
    fake, _, outcomes = _run([_move("v1", "a", "b"), _move("v2", "c", "d")], parallel=1)
    assert outcomes == [MoveOutcome.SUCCEEDED] * 2
    written = [(vm, state.intent is not None) for _, vm, state in fake.records]
    assert written == [("v1", True), ("v2", True), ("v1", False), ("v2", False)]
    assert all(fake.vms[vm].record.intent is None for vm in ("v1", "v2"))
