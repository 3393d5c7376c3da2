"""The executor's work per started move on in-memory clusters of any size.

A cluster of ``hosts`` hosts with ``vms_per_host`` VMs each, and ``0.75 x hosts`` pending
moves (each from one host to the host half the cluster away), run by the real executor on
``FakeCluster``. Counted: the calls the hosts answered (``FakeCluster.host_calls``: a host
observed, a record, each end of a migration) and the executor's own CPU time in the calling
thread, without the time spent inside the ports. Used by a test (host calls per move do not
grow with the cluster) and by ``benchmarks/execute_scale.py`` (figures at 10 to 1,000 hosts).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from reconciler.engine.execute import Execution, Ports
from reconciler.engine.ports import MigrationProgress, MigrationResult
from reconciler.model.base import HostName, VmName
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Move, Reason
from reconciler.model.snapshot import ReconcilerState, Snapshot
from reconciler.model.status import MoveOutcome
from tests.core.builders import desired, host, rule
from tests.fakes import GIB, FakeCluster, FakeHost, FakeVm

T = TypeVar("T")


@dataclass
class ScaleFigures:
    hosts: int
    pending: int
    started: int
    host_calls: int
    observations: int
    executor_seconds: float
    """CPU time of the executor's own thread, without the time inside the ports."""
    wall_seconds: float
    builds: int
    """Admission models built from the whole cluster."""
    verdicts: int

    @property
    def calls_per_move(self) -> float:
        return self.host_calls / max(1, self.started)

    @property
    def verdicts_per_move(self) -> float:
        return self.verdicts / max(1, self.started)

    @property
    def executor_ms_per_move(self) -> float:
        return 1000 * self.executor_seconds / max(1, self.started)


class _Timed:
    """The fake's ports, with the CPU time the executor's thread spends inside them."""

    def __init__(self, fake: FakeCluster) -> None:
        self.fake = fake
        self.thread = threading.get_ident()
        self.inside = 0.0

    def _timed(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if threading.get_ident() != self.thread:
            return fn(*args, **kwargs)
        began = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            self.inside += time.thread_time() - began

    def observe(self) -> Snapshot:
        return self._timed(self.fake.observe)

    def observe_hosts(self, hosts: Sequence[str]) -> Snapshot:
        return self._timed(self.fake.observe_hosts, hosts)

    def record(
        self, host: str, vm: str, state: ReconcilerState, *, uuid: str | None = None
    ) -> None:
        self._timed(self.fake.record, host, vm, state, uuid=uuid)

    def migrate(
        self,
        move: Move,
        *,
        on_progress: Callable[[MigrationProgress], None],
        abort: threading.Event,
        uuid: str | None = None,
    ) -> MigrationResult:
        return self._timed(self.fake.migrate, move, on_progress=on_progress, abort=abort, uuid=uuid)


def scale_case(hosts: int, vms_per_host: int = 4) -> tuple[FakeCluster, DesiredState, list[Move]]:
    names = [f"h{i:04d}" for i in range(hosts)]
    vms = [
        FakeVm(
            f"vm{i:04d}-{k}",
            name,
            memory=2 * GIB,
            cpu_used=0.5,
            labels={"app": "web" if k == 0 else "db"},
        )
        for i, name in enumerate(names)
        for k in range(vms_per_host)
    ]
    fake = FakeCluster("test", [FakeHost(n) for n in names], vms)
    d = desired(
        [host(n, labels={"rack": f"r{i // 10}"}) for i, n in enumerate(names)],
        rules=[
            rule(
                name="web-budget",
                type="disruptionBudget",
                vms={"labels": {"app": "web"}},
                maxConcurrent=4,
            )
        ],
        parallel={"cluster": 4},
        hostLimit=100,
        batch=1000,
    )
    half = max(1, hosts // 2)
    moves = [
        Move(
            vm=VmName(f"vm{i:04d}-{i % vms_per_host}"),
            source=HostName(names[i]),
            target=HostName(names[(i + half) % hosts]),
            memory=2 * GIB,
            vcpus=2,
            reason=Reason.BALANCE,
            detail="scale",
            wave=0,
        )
        for i in range(max(1, hosts * 3 // 4))
    ]
    return fake, d, moves


def run_scale(hosts: int, vms_per_host: int = 4) -> ScaleFigures:
    """Run the case of ``hosts`` hosts through the executor and count its work."""
    fake, d, moves = scale_case(hosts, vms_per_host)
    snapshot = fake.observe()
    fake.host_calls.clear()
    fake.observations = 0
    timed = _Timed(fake)
    execution = Execution(
        d,
        snapshot,
        moves,
        Ports(timed, timed, timed, fake.clock),
        plan_id="scale",
        stop=threading.Event(),
        abort=threading.Event(),
    )
    wall, cpu = time.perf_counter(), time.thread_time()
    results = execution.run()
    cpu = time.thread_time() - cpu
    wall = time.perf_counter() - wall
    started = sum(r.outcome is not MoveOutcome.SKIPPED for r in results)
    return ScaleFigures(
        hosts=hosts,
        pending=len(moves),
        started=started,
        host_calls=sum(fake.host_calls.values()),
        observations=fake.observations,
        executor_seconds=max(0.0, cpu - timed.inside),
        wall_seconds=wall,
        builds=execution.view.builds,
        verdicts=execution.verdicts,
    )
