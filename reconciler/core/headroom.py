"""N+k admission: the VMs of any ``k`` hosts must fit on the other hosts.

Pure arithmetic on memory: a host's room is its usable memory (after its reserve) times
``hostLimit``; what it carries is the ``memory_max`` of its VMs. For every set of ``k`` hosts
that may receive VMs, their VMs are packed best-fit-decreasing onto the others. Best-fit is a
heuristic: when it finds a packing one exists; when it does not, one might still exist, so the
check errs on the side of keeping room.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from reconciler.core.state import Model, State
from reconciler.model.quantity import format_size

MAX_COMBINATIONS = 20_000
"""Beyond this many host sets only the most loaded ones are checked."""


@dataclass(frozen=True)
class HostBin:
    name: str
    room: int
    """Bytes the host may carry in all (usable memory times hostLimit)."""
    vms: tuple[tuple[str, int], ...]
    """(VM name, memory bytes) of every VM on it."""

    @property
    def load(self) -> int:
        return sum(m for _, m in self.vms)


def problem(hosts: Sequence[HostBin], k: int) -> str | None:
    """Why the VMs of some ``k`` of ``hosts`` would not fit on the rest; None when they would."""
    if k <= 0:
        return None
    if k >= len(hosts):
        return f"reserveHosts {k} needs more than {k} host(s) that take VMs, there are {len(hosts)}"
    sets: list[tuple[int, ...]] = []
    for n, chosen in enumerate(combinations(range(len(hosts)), k)):
        if n >= MAX_COMBINATIONS:
            by_load = sorted(range(len(hosts)), key=lambda i: -hosts[i].load)
            sets = [tuple(by_load[:k])]
            break
        sets.append(chosen)
    for failed in sets:
        stranded = _pack(hosts, set(failed))
        if stranded is not None:
            names = ", ".join(hosts[i].name for i in failed)
            vm, memory = stranded
            return (
                f"if {names} failed, {vm} ({format_size(memory)}) would fit on no other host "
                f"(reserveHosts {k})"
            )
    return None


def _pack(hosts: Sequence[HostBin], failed: set[int]) -> tuple[str, int] | None:
    """The first VM of the failed hosts that fits nowhere else, best-fit decreasing."""
    free = {i: h.room - h.load for i, h in enumerate(hosts) if i not in failed}
    items = sorted((vm for i in failed for vm in hosts[i].vms), key=lambda x: (-x[1], x[0]))
    for name, memory in items:
        fitting = [i for i, f in free.items() if f >= memory]
        if not fitting:
            return name, memory
        best = min(fitting, key=lambda i: (free[i], hosts[i].name))
        free[best] -= memory
    return None


def bins(model: Model, state: State, host_limit: float) -> list[HostBin]:
    """The hosts that take VMs (known, not in maintenance) with their VMs in ``state``."""
    out = []
    for h in model.hosts:
        if not h.accepts:
            continue
        room = int(h.usable_memory * host_limit / 100)
        vms = tuple(sorted((model.vms[v].name, model.vms[v].memory) for v in state.vms_on[h.index]))
        out.append(HostBin(h.name, room, vms))
    return out
