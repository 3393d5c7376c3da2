"""Migrations recorded as intents on their domains, resolved from where the VMs run.

Before a migration starts, the executor writes an intent on the domain (plan, source, target,
start time); after it ends, the outcome replaces it. An intent still there when a round begins
belongs to a migration whose outcome was never written (the reconciler was killed, or lost
its hold mid-move). It is resolved from the observation alone: the VM on the target is a move
(its cooldown starts), on the source a failure, on both still in flight (left alone).

Records dated after ``limit`` (a clock gone wrong) are dropped rather than trusted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from reconciler.model.snapshot import FailedMove, ReconcilerState, Snapshot, VmState


@dataclass(frozen=True)
class Resolution:
    """The record to write on ``vm`` (by ``uuid``) on ``host``, where it runs."""

    vm: str
    uuid: str
    host: str
    state: ReconcilerState
    summary: str


def without_future_records(snapshot: Snapshot, limit: datetime) -> tuple[Snapshot, list[str]]:
    """``snapshot`` with every record time after ``limit`` dropped, and a line per drop."""
    lines: list[str] = []
    vms: list[VmState] = []
    changed = False
    for seen in snapshot.vms:
        vm, r = seen, seen.reconciler
        update: dict[str, object] = {}
        if r.first_seen is not None and r.first_seen > limit:
            update["first_seen"] = None
        if r.last_moved_at is not None and r.last_moved_at > limit:
            update |= {"last_moved_at": None, "last_moved_from": None, "last_moved_to": None}
        if r.last_failure is not None and r.last_failure.at > limit:
            update["last_failure"] = None
        if r.intent is not None and r.intent.started_at > limit:
            update["intent"] = None
        if update:
            changed = True
            lines.append(f"{vm.name} on {vm.host}: {', '.join(sorted(update))}")
            vm = vm.model_copy(update={"reconciler": r.model_copy(update=update)})
        vms.append(vm)
    if not changed:
        return snapshot, []
    return snapshot.model_copy(update={"vms": vms}), lines


def resolved(snapshot: Snapshot, now: datetime) -> tuple[Snapshot, list[Resolution]]:
    """``snapshot`` with every settled intent resolved, and the records to write for them."""
    sightings: dict[str, list[VmState]] = {}
    for vm in snapshot.vms:
        sightings.setdefault(vm.name, []).append(vm)
    in_flight = {f.name for f in snapshot.in_flight}
    out: list[Resolution] = []
    replaced: dict[tuple[str, str], VmState] = {}
    for name, seen in sightings.items():
        if len(seen) != 1 or name in in_flight:
            continue  # in flight, or not seen: nothing is settled yet
        vm = seen[0]
        intent = vm.reconciler.intent
        if intent is None:
            continue
        old = vm.reconciler
        if vm.host == intent.target:
            state = old.model_copy(
                update={
                    "intent": None,
                    "last_moved_at": now,
                    "last_moved_from": intent.source,
                    "last_moved_to": intent.target,
                    "last_plan_id": intent.plan_id,
                    "moves": old.moves + 1,
                }
            )
            summary = f"it runs on {intent.target}: moved from {intent.source}"
        elif vm.host == intent.source:
            failure = FailedMove(
                at=intent.started_at,
                source=intent.source,
                target=intent.target,
                plan_id=intent.plan_id,
                error="its outcome was never recorded (the reconciler stopped mid-move); "
                "the VM stayed on the source",
            )
            state = old.model_copy(update={"intent": None, "last_failure": failure})
            summary = f"it still runs on {intent.source}: recorded as failed"
        else:
            state = old.model_copy(update={"intent": None})
            summary = f"it runs on {vm.host}, moved by someone else"
        out.append(Resolution(vm.name, vm.uuid, vm.host, state, summary))
        replaced[(vm.name, vm.host)] = vm.model_copy(update={"reconciler": state})
    if not replaced:
        return snapshot, []
    vms = [replaced.get((v.name, v.host), v) for v in snapshot.vms]
    return snapshot.model_copy(update={"vms": vms}), out
