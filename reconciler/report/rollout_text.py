"""A rollout's plan and status as plain text for people (and for a pull-request comment)."""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.model.quantity import format_size
from reconciler.model.rollout_report import (
    BlockingVm,
    RolloutHost,
    RolloutPlan,
    RolloutStatus,
    StepView,
)


def _hosts_text(count: int) -> str:
    return f"{count} host" + ("" if count == 1 else "s")


def _at_once(n: int) -> str:
    return "one at a time" if n == 1 else f"up to {n} at a time"


def _blockers(lines: list[str], blockers: Sequence[BlockingVm], indent: str) -> None:
    for b in blockers:
        lines.append(f"{indent}blocked: {b.why} (immovable.action: block)")


def plan_text(plan: RolloutPlan) -> str:
    """The order, each host's evacuation, what blocks."""
    lines = [
        f"rollout {plan.rollout} of cluster {plan.cluster}: {_hosts_text(len(plan.hosts))}, "
        f"{_at_once(plan.max_unavailable)}" + (" (paused)" if plan.paused else "")
    ]
    if plan.before:
        lines.append(f"first: {', '.join(plan.before)}")
    lines.append(f"each host: {', '.join(plan.host_steps)}")
    for i, host in enumerate(plan.hosts, 1):
        moves = host.evacuation
        leave = f"{len(moves)} VM{'s' * (len(moves) != 1)} leave" if moves else "no VM to move"
        lines.append(f"{i}. {host.host}: {leave}")
        for m in moves:
            lines.append(f"     {m.vm}: {m.source} -> {m.target} ({format_size(m.memory)})")
        _blockers(lines, host.blocked_by, "   ")
        for b in host.shut_down:
            lines.append(f"   shut down for its turn, started again after: {b.why}")
        for p in host.problems:
            lines.append(f"   cannot leave now: {p.message}")
    if plan.after:
        lines.append(f"last: {', '.join(plan.after)}")
    blocked = [h.host for h in plan.hosts if h.blocked_by or h.problems]
    if blocked:
        lines.append(f"blocked at {', '.join(blocked)}: the rollout waits there until it can go")
    else:
        lines.append("nothing blocks as the cluster is now")
    return "\n".join(lines) + "\n"


def _step(view: StepView) -> str:
    if view.outcome is None or view.at is None:
        return f"{view.step} not begun"
    text = f"{view.step} {view.outcome} {view.at.isoformat()}"
    if view.by:
        text += f" by {view.by}"
    return text + (f": {view.detail}" if view.detail else "")


def _host_line(host: RolloutHost) -> str:
    last = host.steps[-1] if host.steps else None
    where = str(host.state)
    if last is not None:
        where += f"  {_step(last)}"
    return f"  {host.host:<16} {where}"


def status_text(status: RolloutStatus) -> str:
    """Where a rollout stands: the phase, why it waits, every host, the steps before and after."""
    out = len(status.out)
    lines = [
        f"rollout {status.rollout} of cluster {status.cluster}: {status.phase}"
        + (f", {out} host{'s' * (out != 1)} out ({', '.join(status.out)})" if out else "")
    ]
    if not status.observed:
        lines.append("  (the hosts could not be looked at: from the records alone)")
    lines.extend(f"  {note}" for note in status.notes)
    lines.extend(f"  {_step(view)}" for view in status.before)
    lines.append("hosts:")
    lines.extend(_host_line(h) for h in status.hosts)
    lines.extend(f"  {_step(view)}" for view in status.after)
    if status.next_look is not None and status.phase not in ("Done", "Stopped"):
        lines.append(f"acts again by {status.next_look.isoformat()} at the latest")
    return "\n".join(lines) + "\n"


__all__ = ["plan_text", "status_text"]
