"""A round's moves carried out in simulated time, as the engine's executor would.

Admission judges the round's moves against the snapshot first (``core.admission.admit``):
stale moves are skipped. The others start in order as soon as the limits allow: at most
``parallel.cluster`` at once, and each host's ``maxOutbound`` / ``maxInbound``. A move lasts
what the busy-guest model predicts for its memory (and disks), its dirty rate and the bandwidth
the policy allows (``core.convergence``); one that would not converge is aborted when libvirt
would abort it (progressTimeout without progress, or timeoutPerGiB in all), the VM staying on
its source.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reconciler.core import convergence
from reconciler.core.admission import Verdict, admit
from reconciler.model.cluster import Host, effective_migration_limits
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Move
from reconciler.model.snapshot import MigrationClass, Snapshot


@dataclass(frozen=True, slots=True)
class Flight:
    """One move in time, seconds from the start of the trace."""

    move: Move
    start: float
    end: float
    aborted: bool
    why: str = ""


def duration(
    desired: DesiredState,
    move: Move,
    dirty: float,
    hosts: Mapping[str, Host] | None = None,
) -> tuple[float, bool]:
    """How long ``move`` takes and whether it completes (False: aborted after that long);
    ``hosts``: the cluster's hosts by name, when the caller has them."""
    if hosts is None:
        hosts = {h.name: h for h in desired.cluster.spec.hosts}
    klass = move.migration_class
    disk = move.disk_bytes if klass is MigrationClass.COPY else 0
    allow = convergence.allowed(desired, hosts.get(move.target), klass, move.memory + disk)
    predicted = convergence.forecast(move.memory, disk, int(dirty), allow)
    if predicted.converges and predicted.seconds is not None:
        return predicted.seconds, True
    bandwidth = convergence.ASSUMED_LINK if allow.bandwidth <= 0 else allow.bandwidth
    first = (move.memory + disk) / bandwidth
    return min(allow.time_limit, first + allow.stall), False


def flights(
    desired: DesiredState,
    snapshot: Snapshot,
    moves: Sequence[Move],
    at: float,
    dirty: dict[str, float],
    *,
    admitted: bool = True,
) -> list[Flight]:
    """When each of ``moves`` runs, from ``at`` (seconds), within every limit; ``admitted``
    False starts them without admission (a reference policy that is not the product's)."""
    if admitted and moves:
        verdicts = admit(desired, snapshot, moves, [], snapshot.taken_at)
        queue = [a.move for a in verdicts if a.verdict is not Verdict.SKIP]
    else:
        queue = list(moves)
    hosts = {h.name: h for h in desired.cluster.spec.hosts}
    limits = {name: effective_migration_limits(desired.cluster, h) for name, h in hosts.items()}
    cluster_limit = desired.policy.spec.parallel.cluster if admitted else math.inf
    running: list[tuple[float, int, Move]] = []  # (end, order, move)
    outbound: dict[str, int] = {}
    inbound: dict[str, int] = {}
    now = at
    out: list[Flight] = []
    order = 0
    pending = list(queue)
    while pending:
        for m in list(pending):
            if len(running) >= cluster_limit:
                break
            out_limit, in_limit = limits.get(m.source, (2, 2))[0], limits.get(m.target, (2, 2))[1]
            if admitted and (
                outbound.get(m.source, 0) >= out_limit or inbound.get(m.target, 0) >= in_limit
            ):
                continue
            seconds, completes = duration(desired, m, dirty.get(m.vm, 0.0), hosts)
            out.append(Flight(m, now, now + seconds, not completes))
            heapq.heappush(running, (now + seconds, order, m))
            order += 1
            outbound[m.source] = outbound.get(m.source, 0) + 1
            inbound[m.target] = inbound.get(m.target, 0) + 1
            pending.remove(m)
        if not pending:
            break
        if not running:
            break  # nothing runs and nothing can start: the rest cannot go
        end, _, done = heapq.heappop(running)  # the next to end frees its slots
        now = max(now, end)
        outbound[done.source] -= 1
        inbound[done.target] -= 1
    return out
