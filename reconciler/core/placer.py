"""``place()``: where a new VM would go under the same rules the planner follows.

The VM is added to the model as if it existed with the given name and labels, placed nowhere;
every host is then checked as a move target (capacity, hostLimit, required rules). Among the
hosts that fit, the one with fewest preferred rules broken, most repaired, then the lowest
resulting score (then name) wins.
"""

from __future__ import annotations

from datetime import datetime

from reconciler.core import headroom
from reconciler.core.feasibility import check_move, preferred_delta
from reconciler.core.state import NewVm, build
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Candidate, PlaceResult
from reconciler.model.quantity import format_size
from reconciler.model.snapshot import Snapshot


def place(
    desired: DesiredState,
    snapshot: Snapshot,
    *,
    vcpus: int,
    memory: int,
    labels: dict[str, str],
    name: str = "new-vm",
    now: datetime,
    hugepages: tuple[int, int] | None = None,
) -> PlaceResult:
    """The best host for a new VM of ``vcpus`` and ``memory`` bytes, or why none fits.

    ``now`` is accepted for symmetry with :func:`reconciler.core.planner.plan`; no rule about
    a VM that does not exist yet depends on time. ``hugepages``: (page size in KiB, pages)
    when its memory is to be backed by huge pages.
    """
    del now
    kib, pages = hugepages or (None, 0)
    new = NewVm(
        name=name, vcpus=vcpus, memory=memory, labels=labels, hugepage_kib=kib, hugepages=pages
    )
    model, state = build(desired, snapshot, new)
    v = len(model.vms) - 1
    candidates: list[Candidate] = []
    best: tuple[int, int, float, str] | None = None
    best_host: str | None = None
    k = desired.policy.spec.recovery.reserve_hosts
    limit = float(desired.policy.spec.host_limit)
    for host in model.hosts:
        refusal = check_move(state, v, host.index)
        if refusal is not None:
            candidates.append(Candidate(host=host.name, fits=False, reasons=[refusal.text]))
            continue
        if k:
            state.move(v, host.index)
            room = headroom.problem(headroom.bins(model, state, limit), k)
            state.move(v, -1)
            if room is not None:
                candidates.append(Candidate(host=host.name, fits=False, reasons=[room]))
                continue
        after = state.score_with(host.index, v, 1)
        breaks, repairs = preferred_delta(state, v, host.index)
        reasons = [f"breaks {breaks} preferred rule(s)"] if breaks else []
        candidates.append(
            Candidate(host=host.name, fits=True, score_after=round(after, 3), reasons=reasons)
        )
        key = (breaks, -repairs, after, host.name)
        if best is None or key < best:
            best, best_host = key, host.name
    size = f"{vcpus} vCPUs and {format_size(memory)}"
    if best_host is None or best is None:
        message = f"no host can take {name} ({size})"
    else:
        message = f"{name} ({size}) fits best on {best_host} (score {best[2]:.1f} after)"
    return PlaceResult(host=best_host, candidates=candidates, message=message)
