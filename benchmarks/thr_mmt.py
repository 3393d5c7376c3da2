"""THR-MMT: the literature's simplest consolidation heuristic, as CloudSim 3.0.3 runs it.

A reference policy for ``simulate_planetlab.py`` (not part of the product): the static
threshold allocation policy (``PowerVmAllocationPolicyMigrationStaticThreshold``) with the
minimum-migration-time selection (``PowerVmSelectionPolicyMinimumMigrationTime``) and the
power-aware best fit decreasing placement of ``PowerVmAllocationPolicyMigrationAbstract``, in
the order and with the quirks of the published code, so that its figures can be set beside the
published tables. Each round (CloudSim's ``optimizeAllocation``):

1. *Overloaded* hosts: the requested MIPS of their VMs over their MIPS exceeds the threshold.
   From each, in host order, the VM with the least RAM (the first of the host's list among
   equals) leaves until the host is not overloaded.
2. Those VMs, by requested MIPS decreasing, each go where the power grows least: on a host
   whose CPUs are at least as fast as what the VM asks now (the PE check), with that much MIPS
   free, not overloaded once it is there (an empty host is accepted as it is); the overloaded
   hosts are no target. The growth is the power at the planned utilisation with the VM minus
   the power the host drew at the round's update, so a host already given VMs this round looks
   dearer, and an empty host costs its curve above its idle watts. A VM no host takes stays.
3. *Underloaded* hosts, least utilised first (at the round's update; excluding the
   overloaded, those drawing nothing and those given VMs by an earlier evacuation of this
   step; the targets of step 2 are not excluded, as in the published code): all their VMs,
   the ones planned there in step 2 included, go elsewhere by the same rule, the switched-off
   and already considered hosts excluded, or none do. A VM planned in step 2 and moved again
   here makes CloudSim start two migrations (both counted), the second of which decides where
   it lands: here it is one move, to where it lands, and :attr:`ThrMmt.doubled` counts the
   other. A host whose VMs ask more than its MIPS has them scaled down to fit, each floored
   to whole MIPS, so it is a little under 100% and a candidate too, the last, when the rule
   does not find it overloaded (never at a static threshold; LR-MMT's regression may not).

The load a round decides on is the one CloudSim reads at its update: the step about to run
(see ``benchmarks/README.md``), 0.1 s into it (``lag``), interpolated towards the next step as
CloudSim's PlanetLab utilisation model does. RAM is no constraint after a VM's start:
CloudSim's PlanetLab set-up gives its cloudlets a null RAM and bandwidth model, so a running VM
requests none. With ``finished`` (:func:`finish_times`), a VM is gone from the moment CloudSim
takes it for finished, as in its published runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime

import numpy as np
from numpy.typing import NDArray

from reconciler.core.simulation.replay import Decision
from reconciler.core.simulation.trace import Trace
from reconciler.core.simulation.world import World
from reconciler.model.base import HostName, VmName
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Move, Reason
from reconciler.model.simulation import HostKind
from reconciler.model.snapshot import Snapshot
from reconciler.model.status import MoveResult

Floats = NDArray[np.float64]
Flags = NDArray[np.bool_]

MIPS_LABEL = "mips"
"""The trace VM label holding its MIPS at 100% (what CloudSim's initial allocation requests)."""
VMS_PER_HOST_BY_BANDWIDTH = 10
"""CloudSim's set-up: 1 Gbit/s hosts, 100 Mbit/s VMs, all of it requested while a VM starts."""
LAG = 0.1
"""Seconds into each step at which CloudSim's updates run (its cloudlets start 0.1 s in)."""


def power(curves: Floats, utilisation: Floats) -> Floats:
    """Watts at ``utilisation`` (0-1) of each row of ``curves`` (11 points, linear between)."""
    u = np.clip(utilisation, 0.0, 1.0) * 10
    low = np.minimum(9, u.astype(np.int64))
    rows = np.arange(len(curves))
    below = curves[rows, low]
    return below + (curves[rows, low + 1] - below) * (u - low)  # type: ignore[no-any-return]


class Threshold:
    """CloudSim's static threshold (``PowerVmAllocationPolicyMigrationStaticThreshold``): a
    host is overloaded when the MIPS its VMs request over its MIPS exceed ``threshold``.

    The overload rule of a round, kept up to date as VMs are planned on and off hosts:
    :class:`ThrMmt` asks it which hosts are overloaded, whether one still is, and where a VM
    would overload its host; a subclass of :class:`ThrMmt` gives another rule
    (:meth:`ThrMmt.judge`)."""

    def __init__(
        self, threshold: float, demand: Floats, lists: Sequence[Sequence[int]], capacity: Floats
    ) -> None:
        self.threshold = threshold
        self.demand = demand
        self.capacity = capacity
        self.requested = np.array([sum(demand[vm] for vm in vms) for vms in lists], dtype=float)

    def add(self, vm: int, h: int) -> None:
        """``vm`` planned on ``h`` (already in its list)."""
        self.requested[h] += self.demand[vm]

    def remove(self, vm: int, h: int) -> None:
        """``vm`` planned off ``h`` (already out of its list)."""
        self.requested[h] -= self.demand[vm]

    def over(self) -> Flags:
        """Which hosts are overloaded as planned so far."""
        return self.requested / self.capacity > self.threshold

    def over_host(self, h: int) -> bool:
        return bool(self.requested[h] / self.capacity[h] > self.threshold)

    def over_with(self, vm: int) -> Flags:
        """Which hosts would be overloaded with ``vm`` on them too."""
        after = (self.requested + self.demand[vm]) / self.capacity
        return after > self.threshold  # type: ignore[no-any-return]


def finish_times(trace: Trace, first: int = 1) -> list[float]:
    """Seconds at which CloudSim 3.0.3 takes each VM of ``trace`` for finished (``inf``:
    never). At every update (one per step from step ``first``, 0.1 s in) it removes for good
    each VM not migrating whose requested MIPS is exactly 0 (``getCompletedVms``), although
    its cloudlet has not ended: its load at that instant, interpolated between the step and
    the next, is 0 when both figures are."""
    out: list[float] = []
    for row in trace.demand:
        steps = len(row)
        at = math.inf
        for k in range(first, steps):
            if row[k] == 0 and row[min(k + 1, steps - 1)] == 0:
                at = k * trace.step
                break
        out.append(at)
    return out


class ThrMmt:
    """CloudSim 3.0.3's THR-MMT at ``threshold``, deciding every round of the replay.

    ``first``: seconds into the trace before the first optimisation (CloudSim runs its first
    one interval after the VMs start; 0 decides from the start). ``lag``: seconds into a step
    at which its load is read (:data:`LAG`, or 0 for the step's own figure). ``finished``:
    when each VM leaves for good (:func:`finish_times`), or None for VMs that run throughout.
    """

    admitted = False

    def __init__(
        self,
        desired: DesiredState,
        threshold: float = 0.8,
        *,
        first: float = 300.0,
        lag: float = LAG,
        finished: Sequence[float] | None = None,
        tie: float = 0.0,
    ) -> None:
        self.desired = desired
        self.threshold = threshold
        self.name = f"thr-mmt-{threshold:g}"
        self.first = first
        self.lag = lag
        self.finished = finished
        self.tie = tie
        """A host must draw this much less (W) than the best before it to be chosen: 0, as
        CloudSim. Above 0 (a diagnostic, against a CloudSim patched alike), values equal but
        for rounding tie on both sides: that too, utilisations rounded to 1e-9 and
        requested MIPS to 1e-6 where they order hosts and VMs."""
        self.doubled = 0
        """Migrations CloudSim starts twice for one VM in a round (see the module's doc)."""
        self.detours: dict[tuple[float, int], int] = {}
        """(round's second, VM) -> the host its first migration of the round aimed at, for
        each VM sent twice: CloudSim starts that migration too, and its target reserves room
        for the VM until both end."""
        self.unplaced = 0
        """VMs leaving an overloaded host that no host took (they stayed)."""
        self._lists: list[list[int]] | None = None
        self._where: list[int] = []
        self._gone: set[int] = set()
        self._ram: Floats = np.zeros(0)
        self._load: Floats = np.zeros((0, 0))
        self._last: list[int] = []
        self.trail: list[str] | None = None
        """When a list: each round's steps in the words of CloudSim's log (to compare)."""

    # -- the replay's Decider -----------------------------------------------------------------

    def decide(self, world: World, now: datetime) -> Decision:
        seconds = (now - world.trace.start).total_seconds()
        self._sync(world, seconds)
        if seconds < self.first:
            self._last = []
            return Decision([], self.desired, self._snapshot(world, now))
        demand = self._demand(world.trace.step, seconds)
        moves = self._optimise(world, demand, seconds)
        self._last = [vm for vm, _ in moves]
        out = [
            Move(
                vm=VmName(world.names[vm]),
                source=HostName(world.hosts[world.host_of[vm]]),
                target=HostName(world.hosts[target]),
                memory=world.trace.vms[vm].memory,
                vcpus=world.trace.vms[vm].vcpus,
                reason=Reason.BALANCE,
                detail=f"{self.name}: {demand[vm]:.0f} MIPS to {world.hosts[target]}",
                wave=0,
            )
            for vm, target in moves
        ]
        return Decision(out, self.desired, self._snapshot(world, now))

    def after(self, results: list[MoveResult], now: datetime) -> None:
        return None

    @staticmethod
    def _snapshot(world: World, now: datetime) -> Snapshot:
        """An empty snapshot: the moves bypass admission and nothing else reads it."""
        return Snapshot(cluster=world.desired.cluster.metadata.name, taken_at=now, hosts=[], vms=[])

    def _demand(self, step: float, seconds: float) -> Floats:
        """Each VM's requested MIPS ``lag`` seconds after ``seconds``, as CloudSim reads it."""
        at = seconds + self.lag
        last = self._load.shape[1] - 1
        k = min(int(at // step), last)
        share = (at - k * step) / step
        now = self._load[:, k]
        if share == 0:
            return now
        return now + (self._load[:, min(k + 1, last)] - now) * share  # type: ignore[no-any-return]

    # -- one round ----------------------------------------------------------------------------

    def _sync(self, world: World, seconds: float) -> None:
        """Each host's VMs in CloudSim's list order: where they started, in VM order, then
        each arrival appended (those of one round by migration time, then planned order);
        VMs CloudSim has taken for finished dropped."""
        if self._lists is None:
            self._lists = [[] for _ in world.hosts]
            for vm, h in enumerate(world.host_of):
                self._lists[h].append(vm)
            self._where = list(world.host_of)
            self._ram = np.array([float(v.memory) for v in world.trace.vms])
            self._load = np.array(world.trace.demand, dtype=np.float64)
        planned = {vm: i for i, vm in enumerate(self._last)}
        arrived = [vm for vm, h in enumerate(world.host_of) if h != self._where[vm]]
        arrived.sort(key=lambda vm: (self._ram[vm], planned.get(vm, len(planned))))
        for vm in arrived:
            if vm not in self._gone:
                self._lists[self._where[vm]].remove(vm)
                self._lists[world.host_of[vm]].append(vm)
            self._where[vm] = world.host_of[vm]
        if self.finished is not None:
            for vm, at in enumerate(self.finished):
                if at <= seconds and vm not in self._gone:
                    self._gone.add(vm)
                    self._lists[self._where[vm]].remove(vm)

    def _optimise(self, world: World, demand: Floats, seconds: float) -> list[tuple[int, int]]:
        """CloudSim's ``optimizeAllocation``: (VM, target) pairs, in the order it starts
        them."""
        assert self._lists is not None
        lists = [list(vms) for vms in self._lists]
        hosts = len(world.hosts)
        capacity = np.array(world.capacity, dtype=np.float64)
        pe = np.array([k.speed for k in world.kinds], dtype=np.float64)
        curves = np.array([k.power.curve() for k in world.kinds], dtype=np.float64)
        judge = self.judge(demand, lists, capacity, seconds)
        # What each host's scheduler allocates: each VM's request capped at a CPU's MIPS; on
        # an oversubscribed (crowded) host, every VM scaled down to fit and floored to whole
        # MIPS (VmSchedulerTimeSharedOverSubscription), so that such a host is a little under
        # 100% and has no MIPS free.
        allocated = np.zeros(hosts)
        for h, vms in enumerate(lists):
            for vm in vms:
                allocated[h] += min(demand[vm], pe[h])
        crowded = allocated > capacity
        for h in (int(h) for h in np.flatnonzero(crowded)):
            scale = capacity[h] / allocated[h]
            allocated[h] = sum(math.floor(min(demand[vm], pe[h]) * scale) for vm in lists[h])
        utilisation = allocated / capacity  # at the round's update
        drawn = power(curves, utilisation)  # host.getPower() while the round plans
        over = judge.over()
        off = utilisation == 0

        def find(vm: int, excluded: Flags) -> int | None:
            r = demand[vm]
            fits = (
                ~excluded
                & (pe >= r)
                & np.where(crowded, r <= 0, capacity - allocated >= r)
                & ((allocated == 0) | ~judge.over_with(vm))
            )
            if not fits.any():
                return None
            growth = np.where(fits, power(curves, (allocated + r) / capacity) - drawn, np.inf)
            if not self.tie:
                return int(np.argmin(growth))
            best, least = -1, math.inf
            for h in np.flatnonzero(fits):
                if growth[h] < least - self.tie:
                    best, least = int(h), float(growth[h])
            return best

        def put(vm: int, h: int) -> None:
            lists[h].append(vm)
            judge.add(vm, h)
            allocated[h] += demand[vm]

        def take(vm: int, h: int) -> None:
            lists[h].remove(vm)
            judge.remove(vm, h)
            allocated[h] -= min(demand[vm], pe[h])

        # 1. VMs leaving the overloaded hosts: the least RAM first, until not overloaded.
        leaving: list[int] = []
        for hot in (int(h) for h in np.flatnonzero(over)):
            while lists[hot]:
                vm = min(lists[hot], key=lambda v: self._ram[v])  # the first among equals
                leaving.append(vm)
                take(vm, hot)
                if not judge.over_host(hot):
                    break
        # 2. Placed by requested MIPS, decreasing (a stable sort, as Java's).
        plan: dict[int, int] = {}
        order: list[int] = []
        key = np.round(demand, 6) if self.tie else demand
        for vm in sorted(leaving, key=lambda v: -key[v]):
            target = find(vm, over)
            if target is None:
                self.unplaced += 1
                continue
            self._say(f"VM #{vm} allocated to host #{target}")
            put(vm, target)
            plan[vm] = target
            order.append(vm)
        # 3. Underloaded hosts, least utilised first: all their VMs or none.
        not_source = over | off
        not_target = over | off
        least = np.round(utilisation, 9) if self.tie else utilisation
        for h in (int(h) for h in np.argsort(least, kind="stable")):
            if not 0 < utilisation[h] < 1 or not_source[h] or not lists[h]:
                continue
            not_source[h] = True
            not_target[h] = True
            self._say(f"Under-utilized host: host #{h}")
            batch: list[tuple[int, int]] = []
            for vm in sorted(lists[h], key=lambda v: -key[v]):
                target = find(vm, not_target)
                if target is None:
                    self._say(
                        "Not all VMs can be reallocated from the host, reallocation cancelled"
                    )
                    for moved, t in batch:
                        take(moved, t)
                    batch = []
                    break
                self._say(f"VM #{vm} allocated to host #{target}")
                put(vm, target)
                batch.append((vm, target))
            for vm, target in batch:
                not_source[target] = True
                if vm in plan:  # its second migration: it arrives in this one's turn
                    self.doubled += 1
                    self.detours[seconds, vm] = plan[vm]
                    order.remove(vm)
                order.append(vm)
                plan[vm] = target
        return [(vm, plan[vm]) for vm in order]

    def judge(
        self, demand: Floats, lists: Sequence[Sequence[int]], capacity: Floats, seconds: float
    ) -> Threshold:
        """The round's overload rule, over the hosts' VM ``lists`` at ``seconds``."""
        return Threshold(self.threshold, demand, lists, capacity)

    def _say(self, line: str) -> None:
        if self.trail is not None:
            self.trail.append(line)

    # -- where the VMs start ------------------------------------------------------------------

    @staticmethod
    def initial(
        trace: Trace,
        host_kinds: Mapping[str, HostKind],
        mips: Sequence[float] | None = None,
        threshold: float = 0.8,
    ) -> dict[str, str]:
        """CloudSim's initial allocation: each VM in order (its id), on the host whose power
        grows least, requesting its full MIPS (``mips``, else its ``mips`` label), its RAM and
        bandwidth while it starts. As in CloudSim 3.0.3, a VM already created requests no
        MIPS any more (it is no longer being instantiated and has no cloudlet yet), so a host
        is never judged overloaded after taking one; its MIPS stay allocated though, so the
        free MIPS and the power after count them; and every host's power before is its idle
        power (no update has run), so an empty host wins over a used one of its kind and the
        VMs start spread over as many hosts as they can."""
        names = list(host_kinds)
        kinds = [host_kinds[n] for n in names]
        capacity = np.array([k.cpus * k.speed for k in kinds], dtype=np.float64)
        pe = np.array([k.speed for k in kinds], dtype=np.float64)
        memory = np.array([float(k.memory) for k in kinds])
        curves = np.array([k.power.curve() for k in kinds], dtype=np.float64)
        idle = curves[:, 0]
        allocated = np.zeros(len(names))
        used = np.zeros(len(names))
        count = np.zeros(len(names), dtype=np.int64)
        out: dict[str, str] = {}
        for i, vm in enumerate(trace.vms):
            if mips is not None:
                m = float(mips[i])
            else:
                labels = dict(vm.labels)
                if MIPS_LABEL not in labels:
                    raise ValueError(f"{vm.name}: no {MIPS_LABEL!r} label and no mips given")
                m = float(labels[MIPS_LABEL])
            fits = (
                (pe >= m)
                & (capacity - allocated >= m)
                & (memory - used >= vm.memory)
                & (count < VMS_PER_HOST_BY_BANDWIDTH)
                & ((allocated == 0) | (m / capacity <= threshold))
            )
            if not fits.any():
                raise ValueError(f"{vm.name} ({m:g} MIPS) fits on no host at the start")
            growth = np.where(fits, power(curves, (allocated + m) / capacity) - idle, np.inf)
            h = int(np.argmin(growth))
            allocated[h] += m
            used[h] += vm.memory
            count[h] += 1
            out[vm.name] = names[h]
        return out
