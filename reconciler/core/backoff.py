"""The balance backoff of a VM: no ping-pong between two hosts.

A VM moved for balance is not moved for balance again within its backoff, ``cooldown`` at
first; a balance move back to the host it left waits twice as long. Each balance move that
does take it back doubles the backoff (``ReconcilerState.backoff`` counts the doublings), so a
VM that load swings between two hosts moves ever more rarely; a balance move to another host,
or a move for any other reason, starts it again at ``cooldown``. Mandatory moves never wait for
it. The record lives on the VM (its domain metadata), so it travels with it and survives a
restart of the reconciler.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from reconciler.model.plan import Backoff, Reason
from reconciler.model.snapshot import ReconcilerState, Snapshot

MAX_DOUBLINGS = 16
"""The backoff grows to at most ``cooldown x 2**16`` (a 6h cooldown: 45 years)."""
_BALANCE = Reason.BALANCE.value


@dataclass(frozen=True, slots=True)
class Window:
    """When a VM moved for balance may move for balance again."""

    moved_at: datetime
    left: str | None
    until: datetime
    """No balance move before this."""
    back_until: datetime
    """No balance move back to ``left`` before this."""
    doublings: int


def window(record: ReconcilerState, cooldown: timedelta) -> Window | None:
    """The backoff of a VM whose last move was for balance; None for any other."""
    if record.last_reason != _BALANCE or record.last_moved_at is None:
        return None
    n = min(record.backoff, MAX_DOUBLINGS)
    hold = cooldown * (2**n)
    at = record.last_moved_at
    return Window(at, record.last_moved_from, at + hold, at + 2 * hold, n)


def recorded(
    old: ReconcilerState,
    *,
    reason: str,
    source: str,
    target: str,
    at: datetime,
    plan_id: str | None,
    actor: str | None = None,
) -> ReconcilerState:
    """The VM's record after a move that succeeded: the move, its reason, who made it and the
    backoff."""
    back = (
        reason == Reason.BALANCE.value
        and old.last_reason == Reason.BALANCE.value
        and old.last_moved_from == target
    )
    return old.model_copy(
        update={
            "last_moved_at": at,
            "last_moved_from": source,
            "last_moved_to": target,
            "last_plan_id": plan_id,
            "last_moved_by": actor,
            "moves": old.moves + 1,
            "last_reason": reason or None,
            "backoff": min(old.backoff + 1, MAX_DOUBLINGS) if back else 0,
        }
    )


def held(snapshot: Snapshot, cooldown: timedelta, now: datetime) -> list[Backoff]:
    """The VMs whose balance backoff still holds at ``now`` (for any host, or back to the one
    they left), by name."""
    out: dict[str, Backoff] = {}
    for vm in snapshot.vms:
        record = vm.reconciler
        if record.last_reason != _BALANCE:  # most VMs: decided without making a window
            continue
        w = window(record, cooldown)
        if w is None or now >= w.back_until or vm.name in out:
            continue
        out[vm.name] = Backoff(
            vm=vm.name,
            host=vm.host,
            left=w.left,
            moved_at=w.moved_at,
            until=w.until,
            back_until=w.back_until,
            doublings=w.doublings,
        )
    return [out[k] for k in sorted(out)]


def going_back(
    moves: Iterable[tuple[str, str]], snapshot: Snapshot, cooldown: timedelta, now: datetime
) -> set[str]:
    """Of balance ``moves`` (VM, target), the VMs each would take back to the host it left
    before its doubled backoff ends."""
    windows: dict[str, Window | None] = {
        vm.name: window(vm.reconciler, cooldown) for vm in snapshot.vms
    }
    out: set[str] = set()
    for vm, target in moves:
        w = windows.get(vm)
        if w is not None and w.left == target and now < w.back_until:
            out.add(vm)
    return out
