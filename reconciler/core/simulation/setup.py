"""The cluster a simulation runs on, and the policies compared on it, side by side.

- :func:`shape_of` reads ``--hosts 400xG4,400xG5``; :func:`shaped` makes a what-if cluster of
  it (hosts ``g4-001``, ... labelled ``kind``), from the cluster folder's defaults;
- :func:`observed_kinds` takes a real cluster's hosts as a recorded snapshot saw them (CPUs,
  memory, architecture), with a generic power curve where none is declared;
- :func:`sized` gives the trace's VMs the vCPUs, memory, labels and dirty rate the snapshot
  saw them with, where it saw them;
- :func:`simulated` runs each policy on the same trace and cluster, from the same start.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta

from reconciler.core.simulation.meter import Meter
from reconciler.core.simulation.replay import RunDecider, initial_placement, replay
from reconciler.core.simulation.trace import Trace
from reconciler.core.simulation.world import World
from reconciler.model.cluster import Host
from reconciler.model.desired import DesiredState
from reconciler.model.simulation import (
    NAMED_KINDS,
    HostKind,
    PowerCurve,
    SimulationReport,
)
from reconciler.model.snapshot import HostState, Snapshot, VmState

GENERIC_POWER = PowerCurve(idle=100, peak=250)
"""A host whose power curve is not declared: 100 W idle to 250 W at full load (a typical
two-socket server of the SPECpower results)."""

_SHAPE = re.compile(r"^\s*(\d+)\s*[xX]\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*$")


def shape_of(text: str, kinds: Mapping[str, HostKind]) -> list[tuple[int, HostKind]]:
    """``400xG4,400xG5`` as (count, kind) pairs; ValueError saying what is wrong."""
    known = {**NAMED_KINDS, **kinds}
    out: list[tuple[int, HostKind]] = []
    for part in text.split(","):
        match = _SHAPE.match(part)
        if match is None:
            raise ValueError(f"{part.strip()!r} is not COUNTxKIND, e.g. 400xG4")
        count, name = int(match.group(1)), match.group(2)
        if not 1 <= count <= 100_000:
            raise ValueError(f"{part.strip()!r}: a count of 1 to 100000 hosts")
        if name not in known:
            raise ValueError(
                f"{part.strip()!r}: no host kind {name!r}; known: {', '.join(sorted(known))} "
                "(declare more in a --kinds file)"
            )
        out.append((count, known[name]))
    return out


def shaped(
    desired: DesiredState, shape: Sequence[tuple[int, HostKind]]
) -> tuple[DesiredState, dict[str, HostKind]]:
    """``desired`` on a what-if cluster of ``shape``: its policy and rules, no placement, no
    rollout (a rollout names the cluster's own hosts)."""
    hosts: list[Host] = []
    kinds: dict[str, HostKind] = {}
    for count, kind in shape:
        prefix = kind.name.lower()
        width = max(3, len(str(count)))
        for i in range(1, count + 1):
            name = f"{prefix}-{i:0{width}d}"
            while name in kinds:
                name += "x"
            hosts.append(Host(name=name, uri=f"sim:///{name}", labels={"kind": kind.name}))
            kinds[name] = kind
    cluster = desired.cluster
    spec = cluster.spec.model_copy(update={"hosts": hosts})
    placement = desired.placement
    empty = placement.model_copy(update={"spec": placement.spec.model_copy(update={"vms": {}})})
    return (
        desired.model_copy(
            update={
                "cluster": cluster.model_copy(update={"spec": spec}),
                "placement": empty,
                "rollouts": [],
            }
        ),
        kinds,
    )


def observed_kinds(
    desired: DesiredState, snapshot: Snapshot, power: Mapping[str, PowerCurve] | None = None
) -> dict[str, HostKind]:
    """Each host of ``desired`` as ``snapshot`` saw it; ValueError naming a host it did not
    see with CPUs and memory."""
    seen: dict[str, HostState] = {h.name: h for h in snapshot.hosts}
    out: dict[str, HostKind] = {}
    for host in desired.cluster.spec.hosts:
        h = seen.get(host.name)
        if h is None or not h.cpus or not h.memory_total:
            raise ValueError(
                f"the snapshot has no CPUs and memory of {host.name}: take one while it answers"
            )
        curve = (power or {}).get(host.name, GENERIC_POWER)
        out[host.name] = HostKind(
            name=host.name.replace("_", "-") or "host",
            cpus=h.cpus,
            memory=h.memory_total,
            power=curve,
            arch=h.arch or "x86_64",
        )
    return out


def sized(trace: Trace, snapshot: Snapshot | None) -> tuple[Trace, dict[str, str]]:
    """``trace`` with its VMs as ``snapshot`` saw them (vCPUs, memory, labels, dirty rate),
    and where the snapshot saw each running."""
    if snapshot is None:
        return trace, {}
    seen: dict[str, VmState] = {v.name: v for v in snapshot.vms}
    vms = []
    where: dict[str, str] = {}
    for vm in trace.vms:
        s = seen.get(vm.name)
        if s is None:
            vms.append(vm)
            continue
        where[vm.name] = s.host
        vms.append(
            replace(
                vm,
                vcpus=s.vcpus or vm.vcpus,
                memory=s.memory_max or vm.memory,
                labels=tuple(sorted(s.labels.items())),
                dirty=float(s.dirty_rate) if s.dirty_rate else vm.dirty,
            )
        )
    return replace(trace, vms=tuple(vms)), where


def simulated(
    cluster: str,
    policies: Sequence[tuple[str, DesiredState]],
    trace: Trace,
    kinds: Mapping[str, HostKind],
    *,
    where: Mapping[str, str] | None = None,
    realistic: bool = True,
    steps: int | None = None,
    rollout_step: float = 600.0,
) -> SimulationReport:
    """Every policy on ``trace`` from the same start: the VMs where ``where`` says (a
    snapshot), else where the first policy's ``place`` puts them; each policy's rollouts
    played, a step that runs a command taking ``rollout_step`` seconds."""
    if not policies:
        raise ValueError("no policy to simulate")
    first = policies[0][1]
    hosts = {h.name for h in first.cluster.spec.hosts}
    start = {n: h for n, h in (where or {}).items() if h in hosts}
    placed = {**start, **first.placement.spec.vms}
    placed = {n: h for n, h in placed.items() if h in hosts}
    listed = first.placement.model_copy(
        update={"spec": first.placement.spec.model_copy(update={"vms": placed})}
    )
    placement = initial_placement(
        first.model_copy(update={"placement": listed}), trace, kinds, trace.start
    )
    out = []
    for name, desired in policies:
        world = World(desired, trace, kinds, placement)
        spec = desired.policy.spec
        meter = Meter(idle_when_empty=realistic, limit=spec.host_limit / 100)
        out.append(
            replay(
                world,
                RunDecider(desired, name=name, rollout_step=rollout_step),
                meter,
                interval=max(spec.interval, timedelta(seconds=trace.step)),
                steps=steps,
            )
        )
    total = trace.steps if steps is None else min(steps, trace.steps)
    return SimulationReport(
        cluster=cluster,
        source=trace.source,
        start=trace.start,
        end=trace.start + timedelta(seconds=total * trace.step),
        step_seconds=trace.step,
        hosts=len(kinds),
        vms=len(trace.vms),
        mode="realistic" if realistic else "literature",
        policies=out,
    )
