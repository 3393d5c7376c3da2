"""Capacity power saving must bring back beyond demand: what the hosts in service cannot take.

Demand over the band is not the only reason to power a standby host on (``core.power``):

- **recovery**: the VMs of a dead host (recovery's, past grace or fenced) that run nowhere
  now and find no room on the hosts in service (each placed as ``core.recovery.restart_plan``
  places it, so the decision agrees with the restart), or recovery's ``reserveHosts`` no longer
  met while a host is dead;
- **drains, maintenance and rollouts**: the VMs of a host held out that find no room on the
  hosts in service (VMs that cannot leave at all, pinned or with local disks, are not counted:
  no power-on helps them).

:func:`shortfall` finds what is missing, :func:`to_power_on` which standby hosts bring it
(the most efficient first, the hosts already booting counted first). Pure functions; the
engine passes what it knows (the dead hosts, the VMs recovery remembers of them, the hosts
held out) as parameters.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from reconciler.core import headroom
from reconciler.core.feasibility import check_move
from reconciler.core.load_range import in_range
from reconciler.core.recovery import restart_plan
from reconciler.core.rollout_vms import stuck_reason, with_hosts_out
from reconciler.core.state import build
from reconciler.model.desired import DesiredState
from reconciler.model.power import HostCapacity
from reconciler.model.recovery import RecoveryState, SavedVm
from reconciler.model.snapshot import Snapshot, VmRunState, VmState

_OFF = frozenset({VmRunState.SHUTOFF, VmRunState.CRASHED})


@dataclass(frozen=True, slots=True)
class Unplaced:
    """A VM that finds no room on the hosts in service."""

    name: str
    cpu: float
    """Its CPU demand, cores."""
    memory: int
    """Its memory, bytes."""


@dataclass(frozen=True)
class Shortfall:
    """What the hosts in service lack this round, and why."""

    vms: tuple[Unplaced, ...] = ()
    reasons: tuple[str, ...] = ()
    """One sentence per cause: recovery, maintenance, a rollout, the reserve."""
    reserve: str | None = None
    """Why recovery's reserveHosts is not met while a host is dead (None: it is, or none is)."""
    in_service: tuple[headroom.HostBin, ...] = field(default=(), repr=False)
    """The hosts in service with their VMs, for the reserve's check."""

    @property
    def short(self) -> bool:
        return bool(self.vms) or self.reserve is not None

    def why(self) -> str:
        return "; ".join(self.reasons)


def lost_vms(
    state: RecoveryState | None, snapshot: Snapshot, asleep: Collection[str]
) -> tuple[tuple[str, ...], tuple[SavedVm, ...]]:
    """(the dead hosts, the VMs recovery remembers running on them that run nowhere now): a
    dead host is one recovery tracks (past grace, fenced or being fenced) that still does
    not answer and is not asleep on purpose."""
    if state is None:
        return (), ()
    answering = {h.name for h in snapshot.hosts if h.reachable}
    down = tuple(sorted(h for h in state.hosts if h not in answering and h not in asleep))
    running = {v.uuid for v in snapshot.vms if v.state not in _OFF}
    lost = tuple(
        v
        for v in sorted(state.vms.values(), key=lambda v: v.name)
        if v.host in down and v.running and v.uuid not in running
    )
    return down, lost


def _demand(vm: VmState, overcommit: float) -> float:
    used = vm.cpu_used
    return used if used is not None and in_range(used, vm.vcpus) else vm.vcpus / overcommit


def shortfall(
    desired: DesiredState,
    snapshot: Snapshot,
    now: datetime,
    *,
    out: Collection[str],
    held: Collection[str] = (),
    down: Collection[str] = (),
    lost: Sequence[SavedVm] = (),
) -> Shortfall:
    """What the hosts in service (all but ``out``: asleep, booting, being emptied, held) lack:
    the VMs of the hosts ``held`` out (and those in maintenance) and the ``lost`` VMs of the
    ``down`` hosts that find no room, and recovery's reserve while a host is down."""
    hosts = desired.cluster.spec.hosts
    draining = {h.name for h in hosts if h.maintenance} | set(held)
    seen = {h.name for h in snapshot.hosts if h.reachable}
    with_vms = {v.host for v in snapshot.vms if v.state not in _OFF} & draining & seen
    if not with_vms and not lost and not down:
        return Shortfall()
    planned = with_hosts_out(desired, sorted({*out, *draining}))
    overcommit = desired.policy.spec.cpu_overcommit
    model, state = build(planned, snapshot)
    index = {v.name: v.index for v in model.vms}
    missing: list[Unplaced] = []
    reasons: list[str] = []
    for host in sorted(with_vms):
        leaving = sorted(
            (
                v
                for v in snapshot.vms
                if v.host == host and v.state not in _OFF and stuck_reason(desired, v) is None
            ),
            key=lambda v: (-v.memory_max, v.name),
        )
        left: list[Unplaced] = []
        for vm in leaving:
            i = index.get(vm.name)
            if i is None or state.host_of[i] < 0:
                continue
            fits = [t.index for t in model.hosts if check_move(state, i, t.index) is None]
            if fits:
                state.move(i, min(fits, key=lambda t: (state.score_with(t, i, 1), t)))
                continue
            left.append(Unplaced(vm.name, _demand(vm, overcommit), vm.memory_max))
        if left:
            cause = "maintenance" if host not in held else "a rollout or drain"
            reasons.append(
                f"{len(left)} VM(s) of {host} (held out by {cause}) find no room on the hosts "
                f"in service ({_names(v.name for v in left)})"
            )
            missing += left
    restartable = [v for v in lost if not v.blockers]
    if restartable:
        plan = restart_plan(planned, snapshot, restartable, now=now)
        left = [
            Unplaced(r.vm.name, r.vm.vcpus / overcommit, r.vm.memory)
            for r in plan
            if r.target is None
        ]
        if left:
            of = sorted({r.vm.host for r in plan if r.target is None})
            reasons.append(
                f"recovery: {len(left)} VM(s) of {', '.join(of)}, which does not answer, find "
                f"no room on the hosts in service ({_names(v.name for v in left)})"
            )
            missing += left
    k = desired.policy.spec.recovery.reserve_hosts
    limit = float(desired.policy.spec.host_limit)
    bins = tuple(headroom.bins(model, state, limit))
    reserve = headroom.problem(bins, k) if down and k > 0 else None
    if reserve is not None:
        reasons.append(
            f"recovery's reserve of {k} host(s) is not met with {', '.join(sorted(down))} "
            f"down: {reserve}"
        )
    return Shortfall(tuple(missing), tuple(reasons), reserve, bins)


def _names(names: Iterable[str], most: int = 5) -> str:
    listed = list(names)
    shown = ", ".join(listed[:most])
    return shown + (f" and {len(listed) - most} more" if len(listed) > most else "")


def _fits(vms: Sequence[Unplaced], free: list[list[float]]) -> bool:
    """Whether ``vms`` pack into ``free`` ([memory, cpu] room per host), best fit by
    memory, the largest first."""
    room = [list(f) for f in free]
    for vm in sorted(vms, key=lambda v: (-v.memory, -v.cpu, v.name)):
        fitting = [i for i, (m, c) in enumerate(room) if m >= vm.memory and c >= vm.cpu]
        if not fitting:
            return False
        best = min(fitting, key=lambda i: (room[i][0], i))
        room[best][0] -= vm.memory
        room[best][1] -= vm.cpu
    return True


def to_power_on(
    need: Shortfall,
    candidates: Sequence[tuple[str, HostCapacity]],
    booting: Mapping[str, HostCapacity],
    *,
    host_limit: float,
    band_high: float,
    reserve_hosts: int,
) -> tuple[list[str], bool]:
    """(the standby hosts to power on, in ``candidates``' order, the most efficient first;
    whether that covers the need): enough that the unplaced VMs pack onto them and the hosts
    ``booting`` (memory within ``host_limit``, CPU within ``band_high``, percent), and, while
    the reserve is short, that the reserve holds with them."""

    def room(c: HostCapacity) -> list[float]:
        return [c.memory * host_limit / 100, c.cpus * band_high / 100]

    free = [room(c) for c in booting.values()]
    chosen: list[str] = []
    left = list(candidates)
    while need.vms and not _fits(need.vms, free) and left:
        name, cap = left.pop(0)
        chosen.append(name)
        free.append(room(cap))
    covered = not need.vms or _fits(need.vms, free)
    if need.reserve is not None:
        extra = [
            headroom.HostBin(n, int(c.memory * host_limit / 100), ())
            for n, c in [*booting.items(), *((n, c) for n, c in candidates if n in chosen)]
        ]

        def holds() -> bool:
            return headroom.problem([*need.in_service, *extra], reserve_hosts) is None

        while not holds() and left:
            name, cap = left.pop(0)
            chosen.append(name)
            extra.append(headroom.HostBin(name, int(cap.memory * host_limit / 100), ()))
        covered = covered and holds()
    return chosen, covered
