"""The load a simulation replays, as pure data: VMs and their demand, one figure per step.

Demand is in compute units of a host kind's ``speed`` (MIPS in the literature's set-ups, cores
where every host's speed is 1): a VM demanding ``d`` on a host of speed ``s`` uses ``d / s``
cores of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from reconciler.model.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class TraceVm:
    name: str
    vcpus: int
    memory: int
    """Bytes."""
    dirty: float = 0.0
    """Bytes the guest writes per second (the busy-guest model of its moves)."""
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Trace:
    """``demand[i][k]``: what VM ``vms[i]`` asks for during step ``k``, from ``start`` (a
    row is any sequence: tuples read from a file, or figures computed when read)."""

    source: str
    start: datetime
    step: float
    """Seconds per figure."""
    vms: tuple[TraceVm, ...]
    demand: tuple[Sequence[float], ...]

    @property
    def steps(self) -> int:
        return min((len(d) for d in self.demand), default=0)

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.step * self.steps)

    def at(self, vm: int, seconds: float) -> float:
        """VM ``vm``'s demand ``seconds`` after the start (the last figure past the end)."""
        row = self.demand[vm]
        k = min(len(row) - 1, max(0, int(seconds // self.step)))
        return row[k]


def trace_of_snapshots(
    snapshots: Sequence[Snapshot], *, start: datetime, end: datetime, step: float, source: str
) -> Trace:
    """The load the recorded ``snapshots`` show, one figure per VM every ``step`` seconds from
    ``start`` to ``end``: each step the VM's CPU in the last snapshot taken by then (a
    recording keeps only changes beyond noise, so a figure holds until the next one), its
    first before it. VMs are every VM any snapshot saw, sized as last seen."""
    ordered = sorted(snapshots, key=lambda s: s.taken_at)
    steps = int((end - start).total_seconds() // step)
    names: dict[str, TraceVm] = {}
    for snap in ordered:
        for vm in snap.vms:
            names[vm.name] = TraceVm(
                name=vm.name,
                vcpus=vm.vcpus,
                memory=vm.memory_max,
                dirty=float(vm.dirty_rate or 0),
                labels=tuple(sorted(vm.labels.items())),
            )
    order = sorted(names)
    index = {n: i for i, n in enumerate(order)}
    rows: list[list[float | None]] = [[None] * steps for _ in order]
    at = 0
    last: dict[str, float] = {}
    for k in range(steps):
        moment = start + timedelta(seconds=k * step)
        while at < len(ordered) and ordered[at].taken_at <= moment:
            for vm in ordered[at].vms:
                if vm.cpu_used is not None and math.isfinite(vm.cpu_used):
                    last[vm.name] = vm.cpu_used
            at += 1
        for name, value in last.items():
            rows[index[name]][k] = value
    demand = []
    for row in rows:
        first = next((v for v in row if v is not None), 0.0)
        filled, value = [], first
        for v in row:
            value = v if v is not None else value
            filled.append(value)
        demand.append(tuple(filled))
    return Trace(
        source=source,
        start=start,
        step=step,
        vms=tuple(names[n] for n in order),
        demand=tuple(demand),
    )


def resampled(trace: Trace, step: float) -> Trace:
    """``trace`` at one figure every ``step`` seconds: coarser, each the mean of the figures
    it spans; finer, each figure repeated. ValueError unless one step is a whole number of
    the other."""
    if step == trace.step:
        return trace
    if step > trace.step:
        k = step / trace.step
        if abs(k - round(k)) > 1e-9:
            raise ValueError(
                f"a step of {step:g}s is not a whole number of the trace's {trace.step:g}s"
            )
        n = round(k)
        demand = tuple(
            tuple(sum(row[i : i + n]) / len(row[i : i + n]) for i in range(0, len(row), n))
            for row in trace.demand
        )
    else:
        k = trace.step / step
        if abs(k - round(k)) > 1e-9:
            raise ValueError(
                f"the trace's {trace.step:g}s is not a whole number of steps of {step:g}s"
            )
        n = round(k)
        demand = tuple(tuple(v for v in row for _ in range(n)) for row in trace.demand)
    return Trace(trace.source, trace.start, step, trace.vms, demand)
