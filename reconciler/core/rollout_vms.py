"""The VMs of a host a rollout takes out: which must leave, which cannot, where they would go.

A host taken out is drained the way ``maintenance: true`` drains it, without an edit of
cluster.yaml: :func:`with_hosts_out` is the desired state the planner sees while the rollout
holds hosts out. A running VM that cannot leave its host (pinned to it, excluded, or not
movable under the policy) blocks the host, or is shut down for its turn when the rollout says
so. A shut-off VM that cannot move stays where it is: it does not run while the host is
worked on.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from reconciler.core import planner
from reconciler.core.movable import why_fixed
from reconciler.core.selectors import matches
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.plan import Move, Unsatisfiable
from reconciler.model.rules import ExcludeRule, PinRule
from reconciler.model.snapshot import Snapshot, VmRunState, VmState

_OFF = frozenset({VmRunState.SHUTOFF, VmRunState.CRASHED})


def runs(vm: VmState) -> bool:
    """Running in any sense (running, paused, blocked, suspended, shutting down): anything
    but shut off or crashed."""
    return vm.state not in _OFF


@dataclass(frozen=True, slots=True)
class Blocker:
    """A VM that cannot leave a host the rollout takes out."""

    vm: str
    host: str
    why: str
    """``erp is pinned to kvm-03 by rule erp-pinned``."""
    rule: str | None = None

    def text(self) -> str:
        return self.why


def stuck_reason(desired: DesiredState, vm: VmState) -> tuple[str, str | None] | None:
    """(why, rule) when ``vm`` cannot leave the host it was seen on; None when it can."""
    for rule in desired.rules.spec.rules:
        if not matches(rule.vms, vm.name, vm.labels):
            continue
        if isinstance(rule, PinRule):
            hosts = [h for h in desired.cluster.spec.hosts if matches(rule.hosts, h.name, h.labels)]
            if [h.name for h in hosts] == [vm.host]:
                return f"{vm.name} is pinned to {vm.host} by rule {rule.name}", rule.name
        elif isinstance(rule, ExcludeRule):
            return f"{vm.name} is excluded from migration by rule {rule.name}", rule.name
    fixed = why_fixed(vm, desired.policy.spec)
    return (fixed, None) if fixed is not None else None


@dataclass(frozen=True, slots=True)
class HostVms:
    """The VMs on one host, as the rollout sees them."""

    leaving: tuple[str, ...]
    """VMs that must still leave (movable, or seen on two hosts: in flight)."""
    stuck: tuple[Blocker, ...]
    """Running VMs that cannot leave."""
    staying: tuple[str, ...]
    """Shut-off VMs that cannot move: they stay, off."""
    running: tuple[str, ...]
    """Every VM that runs on the host."""


def host_vms(desired: DesiredState, snapshot: Snapshot, host: str) -> HostVms:
    """What runs on ``host`` in ``snapshot`` and what of it can leave."""
    in_flight = {f.name for f in snapshot.in_flight if host in f.hosts}
    leaving: list[str] = []
    stuck: list[Blocker] = []
    staying: list[str] = []
    running: list[str] = []
    for vm in sorted(snapshot.vms, key=lambda v: v.name):
        if vm.host != host:
            continue
        if runs(vm):
            running.append(vm.name)
        if vm.name in in_flight:
            leaving.append(vm.name)
            continue
        reason = stuck_reason(desired, vm)
        if reason is None:
            leaving.append(vm.name)
        elif runs(vm):
            stuck.append(Blocker(vm=vm.name, host=host, why=reason[0], rule=reason[1]))
        else:
            staying.append(vm.name)
    return HostVms(tuple(leaving), tuple(stuck), tuple(staying), tuple(running))


def with_hosts_out(desired: DesiredState, hosts: Collection[str]) -> DesiredState:
    """``desired`` with ``hosts`` in maintenance: the planner drains them, none takes VMs."""
    if not hosts:
        return desired
    changed = [
        h.model_copy(update={"maintenance": True}) if h.name in hosts and not h.maintenance else h
        for h in desired.cluster.spec.hosts
    ]
    spec = desired.cluster.spec.model_copy(update={"hosts": changed})
    cluster = desired.cluster.model_copy(update={"spec": spec})
    return desired.model_copy(update={"cluster": cluster})


def during_rollouts(
    desired: DesiredState, out: Collection[str], keep_out: Collection[str]
) -> DesiredState:
    """The desired state a round plans with while rollouts run: the hosts ``out`` drained, and
    no balance move at all while a rollout holds a host out or is about to take one
    (``keep_out``), so none fills a host a rollout takes next; mandatory moves (the drain,
    required rules, drift) go on."""
    held = with_hosts_out(desired, out)
    if not keep_out:
        return held
    spec = held.policy.spec.model_copy(update={"threshold": 100})
    return held.model_copy(update={"policy": held.policy.model_copy(update={"spec": spec})})


def with_fresh_look(snapshot: Snapshot, fresh: Snapshot) -> Snapshot:
    """``snapshot`` with the hosts ``fresh`` looked at again replaced by what it saw."""
    looked = {h.name for h in fresh.hosts}
    hosts = [h for h in snapshot.hosts if h.name not in looked] + list(fresh.hosts)
    vms = [v for v in snapshot.vms if v.host not in looked] + list(fresh.vms)
    return snapshot.model_copy(update={"hosts": hosts, "vms": vms})


@dataclass(frozen=True, slots=True)
class Evacuation:
    """Where the VMs of one host would go if it were taken out now, and what cannot."""

    host: str
    moves: tuple[Move, ...]
    problems: tuple[Unsatisfiable, ...]
    """Unsatisfiable items about VMs of the host (no room, rules)."""


def evacuation(
    desired: DesiredState,
    snapshot: Snapshot,
    history: History,
    host: str,
    *,
    now: datetime,
    also_out: Sequence[str] = (),
) -> Evacuation:
    """The plan that empties ``host`` (with ``also_out`` out too), as the planner makes it
    now, without balance moves: the drain a rollout would ask for."""
    out = with_hosts_out(desired, [host, *also_out])
    policy = out.policy.model_copy(
        update={"spec": out.policy.spec.model_copy(update={"threshold": 100})}
    )
    plan = planner.plan(out.model_copy(update={"policy": policy}), snapshot, history, now=now)
    on_host = {vm.name for vm in snapshot.vms if vm.host == host}
    moves = tuple(m for m in (*plan.moves, *plan.deferred) if m.source == host)
    problems = tuple(p for p in plan.unsatisfiable if on_host.intersection(p.vms))
    return Evacuation(host=host, moves=moves, problems=problems)


__all__ = [
    "Blocker",
    "Evacuation",
    "HostVms",
    "during_rollouts",
    "evacuation",
    "host_vms",
    "runs",
    "stuck_reason",
    "with_fresh_look",
    "with_hosts_out",
]
