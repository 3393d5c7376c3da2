"""An in-memory cluster behind the engine's ports, with injectable faults.

``FakeCluster`` is at once the Observer, the Migrator and the DomainRecorder of the engine: it
holds hosts and domains, answers observations from them, moves domains when asked to migrate
and keeps each domain's reconciler record. Faults are injected by name:

- ``fail_next(vm, error)``: the next migration of ``vm`` fails; the VM stays on its source;
- ``fail_after_copy(vm)``: the migration raises on the client side although the VM did arrive
  (the case Nova and Ganeti got wrong): the result must still say where it runs;
- ``unreachable(host)``: the host stops answering observations and migrations;
- ``stop_vm(vm)``: the VM is shut off (a move waiting in the queue must be skipped);
- ``on_migrate``: a hook run while a migration is in progress (to inject faults mid-move).

``FakeObservedBranch`` is the observed branch read back (``ObservedBranch``): recorded
snapshots with their definitions, newest last; ``fail_with`` makes every read raise.

Every migration is logged in ``migrations`` with the moves running at its start, so tests can
check that no limit was ever exceeded. ``host_calls`` counts the calls each host answered (one
per host observed, one per record, one on each end of a migration), ``observations`` the
observer's calls.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from reconciler.config.yaml_edit import three_way
from reconciler.core.load_samples import HostSample
from reconciler.engine.ports import MigrationProgress, MigrationResult
from reconciler.errors import HostUnreachable, ReconcilerError, TerminalError
from reconciler.model.acting import Loaded, Record, Recorded
from reconciler.model.base import HostName, VmName, VmUuid
from reconciler.model.desired import DesiredState
from reconciler.model.load import LoadSamples
from reconciler.model.plan import Move
from reconciler.model.recovery import RecordedSighting
from reconciler.model.snapshot import HostState, ReconcilerState, Snapshot, VmRunState, VmState
from reconciler.model.status import ReconcileStatus

GIB = 1024**3
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@dataclass
class FakeVm:
    name: str
    host: str
    vcpus: int = 2
    memory: int = 4 * GIB
    cpu_used: float = 0.5
    labels: dict[str, str] = field(default_factory=dict)
    state: VmRunState = VmRunState.RUNNING
    record: ReconcilerState = field(default_factory=ReconcilerState)
    migratable: bool = True


@dataclass
class FakeHost:
    name: str
    cpus: int = 16
    memory: int = 64 * GIB
    arch: str = "x86_64"
    reachable: bool = True


class FakeClock:
    """A clock that moves only when told to (or by ``tick`` on every reading)."""

    def __init__(self, start: datetime = T0, tick: timedelta = timedelta(0)) -> None:
        self.current = start
        self.tick = tick
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            value = self.current
            self.current += self.tick
            return value

    def advance(self, delta: timedelta) -> None:
        with self._lock:
            self.current += delta


def _result(move: Move, **fields: Any) -> MigrationResult:
    return MigrationResult(vm=move.vm, source=move.source, target=move.target, **fields)


class FakeCluster:
    def __init__(
        self,
        name: str,
        hosts: Sequence[FakeHost],
        vms: Sequence[FakeVm],
        clock: FakeClock | None = None,
        migration_seconds: float = 0.0,
    ) -> None:
        self.name = name
        self.hosts = {h.name: h for h in hosts}
        self.vms = {v.name: v for v in vms}
        self.clock = clock or FakeClock()
        self.migration_seconds = migration_seconds
        self.lock = threading.Lock()
        self.running: list[Move] = []
        self.migrations: list[tuple[Move, list[Move]]] = []
        """Every migration started, with the moves already running at its start."""
        self.max_running = 0
        self.records: list[tuple[str, str, ReconcilerState]] = []
        self.observations = 0
        self.host_calls: Counter[str] = Counter()
        self._fail: dict[str, str] = {}
        self._lie: set[str] = set()
        self.on_migrate: Callable[[Move], None] | None = None
        self.copies: dict[str, tuple[str, ReconcilerState]] = {}
        """VM name -> (host, record) of a shut-off copy a stopped cold move left there."""
        self.discarded: list[tuple[str, str]] = []

    # --- faults ---------------------------------------------------------------------------

    def fail_next(self, vm: str, error: str = "migration refused by the target") -> None:
        self._fail[vm] = error

    def fail_after_copy(self, vm: str) -> None:
        self._lie.add(vm)

    def unreachable(self, host: str, value: bool = True) -> None:
        self.hosts[host].reachable = not value

    def stop_vm(self, vm: str) -> None:
        self.vms[vm].state = VmRunState.SHUTOFF

    def twin(self, vm: str, host: str) -> None:
        """A second copy of ``vm`` on ``host``, in the VM's own state: running twice while it
        runs (a fence that lied, a person's ``virsh start`` of an old copy)."""
        self.copies[vm] = (host, ReconcilerState())

    # --- Observer -------------------------------------------------------------------------

    def _host_state(self, h: FakeHost) -> HostState:
        if not h.reachable:
            return HostState(
                name=HostName(h.name), uri=f"fake://{h.name}", reachable=False, error="down"
            )
        return HostState(
            name=HostName(h.name),
            uri=f"fake://{h.name}",
            reachable=True,
            arch=h.arch,
            cpus=h.cpus,
            memory_total=h.memory,
        )

    def _vm_state(self, v: FakeVm) -> VmState:
        return VmState(
            name=VmName(v.name),
            uuid=VmUuid(f"uuid-{v.name}"),
            host=HostName(v.host),
            state=v.state,
            vcpus=v.vcpus,
            memory_max=v.memory,
            memory_current=v.memory,
            memory_used=v.memory,
            cpu_used=v.cpu_used,
            labels=dict(v.labels),
            reconciler=v.record,
            migratable=v.migratable and v.state is VmRunState.RUNNING,
        )

    def observe_hosts(self, hosts: Sequence[str]) -> Snapshot:
        with self.lock:
            self.observations += 1
            wanted = [self.hosts[h] for h in hosts if h in self.hosts]
            self.host_calls.update(h.name for h in wanted)
            up = {h.name for h in wanted if h.reachable}
            vms = [self._vm_state(v) for v in self.vms.values() if v.host in up]
            for name, (host, record) in self.copies.items():
                if host in up:
                    copy = self._vm_state(self.vms[name]).model_copy(
                        update={"host": HostName(host), "reconciler": record}
                    )
                    vms.append(copy)
            return Snapshot(
                cluster=self.name,
                taken_at=self.clock.now(),
                hosts=[self._host_state(h) for h in wanted],
                vms=vms,
            )

    def observe(self) -> Snapshot:
        return self.observe_hosts(sorted(self.hosts))

    # --- Migrator -------------------------------------------------------------------------

    def migrate(
        self,
        move: Move,
        *,
        on_progress: Callable[[MigrationProgress], None],
        abort: threading.Event,
        uuid: str | None = None,
    ) -> MigrationResult:
        with self.lock:
            self.host_calls.update((move.source, move.target))
            self.migrations.append((move, list(self.running)))
            self.running.append(move)
            self.max_running = max(self.max_running, len(self.running))
        try:
            return self._migrate(move, on_progress, abort)
        finally:
            with self.lock:
                self.running.remove(move)

    def _migrate(
        self,
        move: Move,
        on_progress: Callable[[MigrationProgress], None],
        abort: threading.Event,
    ) -> MigrationResult:
        vm = self.vms.get(move.vm)
        on_progress(MigrationProgress(vm=move.vm, data_total=move.memory))
        if self.on_migrate is not None:
            self.on_migrate(move)
        if self.migration_seconds:
            abort.wait(self.migration_seconds)
        if abort.is_set():
            return _result(
                move, succeeded=False, aborted=True, error="aborted", running_on=[move.source]
            )
        with self.lock:
            error = self._fail.pop(move.vm, None)
            if vm is None or vm.host != move.source:
                return _result(move, succeeded=False, error="domain not found")
            if not self.hosts[move.target].reachable:
                error = error or f"cannot connect to {move.target}"
            if vm.state is not VmRunState.RUNNING:
                error = error or "domain is not running"
            if error is not None:
                return _result(move, succeeded=False, error=error, running_on=[vm.host])
            vm.host = move.target
        on_progress(
            MigrationProgress(vm=move.vm, data_total=move.memory, data_processed=move.memory)
        )
        lied = move.vm in self._lie
        self._lie.discard(move.vm)
        return _result(
            move,
            succeeded=True,
            error="client connection reset after the copy" if lied else None,
            running_on=[move.target],
            seconds=self.migration_seconds,
            downtime_ms=12.0,
            data_bytes=move.memory,
        )

    def discard_copy(self, host: str, vm: str, *, uuid: str) -> None:
        with self.lock:
            self.host_calls[host] += 1
            if not self.hosts[host].reachable:
                raise HostUnreachable(f"cannot connect to {host}")
            if self.copies.get(vm, ("", None))[0] != host or uuid != f"uuid-{vm}":
                raise HostUnreachable(f"no copy of {vm} on {host}")
            del self.copies[vm]
            self.discarded.append((host, vm))

    # --- DomainRecorder -------------------------------------------------------------------

    def record(
        self, host: str, vm: str, state: ReconcilerState, *, uuid: str | None = None
    ) -> None:
        with self.lock:
            self.host_calls[host] += 1
            v = self.vms.get(vm)
            if v is not None and uuid is not None and uuid != f"uuid-{v.name}":
                raise HostUnreachable(f"no domain with UUID {uuid} on {host}")
            if v is None or v.host != host or not self.hosts[host].reachable:
                raise HostUnreachable(f"cannot record on {vm} at {host}")
            v.record = state
            self.records.append((host, vm, state))

    # --- checks ---------------------------------------------------------------------------

    def hosts_of(self) -> dict[str, str]:
        return {v.name: v.host for v in self.vms.values()}


class FakeObservedBranch:
    """The observed branch in memory: ``push`` records a snapshot with its definitions."""

    def __init__(self) -> None:
        self.pushed: list[RecordedSighting] = []
        self.fail_with: ReconcilerError | None = None
        self.reads = 0

    def push(self, snapshot: Snapshot, definitions: dict[str, str]) -> None:
        commit = f"{len(self.pushed) + 1:040x}"
        self.pushed.append(
            RecordedSighting(commit=commit, snapshot=snapshot, definitions=dict(definitions))
        )

    def last_sighting(self, host: str) -> RecordedSighting | None:
        self.reads += 1
        if self.fail_with is not None:
            raise self.fail_with
        for sighting in reversed(self.pushed):
            if any(h.name == host and h.reachable for h in sighting.snapshot.hosts):
                return sighting
        return None


class MemoryStatusStore:
    """A StatusStore in memory; ``saves`` counts how often a round wrote it."""

    def __init__(self) -> None:
        self.status: ReconcileStatus | None = None
        self.saves = 0

    def load(self) -> ReconcileStatus | None:
        return self.status

    def save(self, status: ReconcileStatus) -> None:
        self.status = status
        self.saves += 1


class MemorySource:
    """A DesiredSource in memory: the placement as a dict, edited three-way like the real ones;
    ``person_sets`` changes an entry between a round's load and its record."""

    def __init__(
        self,
        desired: DesiredState | None = None,
        placement: dict[str, str] | None = None,
        clock: FakeClock | None = None,
    ) -> None:
        self.desired = desired
        self.clock = clock
        self.placement = dict(placement or {})
        self.read: dict[str, str] = dict(self.placement)
        self.writes: list[dict[str, str]] = []
        self.records: list[Record] = []
        self.changed_at: datetime | None = None
        """When the placement last changed (set it to model a source that knows)."""

    def describe(self) -> str:
        return "memory"

    def load(self) -> Loaded:
        assert self.desired is not None
        self.read = dict(self.placement)
        # the desired state reads the placement as it is now, like a file or a commit
        spec = self.desired.placement.spec.model_copy(update={"vms": dict(self.placement)})
        placement = self.desired.placement.model_copy(update={"spec": spec})
        desired = self.desired.model_copy(update={"placement": placement})
        return Loaded(desired=desired, placement_changed_at=self.changed_at)

    def person_sets(self, vm: str, host: str) -> None:
        self.placement[vm] = host

    def record(self, record: Record) -> Recorded:
        self.records.append(record)
        write, kept = three_way(self.read, self.placement, record.placement)
        changed = {k: v for k, v in write.items() if self.placement.get(k) != v}
        if changed:
            self.placement.update(changed)
            self.writes.append(changed)
            if self.clock is not None:
                self.changed_at = self.clock.now()
        return Recorded(
            where="memory" if changed else None,
            written=changed,
            conflicts=[f"{vm}: changed to {host} meanwhile" for vm, host in sorted(kept.items())],
        )


class FakeSampler:
    """The ``LoadSampler`` of a FakeCluster: each VM's CPU counter grows by its ``cpu_used``
    for the time since the last reading, and starts anew on every host it moves to (a new
    process), as libvirt's ``cpu.time`` does."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.counters: dict[str, tuple[str, float, float]] = {}
        """VM -> (host, counter in ns, when last read)."""
        self.ids: dict[str, int] = {}
        self.calls = 0

    def sample(self) -> list[HostSample]:
        self.calls += 1
        now = self.cluster.clock.now().timestamp()
        out: dict[str, list[tuple[str, str, int, int]]] = {h: [] for h in self.cluster.hosts}
        for vm in self.cluster.vms.values():
            if vm.state is not VmRunState.RUNNING:
                continue
            host, counter, at = self.counters.get(vm.name, (vm.host, 0.0, now))
            if host != vm.host:  # moved: a new process on the new host
                host, counter, at = vm.host, 0.0, now
                self.ids[vm.name] = self.ids.get(vm.name, 1) + 1
            counter += vm.cpu_used * (now - at) * 1e9
            self.counters[vm.name] = (host, counter, now)
            out[host].append((vm.name, f"uuid-{vm.name}", self.ids.get(vm.name, 1), round(counter)))
        return [
            HostSample(h, now, tuple(vms))
            if self.cluster.hosts[h].reachable
            else HostSample(h, now, error="unreachable")
            for h, vms in sorted(out.items())
        ]


class MemorySampleStore:
    def __init__(self) -> None:
        self.samples: LoadSamples | None = None
        self.saves = 0
        self.fail: str | None = None

    def load(self) -> LoadSamples | None:
        return self.samples

    def save(self, samples: LoadSamples) -> None:
        if self.fail is not None:
            raise TerminalError(self.fail)
        self.saves += 1
        self.samples = samples
