"""The reconciler's own moves whose record was not written when they were made, found from
the VMs' records so that a later round writes it (``RecordedLate``), never undoes the move:

- :func:`unrecorded_moves` - a move placement.yaml does not follow (it still names where the
  VM came from) and that placement has not changed since;
- :func:`resolved_moves` - a move an intent resolved into whose VM placement already puts
  where it went (a drift revert: nothing else would record it);
- :func:`owed_moves` - a move whose outcome was written on the domain with ``unrecorded``
  (the round's record was still to come) when the reconciler stopped.

:func:`following` makes the desired state follow them, in memory, until the record makes it so.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from reconciler.core.intents import Resolution
from reconciler.model.base import fields_of
from reconciler.model.desired import DesiredState
from reconciler.model.snapshot import Snapshot, VmRunState, VmState
from reconciler.model.status import MoveOutcome, MoveResult


def unrecorded_moves(
    placement: Mapping[str, str], snapshot: Snapshot, changed_at: datetime | None
) -> list[MoveResult]:
    """The reconciler's own moves of placed VMs that placement.yaml does not follow yet.

    A VM qualifies when it runs (once, not in flight) where its domain says the reconciler
    moved it, placement puts it where it came from, and placement has not changed since the
    move. A placement changed after the move is a person's word (e.g. "move it back") and wins;
    with ``changed_at`` unknown nothing qualifies (the move is reverted as drift, as before).
    """
    if changed_at is None:
        return []
    sightings: dict[str, int] = {}
    for vm in snapshot.vms:
        sightings[vm.name] = sightings.get(vm.name, 0) + 1
    in_flight = {f.name for f in snapshot.in_flight}
    out: list[MoveResult] = []
    for vm in snapshot.vms:
        r = vm.reconciler
        if sightings[vm.name] != 1 or vm.name in in_flight or r.intent is not None:
            continue
        if r.last_moved_at is None or r.last_moved_at <= changed_at:
            continue
        if r.last_moved_from is None or vm.host != r.last_moved_to:
            continue
        if placement.get(vm.name) != r.last_moved_from:
            continue
        out.append(_late(vm, "its record was not written then"))
    return sorted(out, key=lambda m: m.vm)


def _late(vm: VmState, why: str, *, with_reason: bool = False) -> MoveResult:
    """The late record of ``vm``'s last move, as its domain's record says it."""
    r = vm.reconciler
    assert r.last_moved_at is not None
    assert r.last_moved_from is not None
    reason = f" ({r.last_reason})" if with_reason and r.last_reason else ""
    return MoveResult(
        vm=vm.name,
        source=r.last_moved_from,
        target=vm.host,
        outcome=MoveOutcome.SUCCEEDED,
        reason="RecordedLate",
        detail=(f"moved by {r.last_moved_by} " if r.last_moved_by else "moved ")
        + f"at {r.last_moved_at.isoformat(timespec='seconds')}{reason}; {why}",
        started_at=r.last_moved_at,
    )


def resolved_moves(
    placement: Mapping[str, str], late: list[MoveResult], resolutions: list[Resolution]
) -> list[MoveResult]:
    """``late`` and the moves intents resolved into whose VMs placement already puts where
    they went (a drift reverted, say): nothing else would record them, the round is in sync.
    A resolved move that placement does not follow is in ``late`` when placement still names
    where it came from; placed elsewhere by a person since, it is theirs to undo and the
    round's move back says where the VM was."""
    found = {r.vm for r in late}
    more = [
        r.moved
        for r in resolutions
        if r.moved is not None
        and r.moved.vm not in found
        and placement.get(r.moved.vm) == r.moved.target
    ]
    return sorted([*late, *more], key=lambda m: m.vm)


def owed_moves(
    placement: Mapping[str, str], snapshot: Snapshot, late: list[MoveResult]
) -> list[MoveResult]:
    """``late`` and the moves whose record a stopped reconciler never wrote: the VM's domain
    still says ``unrecorded`` (set with the move's outcome, cleared once the round's record was
    written). A VM qualifies when it runs (once, not in flight) where that move took it and
    placement puts it there or does not list it; placed elsewhere by a person since, the move
    back the round makes says where it was."""
    found = {r.vm for r in late}
    # the sightings whose record says unrecorded: nearly always none, found in one pass
    marked = [vm for vm in snapshot.vms if fields_of(fields_of(vm)["reconciler"])["unrecorded"]]
    if not marked:
        return sorted(late, key=lambda m: m.vm)
    sightings: dict[str, int] = {}
    for vm in snapshot.vms:
        sightings[vm.name] = sightings.get(vm.name, 0) + 1
    in_flight = {f.name for f in snapshot.in_flight}
    more: list[MoveResult] = []
    for vm in marked:
        r = vm.reconciler
        if vm.name in found or r.intent is not None:
            continue
        if sightings[vm.name] != 1 or vm.name in in_flight or vm.state is VmRunState.SHUTOFF:
            continue
        if r.last_moved_at is None or r.last_moved_from is None or vm.host != r.last_moved_to:
            continue
        if placement.get(vm.name, vm.host) != vm.host:
            continue
        more.append(
            _late(vm, "the reconciler stopped before its record was written", with_reason=True)
        )
    return sorted([*late, *more], key=lambda m: m.vm)


def following(desired: DesiredState, moves: list[MoveResult]) -> DesiredState:
    """``desired`` with the placement of ``moves``' VMs set to their targets."""
    vms = dict(desired.placement.spec.vms) | {r.vm: r.target for r in moves}
    spec = desired.placement.spec.model_copy(update={"vms": vms})
    return desired.model_copy(
        update={"placement": desired.placement.model_copy(update={"spec": spec})}
    )
