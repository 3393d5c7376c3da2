"""N+k admission: the VMs of any ``k`` hosts must fit on the other hosts.

Pure arithmetic on memory: a host's room is its usable memory (after its reserve) times
``hostLimit``; what it carries is the ``memory_max`` of its VMs. For every set of ``k`` hosts
that may receive VMs, their VMs are packed best-fit-decreasing onto the others. Best-fit is a
heuristic: when it finds a packing one exists; when it does not, one might still exist, so the
check errs on the side of keeping room.

``place`` refuses a host that would break the reserve; the planner keeps it with
:func:`keeping_reserve`, which holds back balance moves that would break it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from reconciler.core.feasibility import check_move
from reconciler.core.state import Model, State
from reconciler.core.steps import Step
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


@dataclass(frozen=True)
class Kept:
    steps: list[Step]
    """The steps that keep the reserve, in their order."""
    held: list[Step]
    """Balance steps left out: they would break the reserve, or followed one that did."""
    broke: str | None
    """Why the first held step would break it (the first ``problem`` it would cause)."""


def keeping_reserve(before: State, steps: Sequence[Step], k: int, host_limit: float) -> Kept:
    """``steps`` without the balance moves that would leave the VMs of some ``k`` hosts no room.

    Simulated in order from ``before``: a mandatory step (drift, rules, maintenance, hostLimit)
    always stays, even when it breaks the reserve (the plan reports that as ``Headroom``). A
    balance step, with the rest of its unit, stays when the reserve holds after it, or did not
    hold before it (it breaks nothing that held); otherwise it is held back, and so is any
    later balance step that is no longer a valid move once the held ones are out. A filter on
    what the balance search proposes, so the search itself needs no knowledge of the reserve.
    """
    if k <= 0:
        return Kept(list(steps), [], None)
    model = before.model
    state = before.copy()
    kept: list[Step] = []
    held: list[Step] = []
    broke: str | None = None
    for unit in _units(steps):
        if any(s.mandatory for s in unit):
            for s in unit:
                state.move(s.vm, s.target)
            kept += unit
            continue
        holds = problem(bins(model, state, host_limit), k) is None
        done: list[Step] = []
        valid = True
        for s in unit:
            if state.host_of[s.vm] != s.source or check_move(
                state, s.vm, s.target, alone=len(unit) == 1
            ):
                valid = False
                break
            state.move(s.vm, s.target)
            done.append(s)
        found = problem(bins(model, state, host_limit), k) if valid and holds else None
        if valid and found is None:
            kept += unit
            continue
        for s in reversed(done):
            state.move(s.vm, s.source)
        held += unit
        broke = broke or found
    return Kept(kept, held, broke)


def _units(steps: Sequence[Step]) -> list[list[Step]]:
    """Consecutive steps sharing a unit id together, every other step alone."""
    out: list[list[Step]] = []
    for s in steps:
        if out and s.unit is not None and out[-1][-1].unit == s.unit:
            out[-1].append(s)
        else:
            out.append([s])
    return out
