"""What the load over the window means for one plan: where balance may act, what the plan says.

- A host whose load is unknown (a running VM on it whose window is mostly missing, or its own
  pressure) takes no part in balance: no balance move leaves it or comes to it, its VMs stay,
  and the spread balance decides on is that of the other hosts. An architecture with such a
  host keeps its heuristic plan (the exact model would place VMs on every host).
- A short sample that may not be acted on (``LoadView.hold``) holds every balance move.
- Mandatory moves read whatever figure there is and never wait for load; a figure out of
  range (``reconciler.core.load_range``) is none, and a VM without one counts as its fair share.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from reconciler.core import backoff
from reconciler.core.capacity import pct
from reconciler.core.load_range import in_range
from reconciler.core.load_view import Unknown
from reconciler.core.state import Model
from reconciler.core.steps import Step
from reconciler.model.load import LoadBasis, LoadSpec
from reconciler.model.plan import PlanLoad, Reason
from reconciler.model.snapshot import Snapshot


def unknown_hosts(model: Model, unknown: Unknown) -> frozenset[int]:
    """Indices of the hosts whose load is unknown."""
    return frozenset(model.host_index[h] for h in unknown.hosts if h in model.host_index)


def balance_hosts(hosts: Sequence[int], blocked: frozenset[int]) -> tuple[int, ...]:
    """Of one architecture's ``hosts``, those balance may move VMs between."""
    if not blocked:
        return tuple(hosts)
    return tuple(h for h in hosts if h not in blocked)


def may_go_back(
    model: Model, snapshot: Snapshot, cooldown: timedelta, now: datetime, movable: list[bool]
) -> bool:
    """Whether some VM balance may move is still held from going back to the host it left
    (so the plan must be checked for such a move)."""
    for vm in snapshot.vms:
        w = backoff.window(vm.reconciler, cooldown)
        if w is not None and now < w.back_until:
            v = model.vm_index.get(vm.name)
            if v is not None and movable[v]:
                return True
    return False


def going_back(
    model: Model, steps: Sequence[Step], snapshot: Snapshot, cooldown: timedelta, now: datetime
) -> set[int]:
    """The VMs of balance ``steps`` that would go back to the host they left within their
    doubled backoff."""
    moves = [
        (model.vms[s.vm].name, model.hosts[s.target].name)
        for s in steps
        if s.reason is Reason.BALANCE
    ]
    names = backoff.going_back(moves, snapshot, cooldown, now)
    return {model.vm_index[n] for n in names if n in model.vm_index}


def cpu_now(model: Model, snapshot: Snapshot) -> dict[str, float]:
    """Host -> CPU% from the observation's own short sample (VMs without one count as in the
    plan), for plans read on a window; empty otherwise."""
    view = snapshot.load
    if view is None or view.basis is not LoadBasis.WINDOW:
        return {}
    sums: dict[int, float] = {}
    for vm in model.vms:
        h = model.observed[vm.index]
        if h < 0:
            continue
        load = view.vms.get(vm.name)
        now = load.now if load is not None and load.now is not None else None
        known = now is not None and vm.vcpus > 0 and in_range(now, vm.vcpus)  # 0: not running
        cores = now if known and now is not None else vm.cpu_load
        sums[h] = sums.get(h, 0.0) + cores
    return {
        h.name: round(pct(sums.get(h.index, 0.0), h.cpu_den), 3) for h in model.hosts if h.known
    }


def plan_load(snapshot: Snapshot, unknown: Unknown, spec: LoadSpec) -> PlanLoad | None:
    """What the plan says of its load: the window or the short sample, and what is unknown;
    for a snapshot no load source read, only what of its own figures is out of range."""
    view = snapshot.load
    if view is None and not unknown.out_of_range:
        return None
    if view is None:
        return PlanLoad(
            source=spec.source.value,
            basis=LoadBasis.SAMPLE.value,
            window=spec.window.total_seconds(),
            statistic=spec.statistic.value,
            note="the snapshot's own CPU figures",
            unknown_vms=sorted(unknown.vms),
            unknown_hosts=sorted(unknown.hosts),
            out_of_range=dict(sorted(unknown.out_of_range.items())),
        )
    return PlanLoad(
        source=view.source.value,
        basis=view.basis.value,
        window=view.window.total_seconds(),
        statistic=view.statistic.value,
        note=view.note,
        hold=view.hold,
        problem=view.problem,
        unknown_vms=sorted(unknown.vms),
        unknown_hosts=sorted(unknown.hosts),
        out_of_range=dict(sorted(unknown.out_of_range.items())),
        duplicates=dict(sorted(view.duplicates.items())),
        forecast=view.forecast,
    )
