"""The in-memory cluster as the executor's tests script it: the UUID each call names, the
thread each migration runs on, a migration's result replaced per VM, looks that fail."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from reconciler.engine.execute import Event, Execution, Gate, Ports
from reconciler.engine.ports import MigrationProgress, MigrationResult
from reconciler.errors import HostUnreachable
from reconciler.model.base import HostName, VmName
from reconciler.model.plan import Move, Reason
from reconciler.model.snapshot import (
    MigrationClass,
    ReconcilerState,
    Snapshot,
    VmRunState,
    VmState,
)
from tests.core.builders import desired, host
from tests.fakes import GIB, FakeCluster, FakeHost, FakeVm

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
