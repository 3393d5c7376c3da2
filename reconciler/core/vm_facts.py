"""Per-VM facts that hold a VM back from balance moves: cooldown, the balance backoff and
minUptime.

Read only from the VM's own record (its domain metadata, carried in the snapshot) and from
since when the cluster is observed; libvirt has no start time for a domain.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from reconciler.core import backoff
from reconciler.model.base import fields_of
from reconciler.model.history import History
from reconciler.model.policy import BalancePolicySpec
from reconciler.model.snapshot import VmState


def age_of(vm: VmState, history: History, taken_at: datetime, now: datetime) -> timedelta | None:
    """How long ``vm`` has existed at ``now`` as far as is known; None: old enough for anything.

    A VM the first round already saw running counts as old. One first seen later counts from
    then; one with no record yet appeared after the last round and counts from that round.
    Where libvirt reports an uptime, that wins.
    """
    if vm.uptime is not None:
        return timedelta(seconds=vm.uptime) + max(timedelta(0), now - taken_at)
    since = history.observed_since
    if since is None:
        return None
    first = vm.reconciler.first_seen
    if first is None:  # not stamped yet: there at the first round, or appeared after the last
        last = history.last_round_at
        if last is None or last < since:
            return None
        return max(timedelta(0), now - last)
    if first <= since:
        return None
    return max(timedelta(0), now - first)


def balance_hold(
    vm: VmState, spec: BalancePolicySpec, history: History, taken_at: datetime, now: datetime
) -> str | None:
    """Why ``vm`` may not move for balance at ``now`` (cooldown, backoff, minUptime), or None.

    The backoff after a balance move (:mod:`reconciler.core.backoff`) holds the VM for every
    host; the longer hold on going back to the host it left is the planner's to check, on
    the move it would make.
    """
    return balance_holds(spec, history, taken_at, now)(vm)


def balance_holds(
    spec: BalancePolicySpec, history: History, taken_at: datetime, now: datetime
) -> Callable[[VmState], str | None]:
    """:func:`balance_hold` of one VM after another under the same policy and times (every VM
    of a plan): what does not depend on the VM is worked out once."""
    min_uptime = spec.min_uptime.total_seconds()
    cooldown = spec.cooldown

    def hold(vm: VmState) -> str | None:
        f = fields_of(vm)
        r = fields_of(f["reconciler"])
        if (
            r["last_moved_at"] is None
            and r["last_failure"] is None
            and (uptime := f["uptime"]) is not None
            and uptime >= min_uptime
        ):
            return None  # the common case, decided without date arithmetic
        record = vm.reconciler
        if record.last_moved_at is not None and now - record.last_moved_at < cooldown:
            return f"moved at {record.last_moved_at.isoformat()}, within the cooldown"
        window = backoff.window(record, cooldown)
        if window is not None and now < window.until:
            return (
                f"moved for balance at {window.moved_at.isoformat()}, within its backoff "
                f"(until {window.until.isoformat()})"
            )
        failure = record.last_failure
        if failure is not None and now - failure.at < cooldown:
            return f"a move failed at {failure.at.isoformat()}, within the cooldown"
        age = age_of(vm, history, taken_at, now)
        if age is not None and age < spec.min_uptime:
            return f"running for {int(age.total_seconds())}s, less than minUptime"
        return None

    return hold
