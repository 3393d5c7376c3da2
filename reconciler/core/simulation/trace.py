"""The load a simulation replays, as pure data: VMs and their demand, one figure per step.

Demand is in compute units of a host kind's ``speed`` (MIPS in the literature's set-ups, cores
where every host's speed is 1): a VM demanding ``d`` on a host of speed ``s`` uses ``d / s``
cores of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


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
    """``demand[i][k]``: what VM ``vms[i]`` asks for during step ``k``, from ``start``."""

    source: str
    start: datetime
    step: float
    """Seconds per figure."""
    vms: tuple[TraceVm, ...]
    demand: tuple[tuple[float, ...], ...]

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
