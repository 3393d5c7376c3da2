"""A rollout's plan and status as data: what ``rollout plan`` and ``rollout status`` show."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from reconciler.core.rollout import Decision, Phase, next_actions
from reconciler.core.rollout_hosts import rollout_hosts
from reconciler.core.rollout_steps import HostSteps, Standing, StepState, host_steps, standing
from reconciler.core.rollout_vms import Blocker, evacuation, host_vms
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.rollout import ImmovableAction, Rollout
from reconciler.model.rollout_progress import AFTER_PREFIX, BEFORE_PREFIX, StepRecord
from reconciler.model.rollout_report import (
    BlockingVm,
    HostState,
    RolloutHost,
    RolloutPlan,
    RolloutStatus,
    StepView,
)
from reconciler.model.snapshot import Snapshot


def _blocking(blockers: Sequence[Blocker]) -> list[BlockingVm]:
    return [BlockingVm(vm=b.vm, host=b.host, why=b.why, rule=b.rule) for b in blockers]


def _view(state: StepState) -> StepView:
    last = state.last
    if last is None:
        return StepView(step=state.step)
    return StepView(
        step=state.step, outcome=last.outcome, at=last.at, by=last.by, detail=last.detail
    )


def _host(h: HostSteps) -> RolloutHost:
    current = h.current
    state: HostState
    if current is None:
        state = "done"
    elif current.failed:
        state = "failed"
    elif h.begun:
        state = "out"
    else:
        state = "pending"
    return RolloutHost(
        host=h.host,
        state=state,
        step=None if current is None else current.step,
        steps=[_view(s) for s in h.steps if s.last is not None],
    )


def rollout_plan(
    rollout: Rollout,
    desired: DesiredState,
    snapshot: Snapshot,
    history: History,
    *,
    now: datetime,
) -> RolloutPlan:
    """Every host in order, where its VMs would go if it were taken out now (the others in
    service), and which running VMs cannot leave it."""
    spec = rollout.spec
    blocking = spec.immovable.action is ImmovableAction.BLOCK
    hosts = []
    for name in rollout_hosts(rollout, desired.cluster):
        plan = evacuation(desired, snapshot, history, name, now=now)
        stuck = host_vms(desired, snapshot, name).stuck
        hosts.append(
            RolloutHost(
                host=name,
                state="pending",
                evacuation=list(plan.moves),
                blocked_by=_blocking(stuck) if blocking else [],
                shut_down=[] if blocking else _blocking(stuck),
                problems=[p for p in plan.problems if not set(p.vms) <= {b.vm for b in stuck}],
            )
        )
    return RolloutPlan(
        cluster=desired.cluster.metadata.name,
        rollout=rollout.metadata.name,
        paused=spec.paused,
        max_unavailable=spec.max_unavailable,
        before=[BEFORE_PREFIX + s.name for s in spec.before],
        host_steps=host_steps(rollout),
        after=[AFTER_PREFIX + s.name for s in spec.after],
        hosts=hosts,
        blocked=any(h.blocked_by or h.problems for h in hosts),
    )


def rollout_status(
    rollout: Rollout,
    desired: DesiredState,
    snapshot: Snapshot | None,
    records: Sequence[StepRecord],
    *,
    now: datetime,
    decision: Decision | None = None,
) -> RolloutStatus:
    """Where ``rollout`` stands. Without a snapshot (the hosts could not be looked at) only
    its records speak: no phase beyond what they show, no blocking VMs."""
    st = standing(rollout, rollout_hosts(rollout, desired.cluster), records)
    if decision is None and snapshot is not None:
        decision = next_actions(rollout, desired, snapshot, records, now=now)
    stopped = None
    stopped_host = None
    if decision is not None and decision.stopped_at is not None:
        stopped_host, step = decision.stopped_at
        owner = next((h for h in st.hosts if h.host == stopped_host), None)
        states = owner.steps if owner is not None else (*st.before, *st.after)
        stopped = next((_view(s) for s in states if s.step == step), None)
    return RolloutStatus(
        cluster=desired.cluster.metadata.name,
        rollout=rollout.metadata.name,
        phase=decision.phase.value if decision is not None else _phase_of(st),
        notes=list(decision.notes) if decision is not None else [],
        stopped_at=stopped,
        stopped_host=stopped_host,
        out=list(decision.out) if decision is not None else [h.host for h in st.hosts if h.out],
        keep_out=list(decision.keep_out) if decision is not None else [],
        before=[_view(s) for s in st.before],
        hosts=[_host(h) for h in st.hosts],
        after=[_view(s) for s in st.after],
        blocked_by=_blocking(decision.blocked) if decision is not None else [],
        next_look=decision.wake_at if decision is not None else None,
        observed=snapshot is not None,
    )


def _phase_of(st: Standing) -> str:
    if st.done:
        return Phase.DONE.value
    failed = any(s.failed for s in st.before) or any(
        h.current is not None and h.current.failed for h in st.hosts
    )
    if failed:
        return Phase.STOPPED.value
    return Phase.IN_PROGRESS.value if st.begun else Phase.NOT_STARTED.value


__all__ = ["rollout_plan", "rollout_status"]
