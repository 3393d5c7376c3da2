"""The impact of a change of the desired state: two plans on one snapshot, compared.

Pure: the plans are made by the caller (``planner.plan`` of each revision on the same
snapshot, history and ``now``); this module says what differs.
"""

from __future__ import annotations

from reconciler.core.state import UNKNOWN_ARCH
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.impact import Backtest, Impact, MoveChange, SpreadChange
from reconciler.model.plan import Move, Plan, Unsatisfiable
from reconciler.model.snapshot import Snapshot


def steady_history(desired: DesiredState, snapshot: Snapshot) -> History:
    """A history in which every architecture has been over its threshold for
    ``holdRounds - 1`` rounds: planned with it, a round balances whatever is over the
    threshold now, as ``run`` would once an imbalance has lasted. What ``impact`` plans with."""
    before = desired.policy.spec.hold_rounds - 1
    arches = {h.arch or UNKNOWN_ARCH for h in snapshot.hosts if h.reachable}
    return History(imbalance_rounds={a: before for a in sorted(arches)} if before else {})


def all_moves(plan: Plan) -> list[Move]:
    """This round's moves and the deferred ones: everything the plan will move."""
    return [*plan.moves, *plan.deferred]


def move_bytes(moves: list[Move]) -> int:
    return sum(m.memory for m in moves)


def _problem_key(u: Unsatisfiable) -> tuple[str, str, tuple[str, ...]]:
    return (u.code.value, u.rule or "", tuple(sorted(u.vms)))


def compare(
    base: Plan,
    head: Plan,
    *,
    path: str,
    snapshot_source: str,
    backtest: Backtest | None = None,
) -> Impact:
    """What ``head`` does differently from ``base`` (both planned on the same snapshot)."""
    base_moves = {m.vm: m for m in all_moves(base)}
    head_moves = {m.vm: m for m in all_moves(head)}
    only_head = [m for vm, m in sorted(head_moves.items()) if vm not in base_moves]
    no_longer = [m for vm, m in sorted(base_moves.items()) if vm not in head_moves]
    changed = [
        MoveChange(vm=vm, base=base_moves[vm], head=m)
        for vm, m in sorted(head_moves.items())
        if vm in base_moves
        and (base_moves[vm].source, base_moves[vm].target) != (m.source, m.target)
    ]
    base_spreads = {s.arch: s for s in base.spreads}
    spreads = [
        SpreadChange(
            arch=s.arch,
            before=s.before,
            base_after=base_spreads[s.arch].after if s.arch in base_spreads else s.before,
            head_after=s.after,
            base_threshold=base_spreads[s.arch].threshold if s.arch in base_spreads else 0.0,
            head_threshold=s.threshold,
        )
        for s in sorted(head.spreads, key=lambda s: s.arch)
    ]
    base_problems = {_problem_key(u) for u in base.unsatisfiable}
    head_problems = {_problem_key(u) for u in head.unsatisfiable}
    new = [u for u in head.unsatisfiable if _problem_key(u) not in base_problems]
    resolved = [u for u in base.unsatisfiable if _problem_key(u) not in head_problems]
    differs = bool(
        only_head
        or no_longer
        or changed
        or new
        or resolved
        or base.placement != head.placement
        or [m.vm for m in base.moves] != [m.vm for m in head.moves]
    )
    if backtest is not None:
        b, h = backtest.base, backtest.head
        differs = differs or (b.acted, b.moves, b.bytes) != (h.acted, h.moves, h.bytes)
    return Impact(
        cluster=head.cluster,
        path=path,
        base_revision=base.desired_revision,
        head_revision=head.desired_revision,
        snapshot_source=snapshot_source,
        base=base,
        head=head,
        only_head=only_head,
        no_longer=no_longer,
        changed=changed,
        spreads=spreads,
        new_unsatisfiable=new,
        resolved_unsatisfiable=resolved,
        base_bytes=move_bytes(all_moves(base)),
        head_bytes=move_bytes(all_moves(head)),
        differs=differs,
        backtest=backtest,
    )
