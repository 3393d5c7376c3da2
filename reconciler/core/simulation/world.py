"""The simulated cluster: hosts of known kinds, the trace's VMs, where each runs and the
records it carries, and the snapshot a round observes of it.

A round observes what ``run`` would: every host answering, each VM's CPU in cores of the host
it runs on, and (with ``basis: used``) its load over the policy's window as a load source
gives it (``core.load_view.from_points``: the trace's figures are the rate points, one per
trace step, so a window shorter than two steps reads one figure; with ``statistic: forecast``
the trace's figures before now, up to ``forecast.history``, are the history the forecast
learns from). The records on the VMs
(last move, backoff, failures, first sighting) are written as the engine writes them.

Each round's snapshot reuses what did not change since the last: a VM's sighting is a copy of
the one validated when it last moved or had its record written, with the round's CPU and
uptime (:func:`sighting`); a host's is the last one unless its free memory changed; each
step's figures are read from the trace once (:meth:`World.demand`), for the snapshot, the
window's points and the meter alike.
"""

from __future__ import annotations

import math
from collections import OrderedDict
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

KEPT_STEPS = 8
"""Steps of figures :meth:`World.demand` keeps read (besides the window's): the rounds read
the last few again."""


def sighting(template: VmState, cpu_used: float, uptime: float) -> VmState:
    """``template`` with the round's ``cpu_used`` and ``uptime``, as ``model_copy(update=...)``
    makes it, without its generic copying: the template was validated, and the two values are
    of the types of their fields (a float each). A round makes one per VM (25,000 at 1,000
    hosts); the simulator's tests check it equals the validated sighting."""
    values = template.__dict__.copy()
    values["cpu_used"] = cpu_used
    values["uptime"] = uptime
    out = VmState.__new__(VmState)
    object.__setattr__(out, "__dict__", values)
    object.__setattr__(out, "__pydantic_fields_set__", template.__pydantic_fields_set__)
    object.__setattr__(out, "__pydantic_extra__", None)
    object.__setattr__(out, "__pydantic_private__", None)
    return out


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
        self.off: dict[int, tuple[float, float]] = {}
        """VMs shut off (a rollout's shutdown of VMs that cannot leave): from and until when,
        seconds into the trace (until: inf while not started again); they ask nothing."""
        self._spec = desired.policy.spec.load.model_copy(
            update={"sample_every": timedelta(seconds=trace.step)}
        )
        self._templates: list[VmState | None] = [None] * len(self.names)
        """Per VM, its sighting as validated when it last moved or had its record written."""
        self._hosts: list[HostState | None] = [None] * len(self.hosts)
        self._steps: OrderedDict[int, tuple[float | None, ...]] = OrderedDict()
        """Step -> each VM's figure of that step (None past its row), the last few read."""
        window = int(-(-self._spec.window.total_seconds() // trace.step))
        self._keep = KEPT_STEPS + window

    def cores(self, vm: int, seconds: float, host: int | None = None) -> float:
        """VM ``vm``'s demand ``seconds`` into the trace, in cores of ``host`` (default: its
        own)."""
        h = self.host_of[vm] if host is None else host
        return self.trace.at(vm, seconds) / self.kinds[h].speed

    def step_figures(self, k: int) -> tuple[float | None, ...]:
        """Each VM's figure of step ``k`` (None where its row is shorter), read once."""
        got = self._steps.get(k)
        if got is None:
            got = tuple(row[k] if 0 <= k < len(row) else None for row in self.trace.demand)
            self._steps[k] = got
            while len(self._steps) > self._keep:
                self._steps.popitem(last=False)
        return got

    def demand(self, seconds: float) -> Sequence[float]:
        """Every VM's demand ``seconds`` into the trace: ``trace.at`` of each, nothing of a VM
        shut off then."""
        figures = self.step_figures(max(0, int(seconds // self.trace.step)))
        if None in figures:  # past the end of a row: its last figure
            out = [self.trace.at(i, seconds) for i in range(len(self.names))]
        elif not self.off:
            return figures  # type: ignore[return-value]
        else:
            out = list(figures)  # type: ignore[arg-type]
        for i, (since, until) in self.off.items():
            if since <= seconds < until:
                out[i] = 0.0
        return out

    def snapshot(self, now: datetime) -> Snapshot:
        """What a round observes at ``now``."""
        seconds = (now - self.trace.start).total_seconds()
        for i, (_, until) in list(self.off.items()):
            if until <= seconds:  # started again since the last round
                del self.off[i]
                self._templates[i] = None
        memory_used = [0] * len(self.hosts)
        vms: list[VmState] = []
        demand = self.demand(max(0.0, seconds - self.trace.step))
        uptime = UPTIME + seconds
        speeds = [k.speed for k in self.kinds]
        templates, host_of = self._templates, self.host_of
        for i, spec in enumerate(self.trace.vms):
            h = host_of[i]
            memory_used[h] += spec.memory
            template = templates[i]
            if template is None:
                template = templates[i] = VmState(
                    name=VmName(spec.name),
                    uuid=self.uuids[i],
                    host=HostName(self.hosts[h]),
                    state=VmRunState.SHUTOFF if i in self.off else VmRunState.RUNNING,
                    vcpus=spec.vcpus,
                    memory_max=spec.memory,
                    memory_current=spec.memory,
                    cpu_used=0.0,
                    uptime=UPTIME,
                    dirty_rate=int(spec.dirty) if spec.dirty else None,
                    labels=dict(spec.labels),
                    reconciler=self.records[i],
                )
            vms.append(sighting(template, round(demand[i] / speeds[h], 4), uptime))
        hosts = []
        for h, (name, kind) in enumerate(zip(self.hosts, self.kinds, strict=True)):
            free = max(0, kind.memory - memory_used[h])
            host = self._hosts[h]
            if host is None or host.memory_free != free:
                host = self._hosts[h] = HostState(
                    name=HostName(name),
                    uri=f"sim:///{name}",
                    reachable=True,
                    arch=kind.arch,
                    cpus=kind.cpus,
                    memory_total=kind.memory,
                    memory_free=free,
                )
            hosts.append(host)
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
        if last - first > self._keep:  # a long history: read the rows themselves
            for i, name in enumerate(self.names):
                speed = self.kinds[self.host_of[i]].speed
                row = self.trace.demand[i]
                out[name] = [
                    (start + (k + 1) * step, row[k] / speed)
                    for k in range(first, min(last, len(row)))
                ]
            return out
        steps = [(start + (k + 1) * step, self.step_figures(k)) for k in range(first, last)]
        speeds = [k.speed for k in self.kinds]
        for i, name in enumerate(self.names):
            speed = speeds[self.host_of[i]]
            out[name] = [(at, f[i] / speed) for at, f in steps if f[i] is not None]  # type: ignore[operator]
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
        self._templates[vm] = None

    def shut_off(self, names: Sequence[str], at: float) -> None:
        """The VMs ``names`` shut off where they are, ``at`` seconds into the trace (a
        rollout's shutdown), until :meth:`started`."""
        for name in names:
            i = self.vm_index.get(name)
            if i is not None:
                self.off[i] = (at, math.inf)
                self._templates[i] = None

    def started(self, names: Sequence[str], at: float) -> None:
        """The VMs ``names`` started again where they are, ``at`` seconds into the trace."""
        for name in names:
            i = self.vm_index.get(name)
            if i is not None and i in self.off:
                self.off[i] = (self.off[i][0], at)
                self._templates[i] = None

    def stamped(self, stamps: Sequence[tuple[VmState, ReconcilerState]]) -> None:
        """First sightings written on the VMs, as the engine writes them."""
        for seen, record in stamps:
            i = self.vm_index.get(seen.name)
            if i is not None:
                self.records[i] = record
                self._templates[i] = None
