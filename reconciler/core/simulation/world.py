"""The simulated cluster: hosts of known kinds, the trace's VMs, where each runs and the
records it carries, and the snapshot a round observes of it.

A round observes what ``run`` would: every host answering, each VM's CPU in cores of the host
it runs on, and (with ``basis: used``) its load over the policy's window as a load source
gives it (``core.load_view.from_points``: the trace's figures are the rate points, one per
trace step, so a window shorter than two steps reads one figure; with ``statistic: forecast``
the trace's figures before now, up to ``forecast.history``, are the history the forecast
learns from). The records on the VMs
(last move, backoff, failures, first sighting) are written as the engine writes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from reconciler.core import load_view
from reconciler.core.simulation.trace import Trace
from reconciler.model.base import HostName, VmName, VmUuid
from reconciler.model.desired import DesiredState
from reconciler.model.load import Statistic
from reconciler.model.policy import Basis
from reconciler.model.simulation import HostKind
from reconciler.model.snapshot import HostState, ReconcilerState, Snapshot, VmRunState, VmState

UPTIME = 30 * 86400.0
"""Seconds every VM of a trace has been up at the start: none is young."""


class World:
    """Where each VM of ``trace`` runs on hosts of ``kinds``, in time."""

    def __init__(
        self,
        desired: DesiredState,
        trace: Trace,
        kinds: Mapping[str, HostKind],
        placement: Mapping[str, str],
    ) -> None:
        self.desired = desired
        self.trace = trace
        self.hosts: list[str] = [h.name for h in desired.cluster.spec.hosts]
        self.index = {h: i for i, h in enumerate(self.hosts)}
        self.kinds: list[HostKind] = [kinds[h] for h in self.hosts]
        self.capacity = [k.cpus * k.speed for k in self.kinds]
        self.names = [v.name for v in trace.vms]
        self.vm_index = {n: i for i, n in enumerate(self.names)}
        missing = [n for n in self.names if n not in placement]
        if missing:
            raise ValueError(f"no host for {len(missing)} VM(s), e.g. {missing[0]}")
        self.host_of = [self.index[placement[n]] for n in self.names]
        self.records = [ReconcilerState() for _ in self.names]
        self.uuids = [VmUuid(f"sim-{i:08d}") for i in range(len(self.names))]
        self.asleep: set[int] = set()
        """Hosts powered off (standby): they draw nothing and take no VM."""
        self.booting: dict[int, float] = {}
        """Host -> seconds into the trace when its boot ends."""
        self._spec = desired.policy.spec.load.model_copy(
            update={"sample_every": timedelta(seconds=trace.step)}
        )

    def cores(self, vm: int, seconds: float, host: int | None = None) -> float:
        """VM ``vm``'s demand ``seconds`` into the trace, in cores of ``host`` (default: its
        own)."""
        h = self.host_of[vm] if host is None else host
        return self.trace.at(vm, seconds) / self.kinds[h].speed

    def snapshot(self, now: datetime) -> Snapshot:
        """What a round observes at ``now``."""
        seconds = (now - self.trace.start).total_seconds()
        memory_used = [0] * len(self.hosts)
        vms: list[VmState] = []
        for i, spec in enumerate(self.trace.vms):
            h = self.host_of[i]
            memory_used[h] += spec.memory
            vms.append(
                VmState(
                    name=VmName(spec.name),
                    uuid=self.uuids[i],
                    host=HostName(self.hosts[h]),
                    state=VmRunState.RUNNING,
                    vcpus=spec.vcpus,
                    memory_max=spec.memory,
                    memory_current=spec.memory,
                    cpu_used=round(self.cores(i, max(0.0, seconds - self.trace.step)), 4),
                    uptime=UPTIME + seconds,
                    dirty_rate=int(spec.dirty) if spec.dirty else None,
                    labels=dict(spec.labels),
                    reconciler=self.records[i],
                )
            )
        hosts = [
            HostState(
                name=HostName(name),
                uri=f"sim:///{name}",
                reachable=True,
                arch=kind.arch,
                cpus=kind.cpus,
                memory_total=kind.memory,
                memory_free=max(0, kind.memory - memory_used[h]),
            )
            for h, (name, kind) in enumerate(zip(self.hosts, self.kinds, strict=True))
        ]
        snap = Snapshot(
            cluster=self.desired.cluster.metadata.name, taken_at=now, hosts=hosts, vms=vms
        )
        if self.desired.policy.spec.basis is not Basis.USED:
            return snap
        window = self._spec.window.total_seconds()
        history = None
        if self._spec.statistic is Statistic.FORECAST:
            history = self._points(seconds, self._spec.forecast.history.total_seconds())
        return load_view.from_points(
            snap,
            self._spec,
            self._points(seconds, window),
            now,
            history=history,
            history_step=self.trace.step,
        )

    def _points(self, seconds: float, window: float) -> dict[str, Sequence[tuple[float, float]]]:
        """Each VM's rate points over the ``window`` seconds ending ``seconds`` into the
        trace: one per trace step already past, at the step's end, in cores of the host it
        runs on now."""
        step = self.trace.step
        last = int(seconds // step)  # steps 0 .. last-1 are over
        first = max(0, last - int(-(-window // step)))
        start = self.trace.start.timestamp()
        out: dict[str, Sequence[tuple[float, float]]] = {}
        for i, name in enumerate(self.names):
            speed = self.kinds[self.host_of[i]].speed
            row = self.trace.demand[i]
            out[name] = [
                (start + (k + 1) * step, row[k] / speed) for k in range(first, min(last, len(row)))
            ]
        return out

    def power_off(self, host: str) -> None:
        h = self.index[host]
        if any(self.host_of[v] == h for v in range(len(self.names))):
            raise ValueError(f"{host} runs VMs: it is never powered off")
        self.asleep.add(h)

    def power_on(self, host: str, ready_at: float) -> None:
        h = self.index[host]
        self.asleep.discard(h)
        self.booting[h] = ready_at

    def booted(self, seconds: float) -> list[str]:
        """The hosts whose boot has ended by ``seconds``: in service now."""
        done = [h for h, at in self.booting.items() if at <= seconds]
        for h in done:
            del self.booting[h]
        return [self.hosts[h] for h in done]

    def moved(self, vm: int, target: int, record: ReconcilerState) -> None:
        self.host_of[vm] = target
        self.records[vm] = record

    def stamped(self, stamps: Sequence[tuple[VmState, ReconcilerState]]) -> None:
        """First sightings written on the VMs, as the engine writes them."""
        for seen, record in stamps:
            i = self.vm_index.get(seen.name)
            if i is not None:
                self.records[i] = record
