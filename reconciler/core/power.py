"""Power saving decided as a pure function: which hosts to empty, power off and power on.

Each round :func:`power_next` reads the cluster's demand (the VMs' CPU in the snapshot, over
the load window with ``basis: used``) against the capacity of the hosts in service, and the
book of what the reconciler did before (hosts in standby, booting, being emptied, since when
demand has been below or above the band):

- demand below ``band.low`` for ``powerOffAfter``: hosts are chosen to empty while what is left
  keeps the demand within the band's middle, memory within ``hostLimit``, and
  ``minSpareHosts`` plus recovery's ``reserveHosts`` hosts beyond what the load needs; never a
  host excluded, in maintenance, without a power driver, or holding a VM that cannot leave
  (pinned, excluded, local disks that may not move). The least efficient goes first (idle
  watts per CPU, from the host's power curve where known), then the cheapest to empty (bytes
  to move). The round's plan drains them as maintenance does, within every limit;
- a host being emptied that runs no VM any more is powered off;
- demand above ``band.high`` for ``powerOnAfter`` (or a host being emptied that can no longer
  be, or mode ``off``): standby hosts are powered on, the most efficient first, enough to bring
  the demand back to the band's middle; emptying stops.

Nothing here switches anything: the engine (``run``) or the simulator carries the decision out.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from reconciler.core.feasibility import check_move
from reconciler.core.load_range import in_range
from reconciler.core.power_need import shortfall, to_power_on
from reconciler.core.rollout_vms import stuck_reason, with_hosts_out
from reconciler.core.selectors import matches
from reconciler.core.state import State, build
from reconciler.model.desired import DesiredState
from reconciler.model.load import Statistic
from reconciler.model.power import HostCapacity, PowerBook, PowerMode, PowerSpec, StandbyHost
from reconciler.model.quantity import format_duration
from reconciler.model.recovery import SavedVm
from reconciler.model.snapshot import Snapshot, VmRunState, VmState

_OFF = frozenset({VmRunState.SHUTOFF, VmRunState.CRASHED})
FAILED_OFF_BACKOFF = timedelta(hours=1)
"""A host whose power-off failed (its BMC refused, hung or said off while libvirt still
answered) is not chosen to empty again for this long: each attempt would move its VMs away
and back for nothing."""
DRAIN_TRIES = 4
"""Times a round picks hosts to empty again, leaving out those whose VMs could not all be
placed elsewhere: hosts that cannot be emptied (their VMs bound to them by a required rule)
never keep the next candidates from being chosen."""


@dataclass(frozen=True)
class PowerNext:
    """What the round does about power."""

    book: PowerBook
    """The book after this round's decision (the engine writes it before acting)."""
    empty: tuple[str, ...] = ()
    """Hosts the plan drains (being emptied)."""
    power_off: tuple[str, ...] = ()
    """Hosts that run no VM any more: power them off now."""
    power_on: tuple[str, ...] = ()
    """Standby hosts to power on now."""
    why: Mapping[str, str] = field(default_factory=dict)
    """Host -> why it is emptied, powered off or on."""
    demand: float = 0.0
    """The cluster's demand over the capacity in service (0-1), as decided on."""


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What the decision needs of one host beyond the snapshot."""

    idle_watts: float | None = None
    """Its power curve's idle draw, where known (the simulator's host kinds)."""
    switchable: bool = True
    """It has a power driver."""


def _runs(vm: VmState) -> bool:
    return vm.state not in _OFF


def power_next(
    desired: DesiredState,
    snapshot: Snapshot,
    book: PowerBook,
    now: datetime,
    *,
    facts: Mapping[str, HostFacts] | None = None,
    held: Collection[str] = (),
    down: Collection[str] = (),
    lost: Sequence[SavedVm] = (),
) -> PowerNext:
    """The round's power decision; ``held`` are hosts a rollout or a person holds (never
    chosen to empty, their VMs must find room), ``down`` the hosts recovery tracks as dead
    and ``lost`` the VMs it remembers of them that run nowhere now (they must find room)."""
    spec = desired.policy.spec.power
    facts = facts or {}
    if spec.mode is PowerMode.OFF:
        on = tuple(sorted(book.standby))
        back = dict.fromkeys(on, "power saving is off: back into service")
        after = book.model_copy(
            update={
                "standby": {},
                "emptying": {},
                "booting": {**book.booting, **dict.fromkeys(on, now)},
                "low_since": None,
                "high_since": None,
            }
        )
        return PowerNext(after, (), (), on, back)
    cpu, mem = _capacity(desired, snapshot, book)
    known = _remembered(desired, snapshot, book, facts)
    running = [v for v in snapshot.vms if _runs(v)]
    # a figure out of range is no measurement: its VM counts as its vCPUs over the overcommit
    over = desired.policy.spec.cpu_overcommit
    demand = sum(
        v.cpu_used if v.cpu_used is not None and in_range(v.cpu_used, v.vcpus) else v.vcpus / over
        for v in running
    )
    memory = sum(v.memory_max for v in running)
    total_cpu = sum(cpu.values())
    u = demand / total_cpu if total_cpu > 0 else 1.0
    low, high = spec.band.low / 100, spec.band.high / 100
    low_since = (book.low_since or now) if u < low else None
    high_since = (book.high_since or now) if u > high else None
    emptying = dict(book.emptying)
    standby = dict(book.standby)
    why: dict[str, str] = {}
    power_on: list[str] = []

    def expected(host: str) -> HostCapacity:
        return _expected(host, known, cpu, mem)

    need = shortfall(
        desired, snapshot, now, out={*standby, *book.booting, *emptying}, held=held,
        down=down, lost=lost,
    )  # fmt: skip
    if need.short and emptying:  # capacity is short: emptying stops, those hosts serve again
        for host in emptying:
            why[host] = f"no longer emptied: capacity is short ({need.why()})"
        emptying.clear()
        need = shortfall(
            desired, snapshot, now, out={*standby, *book.booting}, held=held, down=down,
            lost=lost,
        )  # fmt: skip
    if need.short:
        chosen, covered = to_power_on(
            need,
            [(h, expected(h)) for h in _by_efficiency(standby, facts)],
            {h: expected(h) for h in book.booting},
            host_limit=float(desired.policy.spec.host_limit),
            band_high=spec.band.high,
            reserve_hosts=desired.policy.spec.recovery.reserve_hosts,
        )
        for host in chosen:
            why[host] = f"capacity needed: {need.why()}" + (
                "" if covered else " (every standby host is powered on and it is still short)"
            )
        power_on += chosen
    if high_since is not None and now - high_since >= spec.power_on_after:
        emptying.clear()  # load is back: stop emptying
        target = (low + high) / 2
        coming = total_cpu + sum(expected(h).cpus for h in [*book.booting, *power_on])
        for host in _by_efficiency(standby, facts):
            if demand / max(coming, 1e-9) <= target:
                break
            if host in power_on:
                continue
            power_on.append(host)
            coming += expected(host).cpus
            why[host] = (
                f"demand {100 * u:.0f}% of the capacity in service has been above the band's "
                f"{spec.band.high:g}% for {_age(now - high_since)}"
            )
        high_since = None if power_on else high_since
    ahead = _forecast(snapshot, running, over)
    if ahead is not None and not power_on:
        # the forecast says demand will be above the band: power on before it arrives
        coming = total_cpu + sum(expected(h).cpus for h in book.booting)
        if ahead / max(coming, 1e-9) > high:
            emptying.clear()
            target = (low + high) / 2
            horizon = desired.policy.spec.load.forecast.horizon
            for host in _by_efficiency(standby, facts):
                if ahead / max(coming, 1e-9) <= target:
                    break
                power_on.append(host)
                coming += expected(host).cpus
                why[host] = (
                    f"forecast: demand expected at {100 * ahead / max(total_cpu, 1e-9):.0f}% "
                    f"of the capacity in service over the next {format_duration(horizon)}, "
                    f"above the band's {spec.band.high:g}% (now {100 * u:.0f}%): powered on "
                    "before it arrives"
                )
    off = tuple(
        sorted(
            h
            for h in emptying
            if not any(v.host == h for v in snapshot.vms if _runs(v) or v.persistent)
        )
    )
    for h in off:
        why[h] = "empty: powered off to save its idle power"
        emptying.pop(h)
        standby[h] = StandbyHost(since=now, why=why[h])
        cpu.pop(h, None)  # no longer capacity in service
        mem.pop(h, None)
    chosen_empty: dict[str, str] = {}
    kept: set[str] | None = None
    asleep = set(standby) | set(book.booting)
    calm = not power_on and not need.short and not down  # no emptying while a host is down
    if low_since is not None and now - low_since >= spec.power_off_after and calm:
        # a host is not emptied for a lull the forecast says is ending
        peak = demand if ahead is None else max(demand, ahead)
        # a host whose power-off failed lately is not emptied again for nothing
        failing = {h for h, at in book.failed_at.items() if now - at < FAILED_OFF_BACKOFF}
        stuck: set[str] = set()
        for _ in range(DRAIN_TRIES):
            chosen_empty = _to_empty(desired, snapshot, spec, cpu, mem, peak, memory, emptying,
                                     standby, facts, {*held, *failing, *stuck})  # fmt: skip
            if not chosen_empty:
                break
            # only hosts whose every VM the planner can place elsewhere, with the others out;
            # those that cannot be emptied make way for the next candidates
            kept = drainable(desired, snapshot, {*emptying, *chosen_empty}, asleep, now)
            dropped = {h for h in chosen_empty if h not in kept}
            if not dropped:
                break
            stuck |= dropped
    if chosen_empty or emptying:
        if kept is None or not chosen_empty:  # the hosts being emptied alone: checked here
            kept = drainable(desired, snapshot, {*emptying, *chosen_empty}, asleep, now)
        for host in [h for h in emptying if h not in kept]:
            why[host] = "no longer emptied: the plan cannot place all of its VMs elsewhere"
            del emptying[host]
        chosen_empty = {h: r for h, r in chosen_empty.items() if h in kept}
    if chosen_empty and low_since is not None:
        for host, reason in chosen_empty.items():
            emptying[host] = now
            why[host] = (
                f"demand {100 * u:.0f}% has been below the band's {spec.band.low:g}% for "
                f"{_age(now - low_since)}: {reason}"
            )
    booting = {**book.booting, **dict.fromkeys(power_on, now)}
    for h in power_on:
        standby.pop(h, None)
    after = book.model_copy(
        update={
            "standby": standby,
            "booting": booting,
            "emptying": emptying,
            "low_since": low_since,
            "high_since": high_since,
            "capacity": known,
        }
    )
    return PowerNext(
        book=after,
        empty=tuple(emptying),
        power_off=off,
        power_on=tuple(power_on),
        why=why,
        demand=u,
    )


def drainable(
    desired: DesiredState,
    snapshot: Snapshot,
    hosts: Collection[str],
    asleep: Collection[str],
    now: datetime,
) -> set[str]:
    """Of ``hosts``, those whose every running VM finds a place elsewhere under every
    required rule, memory, vCPUs and hostLimit, with all of ``hosts`` (and those ``asleep``)
    held out and the VMs placed before it counted (each where its host's score stays
    lowest, the largest first); a host with a VM that finds no place is dropped, its VMs
    counted where they are. One model, moved in place: no plan per host."""
    del now
    model, state = build(with_hosts_out(desired, sorted({*hosts, *asleep})), snapshot)
    index = {h.name: h.index for h in model.hosts}
    on: dict[int, list[int]] = {}
    for vm in model.vms:  # the hosts held out receive no VM below: this stays true
        on.setdefault(state.host_of[vm.index], []).append(vm.index)
    # hosts no VM may move to, whichever (unreachable, held out: those asleep or emptied,
    # which score lowest) are left out of every ranking: check_move refuses them first
    targets = [h.index for h in model.hosts if h.known and not h.maintenance]
    left: set[str] = set()
    for host in sorted(hosts):
        h = index.get(host)
        if h is None:
            continue
        vms = sorted(on.get(h, ()), key=lambda v: (-model.vms[v].memory, model.vms[v].name))
        placed: list[int] = []
        for v in vms:
            best = best_target(state, v, targets)
            if best is None:
                break
            state.move(v, best)
            placed.append(v)
        if len(placed) == len(vms):
            left.add(host)
        else:
            for v in placed:  # counted where they are
                state.move(v, h)
    return left


def best_target(state: State, v: int, targets: Sequence[int]) -> int | None:
    """Of ``targets``, the host VM ``v`` may move to where the score stays lowest (ties: the
    lower index); None when it may move to none. The hosts are ranked by score and checked in
    that order, the first that passes wins: scores are cheap, the checks are not."""
    required = [r for r in state.model.rules.host_rules[v] if r.required]
    if required:  # hosts its required host rules keep it off: refused whatever the load
        targets = [t for t in targets if all(r.permits(t) for r in required)]
    ranked = sorted(targets, key=lambda t: (state.score_with(t, v, 1), t))
    return next((t for t in ranked if check_move(state, v, t) is None), None)


def _age(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"


def _capacity(
    desired: DesiredState, snapshot: Snapshot, book: PowerBook
) -> tuple[dict[str, float], dict[str, int]]:
    """CPUs and memory of the hosts in service (reachable, not standby, not booting)."""
    out_cpu: dict[str, float] = {}
    out_mem: dict[str, int] = {}
    spec = {h.name: h for h in desired.cluster.spec.hosts}
    for h in snapshot.hosts:
        if not h.reachable or h.name in book.standby or h.name in book.booting:
            continue
        if h.name not in spec or spec[h.name].maintenance:
            continue
        out_cpu[h.name] = float(h.cpus or 0)
        out_mem[h.name] = int(h.memory_total or 0)
    return out_cpu, out_mem


def _forecast(snapshot: Snapshot, running: Sequence[VmState], over: float) -> float | None:
    """The demand the forecast expects over its horizon (``statistic: forecast``): each VM's
    forecast where it was used, its figure where not; None without a forecast."""
    load = snapshot.load
    if load is None or load.statistic is not Statistic.FORECAST or load.forecast is None:
        return None
    used = set(load.forecast.used)
    total = 0.0
    for v in running:
        seen = load.vms.get(v.name)
        fc = seen.forecast if seen is not None and v.name in used else None
        if fc is not None and in_range(fc, v.vcpus):
            total += fc
        elif v.cpu_used is not None and in_range(v.cpu_used, v.vcpus):
            total += v.cpu_used
        else:
            total += v.vcpus / over
    return total


def _remembered(
    desired: DesiredState, snapshot: Snapshot, book: PowerBook, facts: Mapping[str, HostFacts]
) -> dict[str, HostCapacity]:
    """The capacity of every host that may be powered off, as last seen answering."""
    switchable = {h.name for h in desired.cluster.spec.hosts if h.power is not None} | {
        h for h, f in facts.items() if f.switchable
    }
    known = {h: c for h, c in book.capacity.items() if h in switchable}
    for h in snapshot.hosts:
        if h.name in switchable and h.reachable and h.cpus and h.memory_total:
            known[h.name] = HostCapacity(cpus=h.cpus, memory=h.memory_total)
    return known


def _expected(
    host: str,
    known: Mapping[str, HostCapacity],
    cpu: Mapping[str, float],
    mem: Mapping[str, int],
) -> HostCapacity:
    """What a standby host brings back: as last seen in service, else the average host in
    service (a host asleep does not answer)."""
    if host in known:
        return known[host]
    n = max(len(cpu), 1)
    return HostCapacity(cpus=int(sum(cpu.values()) / n), memory=int(sum(mem.values()) / n))


def _by_efficiency(standby: Mapping[str, StandbyHost], facts: Mapping[str, HostFacts]) -> list[str]:
    """Standby hosts, the most efficient first (least idle watts), then the longest asleep."""
    return sorted(
        standby,
        key=lambda h: (facts.get(h, HostFacts()).idle_watts or 0.0, standby[h].since, h),
    )


def _to_empty(
    desired: DesiredState,
    snapshot: Snapshot,
    spec: PowerSpec,
    cpu: dict[str, float],
    mem: dict[str, int],
    demand: float,
    memory: int,
    emptying: Mapping[str, datetime],
    standby: Mapping[str, StandbyHost],
    facts: Mapping[str, HostFacts],
    held: Collection[str],
) -> dict[str, str]:
    """Hosts to empty now, each with why, within the band, memory, spares and maxStandby."""
    hosts = {h.name: h for h in desired.cluster.spec.hosts}
    policy = desired.policy.spec
    vms_on: dict[str, list[VmState]] = {}
    for v in snapshot.vms:
        vms_on.setdefault(v.host, []).append(v)
    candidates = []
    for name in cpu:
        h = hosts[name]
        if name in emptying or name in standby or name in held:
            continue
        if not facts.get(name, HostFacts()).switchable:
            continue
        if spec.exclude is not None and matches(spec.exclude, name, h.labels):
            continue
        if h.power is None and name not in facts:
            continue
        stuck = [v for v in vms_on.get(name, []) if stuck_reason(desired, v) is not None]
        if stuck:
            continue
        bytes_ = sum(v.memory_max for v in vms_on.get(name, []))
        per_cpu = (facts.get(name, HostFacts()).idle_watts or 0.0) / max(cpu[name], 1.0)
        candidates.append((-per_cpu, bytes_, name))
    candidates.sort()
    left_cpu = {n: c for n, c in cpu.items() if n not in emptying}
    left_mem = {n: m for n, m in mem.items() if n not in emptying}
    target = (spec.band.low + spec.band.high) / 200
    limit = policy.host_limit / 100
    spares = spec.min_spare_hosts + policy.recovery.reserve_hosts
    room = math.inf if spec.max_standby is None else spec.max_standby - len(standby) - len(emptying)
    room = min(room, 1 + len(cpu) // 10)  # a tenth of the hosts in service at a time
    out: dict[str, str] = {}
    for _, bytes_, name in candidates:
        if len(out) >= room:
            break
        cpu_after = sum(left_cpu.values()) - left_cpu[name]
        mem_after = sum(left_mem.values()) - left_mem[name]
        if cpu_after <= 0 or demand / cpu_after > target or memory / max(mem_after, 1) > limit:
            continue
        hosts_after = max(len(left_cpu) - 1, 1)
        per_cpu, per_mem = cpu_after / hosts_after, mem_after / hosts_after
        needed = max(
            math.ceil(demand / max(per_cpu * spec.band.high / 100, 1e-9)),
            math.ceil(memory / max(per_mem * limit, 1)),
            1 if memory else 0,
        )
        if len(left_cpu) - 1 < needed + spares:
            continue
        out[name] = (
            f"the other hosts carry it at {100 * demand / cpu_after:.0f}% with "
            f"{len(left_cpu) - 1 - needed} spare; {bytes_ / 2**30:.1f} GiB to move"
        )
        del left_cpu[name]
        del left_mem[name]
    return out
