"""What a rollout does next: a pure function of the rollout, the cluster, a snapshot, the
rollout's records and ``now`` (:func:`next_actions`, after Neon's ``NextActions(now)``).

The caller carries out the actions in order, recording each step's start before it runs and
its outcome after, and asks again. The decisions keep these promises:

- at most ``maxUnavailable`` hosts are out at once (drain begun, undrain not done), counting
  hosts of the cluster already unavailable (in maintenance, not answering);
- no command or reboot runs on a host where the snapshot shows a VM running;
- a host is given back only after its ready wait succeeded (undrain is its last step);
- a step that began and has no outcome (the reconciler stopped mid-step) is run again only
  when it is safe to repeat, and only once its timeout has passed since it began (it may still
  be running in the instance that began it); otherwise it is recorded as failed, and the
  rollout stops there, naming the host and the step;
- after a failed step (``onFailure: stop``) or while paused nothing new begins; steps that
  only bring a host back (ready, start, undrain) go on, as they do outside the windows;
- a host is taken out only inside the rollout's windows, in order, and not while a running VM
  on it cannot leave (``immovable.action: block``): the rollout waits there and names it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from reconciler.core.rollout_actions import (
    Action,
    BeginDrain,
    CheckReady,
    Decision,
    Phase,
    Record,
    RunCommand,
    ShutDown,
    StartVms,
)
from reconciler.core.rollout_hosts import rollout_hosts
from reconciler.core.rollout_steps import (
    BRING_BACK,
    HostSteps,
    Standing,
    StepState,
    command_of,
    safe_to_repeat,
    standing,
    step_title,
)
from reconciler.core.rollout_vms import Blocker, host_vms
from reconciler.core.windows import next_window_opening, window_open
from reconciler.model.desired import DesiredState
from reconciler.model.policy import BalancePolicySpec, Mode
from reconciler.model.quantity import format_duration
from reconciler.model.rollout import ImmovableAction, Rollout
from reconciler.model.rollout_progress import (
    DRAIN,
    READY,
    SHUTDOWN,
    START,
    UNDRAIN,
    StepOutcome,
    StepRecord,
)
from reconciler.model.snapshot import Snapshot

DRAIN_LOOK = timedelta(seconds=10)
"""How soon a host being drained is looked at again: its VMs leave in the rounds between."""


@dataclass
class _Work:
    """What one decision collects as it goes."""

    actions: list[Action] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wakes: list[datetime] = field(default_factory=list)
    blocked: list[Blocker] = field(default_factory=list)


def _failed(st: Standing) -> tuple[str | None, str, StepRecord] | None:
    """(host, step, failed record) of the failed step that stops the rollout, if any."""
    for s in st.before:
        if s.failed and s.last is not None:
            return None, s.step, s.last
    for h in st.hosts:
        cur = h.current
        if cur is not None and cur.failed and cur.last is not None:
            return h.host, cur.step, cur.last
    for s in st.after:
        if s.failed and s.last is not None:
            return None, s.step, s.last
    return None


def resume_hint(host: str | None, step: str, failed: StepRecord) -> str:
    """The entry a person adds to ``spec.resume`` to go on after this failure."""
    where = f"host: {host}, " if host is not None else ""
    return (
        f'to go on, add to spec.resume: {{{where}step: {step}, failedAt: "'
        f'{failed.at.isoformat()}", then: retry}} (or then: skip when it was done by hand)'
    )


def _window_open(rollout: Rollout, now: datetime) -> bool:
    windows = rollout.spec.windows
    return windows is None or any(window_open(w, now) for w in windows)


def _command_action(
    rollout: Rollout,
    host: str | None,
    state: StepState,
    now: datetime,
    work: _Work,
    may_begin: bool,
    guard: Callable[[], bool] | None = None,
) -> None:
    """The next action of a step that runs a command (a command, reboot, before, after);
    ``guard`` must hold before the command runs (the host runs no VM)."""
    command = command_of(rollout, state.step)
    title = step_title(host, state.step)
    if command is None:  # pragma: no cover - host_steps and the spec agree
        return
    if state.outcome is None:
        if may_begin and (guard is None or guard()):
            work.actions.append(RunCommand(host, state.step, command))
        return
    if state.outcome is not StepOutcome.STARTED or state.began is None:
        return
    ends = state.began + command.timeout
    if now < ends:
        by = state.last.by if state.last is not None else ""
        work.notes.append(
            f"{title} began at {state.began.isoformat()}{f' by {by}' if by else ''} and has "
            f"no outcome: it may still run there, so it is judged at its timeout "
            f"({ends.isoformat()})"
        )
        work.wakes.append(ends)
        return
    if safe_to_repeat(rollout, state.step):
        if may_begin and (guard is None or guard()):
            work.actions.append(RunCommand(host, state.step, command, again=True))
        return
    work.actions.append(
        Record(
            host,
            state.step,
            StepOutcome.FAILED,
            f"{title} was interrupted (began at {state.began.isoformat()}, no outcome) and is "
            "not safeToRepeat: check the host, then tell the rollout how to go on",
        )
    )


def _drain_action(
    rollout: Rollout,
    desired: DesiredState,
    snapshot: Snapshot,
    h: HostSteps,
    state: StepState,
    now: datetime,
    work: _Work,
) -> None:
    """A drain that began: ended when nothing that must leave is left on the host."""
    if state.began is None:
        return
    reachable = any(s.name == h.host and s.reachable for s in snapshot.hosts)
    vms = host_vms(desired, snapshot, h.host)
    shutting = rollout.spec.immovable.action is ImmovableAction.SHUTDOWN
    ends = state.began + rollout.spec.each_host.drain_timeout
    if reachable and not vms.leaving and (shutting or not vms.stuck):
        stay = [*vms.staying, *(b.vm for b in vms.stuck)]
        detail = f"{h.host} runs no VM that can leave"
        if stay:
            detail += f"; staying: {', '.join(stay)}"
        work.actions.append(Record(h.host, DRAIN, StepOutcome.SUCCEEDED, detail))
        return
    left = [*vms.leaving, *([] if shutting else [b.vm for b in vms.stuck])]
    if now >= ends:
        why = f"still runs {', '.join(left)}" if left else "does not answer"
        work.actions.append(
            Record(
                h.host,
                DRAIN,
                StepOutcome.FAILED,
                f"{h.host} {why} after drainTimeout "
                f"{format_duration(rollout.spec.each_host.drain_timeout)}",
            )
        )
        return
    if not reachable:
        work.notes.append(f"{h.host} is being drained and does not answer")
    else:
        work.notes.append(f"{h.host} is being drained: {', '.join(left)} to leave")
    if not shutting:
        work.blocked.extend(vms.stuck)
    work.wakes.append(min(ends, now + DRAIN_LOOK))


def _host_empty(
    desired: DesiredState, snapshot: Snapshot, host: str, work: _Work, title: str
) -> bool:
    """True when the snapshot shows ``host`` answering with no VM running on it."""
    if not any(s.name == host and s.reachable for s in snapshot.hosts):
        work.notes.append(f"{title} waits: {host} does not answer, so no look shows it empty")
        return False
    running = host_vms(desired, snapshot, host).running
    if running:
        work.notes.append(f"{title} waits: {', '.join(running)} runs on {host}")
        return False
    return True


def _ready_action(
    rollout: Rollout, h: HostSteps, state: StepState, now: datetime, work: _Work
) -> None:
    ready = rollout.spec.each_host.ready
    checks = tuple(ready.checks)
    if state.outcome is None:
        work.actions.append(CheckReady(h.host, checks, begin=True))
        work.wakes.append(now + ready.interval)
        return
    last = state.last
    if state.began is None or last is None:
        return
    if last.outcome is StepOutcome.PASSED:
        settled = last.at + ready.settle
        if now >= settled:
            work.actions.append(CheckReady(h.host, checks, final=True))
        else:
            work.notes.append(f"{h.host} is ready and settles until {settled.isoformat()}")
            work.wakes.append(settled)
        return
    ends = state.began + ready.timeout
    if now >= ends:
        work.actions.append(
            Record(
                h.host,
                READY,
                StepOutcome.FAILED,
                f"{h.host} was not ready within {format_duration(ready.timeout)}",
            )
        )
        return
    work.actions.append(CheckReady(h.host, checks))
    work.wakes.append(min(ends, now + ready.interval))


def _host_action(
    rollout: Rollout,
    desired: DesiredState,
    snapshot: Snapshot,
    h: HostSteps,
    now: datetime,
    work: _Work,
    may_begin: bool,
) -> None:
    """The next action of a host that is out."""
    state = h.current
    if state is None or state.failed:
        return
    step = state.step
    begins = state.outcome is None
    if begins and not may_begin and step not in BRING_BACK:
        work.notes.append(f"{h.host} is out; its next step {step} waits")
        return
    if step == DRAIN:
        _drain_action(rollout, desired, snapshot, h, state, now, work)
    elif step == SHUTDOWN:
        vms = host_vms(desired, snapshot, h.host)
        names = tuple(dict.fromkeys([*state.vms, *(b.vm for b in vms.stuck)]))
        if may_begin or not begins:
            work.actions.append(ShutDown(h.host, names, rollout.spec.immovable.shutdown_timeout))
    elif step == READY:
        _ready_action(rollout, h, state, now, work)
    elif step == START:
        work.actions.append(StartVms(h.host, h.state_of(SHUTDOWN).vms))
    elif step == UNDRAIN:  # recorded when it begins, as every step, then when it ends
        if begins:
            work.actions.append(Record(h.host, UNDRAIN, StepOutcome.STARTED, ""))
        else:
            work.actions.append(
                Record(
                    h.host, UNDRAIN, StepOutcome.SUCCEEDED, f"{h.host} is ready and back in service"
                )
            )
    else:
        title = step_title(h.host, step)
        _command_action(
            rollout,
            h.host,
            state,
            now,
            work,
            may_begin,
            guard=lambda: _host_empty(desired, snapshot, h.host, work, title),
        )


def _unavailable(desired: DesiredState, snapshot: Snapshot) -> dict[str, str]:
    """Hosts of the cluster out of service without the rollout, with why."""
    out = {h.name: "in maintenance" for h in desired.cluster.spec.hosts if h.maintenance}
    for s in snapshot.hosts:
        if not s.reachable:
            out.setdefault(s.name, "not answering")
    return out


def _take_hosts(
    rollout: Rollout,
    desired: DesiredState,
    snapshot: Snapshot,
    st: Standing,
    out: set[str],
    work: _Work,
) -> None:
    """Take the next hosts out, in order, while maxUnavailable allows."""
    limit = rollout.spec.max_unavailable
    unavailable = _unavailable(desired, snapshot)
    shutting = rollout.spec.immovable.action is ImmovableAction.SHUTDOWN
    for h in st.hosts:
        if h.begun:
            continue
        others = {n: why for n, why in unavailable.items() if n not in out and n != h.host}
        if len(out) + len(others) >= limit:
            if others:  # the rollout's own hosts out: the next one simply comes after them
                busy = [*sorted(out), *(f"{n} ({why})" for n, why in sorted(others.items()))]
                work.notes.append(
                    f"{h.host} waits: maxUnavailable {limit} is taken by {', '.join(busy)}"
                )
            return
        if unavailable.get(h.host) == "not answering":
            work.notes.append(f"{h.host} waits: it does not answer")
            return
        stuck = host_vms(desired, snapshot, h.host).stuck
        if stuck and not shutting:
            work.blocked.extend(stuck)
            work.notes.append(
                f"{h.host} is blocked: "
                + "; ".join(b.why for b in stuck)
                + " (immovable.action: block)"
            )
            return
        work.actions.append(BeginDrain(h.host))
        out.add(h.host)


def _next_window(rollout: Rollout, now: datetime) -> datetime | None:
    spec = BalancePolicySpec(mode=Mode.APPLY, windows=rollout.spec.windows)
    return next_window_opening(spec, now)


def _holding(st: Standing, phase: Phase, work: _Work) -> bool:
    """In progress: begun (or beginning now) and not done. A rollout not begun keeps nothing
    out of balance, however long it waits (paused, for a window)."""
    if phase is Phase.DONE:
        return False
    return st.begun or bool(work.actions)


def _keep_out(st: Standing, out: Sequence[str], limit: int) -> tuple[str, ...]:
    pending = [h.host for h in st.hosts if not h.begun]
    return tuple(dict.fromkeys([*out, *pending[:limit]]))


def next_actions(
    rollout: Rollout,
    desired: DesiredState,
    snapshot: Snapshot,
    records: Sequence[StepRecord],
    *,
    now: datetime,
) -> Decision:
    """What ``rollout`` does now, given its ``records`` (oldest first) and ``snapshot``."""
    name = rollout.metadata.name
    hosts = rollout_hosts(rollout, desired.cluster)
    st = standing(rollout, hosts, records)
    spec = rollout.spec
    work = _Work()
    failed = _failed(st)
    out = {h.host for h in st.hosts if h.out}
    recorded_out = tuple(h for h in hosts if h in out)  # not those this decision takes
    may_begin = failed is None and not spec.paused
    for h in st.hosts:
        if h.out:
            _host_action(rollout, desired, snapshot, h, now, work, may_begin)
    befores_done = all(s.done for s in st.before)
    window = _window_open(rollout, now)
    for s in st.before:
        if s.done:
            continue
        if s.outcome is None and not window:
            break
        _command_action(rollout, None, s, now, work, may_begin)
        break
    if may_begin and befores_done and window:
        _take_hosts(rollout, desired, snapshot, st, out, work)
    elif may_begin and not window and any(not h.begun for h in st.hosts):
        opens = _next_window(rollout, now)
        work.notes.append(
            "outside the rollout's windows: no host is taken out"
            + (f" until {opens.isoformat()}" if opens is not None else "")
        )
        if opens is not None:
            work.wakes.append(opens)
    if all(h.done for h in st.hosts) and befores_done:
        for s in st.after:
            if not s.done:
                _command_action(rollout, None, s, now, work, may_begin)
                break
    phase = _phase(st, failed, spec.paused, work)
    notes = list(work.notes)
    if failed is not None:
        host, step, record = failed
        notes[:0] = [
            f"stopped at {step_title(host, step)}: {record.detail}",
            resume_hint(host, step, record),
        ]
    elif spec.paused and phase is not Phase.DONE:
        notes.insert(0, "paused (spec.paused: true): nothing new begins")
    return Decision(
        rollout=name,
        phase=phase,
        actions=tuple(work.actions),
        notes=tuple(notes),
        out=recorded_out,
        keep_out=_keep_out(st, [h for h in hosts if h in out], spec.max_unavailable)
        if _holding(st, phase, work)
        else (),
        blocked=tuple(work.blocked),
        stopped_at=(failed[0], failed[1]) if failed is not None else None,
        wake_at=min(work.wakes, default=None),
        hosts=tuple(hosts),
        standing=st,
    )


def _phase(st: Standing, failed: object, paused: bool, work: _Work) -> Phase:
    if st.done:
        return Phase.DONE
    if failed is not None:
        return Phase.STOPPED
    if paused:
        return Phase.PAUSED
    if work.blocked and not work.actions:
        return Phase.BLOCKED
    if not st.begun:
        return Phase.NOT_STARTED
    return Phase.IN_PROGRESS


def next_actions_all(
    desired: DesiredState,
    snapshot: Snapshot,
    records: Mapping[str, Sequence[StepRecord]],
    *,
    now: datetime,
) -> list[Decision]:
    """The decision of every rollout of the cluster: one acts at a time.

    The rollout in progress (begun, not done; the first by name if several) acts; any other
    waits for it. When none is in progress, the first by name that is not done or paused
    may begin.
    """
    decisions = [
        next_actions(r, desired, snapshot, records.get(r.metadata.name, ()), now=now)
        for r in desired.rollouts
    ]
    active = next(
        (
            d
            for d in decisions
            if d.standing is not None and d.standing.begun and d.phase is not Phase.DONE
        ),
        None,
    )
    if active is None:
        active = next((d for d in decisions if d.phase not in (Phase.DONE, Phase.PAUSED)), None)
    out = []
    for d in decisions:
        if active is None or d is active or d.phase is Phase.DONE:
            out.append(d)
            continue
        out.append(
            Decision(
                rollout=d.rollout,
                phase=Phase.PAUSED if d.phase is Phase.PAUSED else Phase.NOT_STARTED,
                notes=(f"waits for rollout {active.rollout}: one rollout at a time",),
                hosts=d.hosts,
                standing=d.standing,
            )
        )
    return out


__all__ = [
    "Action",
    "BeginDrain",
    "CheckReady",
    "Decision",
    "Phase",
    "Record",
    "RunCommand",
    "ShutDown",
    "StartVms",
    "next_actions",
    "next_actions_all",
    "resume_hint",
]
