"""A plan shown as ``plan`` shows it: the request, and the plan printed with its exit code.

``plan`` runs it with its own flags; ``drain`` without ``--apply`` runs it to show the
evacuation of the host it put in maintenance (the what-ifs are ``plan``'s alone).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from reconciler.cli import load
from reconciler.cli.common import EXIT_CHANGES, EXIT_OK, history_for, snapshot_for
from reconciler.cli.desired import open_source
from reconciler.cli.requests import ObserveOverrides, SourceRequest
from reconciler.core import late_moves, planner
from reconciler.errors import ConfigError
from reconciler.model.desired import DesiredState
from reconciler.report import plan_patch

# the what-ifs and every format but the one asked for are imported where they are used

PLAN_FORMATS = ("table", "json", "patch", "markdown")


@dataclass(frozen=True)
class WhatIf:
    """Plan a changed cluster without editing it."""

    without_hosts: tuple[str, ...] = ()
    add_host: str | None = None
    like: str | None = None
    """The host whose capacity and labels ``add_host`` copies (given together)."""


@dataclass(frozen=True)
class PlanRequest:
    source: SourceRequest
    observe: ObserveOverrides
    state_dir: Path | None
    snapshot: Path | None = None
    """Plan offline on this saved snapshot instead of observing the hosts."""
    history: Path | None = None
    """Imbalance streaks from this file instead of the status store."""
    now: datetime | None = None
    format: str = "table"
    what_if: WhatIf = field(default_factory=WhatIf)


def _with_power_held(desired: DesiredState, state_dir: Path | None) -> DesiredState:
    """``desired`` with the hosts power saving keeps out (asleep, booting, being emptied, as
    its book in the state directory says) held out, as run plans with them; each named."""
    if not any(h.power is not None for h in desired.cluster.spec.hosts):
        return desired
    from reconciler.adapters.files.power import FilePowerStore
    from reconciler.core.rollout_vms import with_hosts_out

    book = FilePowerStore(desired.cluster.metadata.name, state_dir).load()
    if book is None:
        return desired
    for name, entry in sorted(book.standby.items()):
        print(f"standby (power saving): {name} since {entry.since:%Y-%m-%d %H:%M} ({entry.why})",
              file=sys.stderr)  # fmt: skip
    for name in sorted(book.booting):
        print(f"booting (power saving): {name}", file=sys.stderr)
    for name in sorted(book.emptying):
        print(f"being emptied (power saving): {name}", file=sys.stderr)
    return with_hosts_out(desired, sorted({*book.standby, *book.booting, *book.emptying}))


def show_plan(request: PlanRequest) -> int:
    """Plan, print it in the request's format: EXIT_CHANGES when it moves or edits anything."""
    loaded = open_source(request.source).load()
    desired = loaded.desired
    snapshot = snapshot_for(desired, snapshot=request.snapshot, observe=request.observe)
    if request.snapshot is None:  # a saved snapshot keeps what it was read on
        snapshot = load.windowed(snapshot, desired, request.state_dir, load.Reading.LOOK)
    history, status = history_for(
        desired.cluster.metadata.name, history=request.history, state_dir=request.state_dir
    )
    what_if = request.what_if
    try:
        if what_if.add_host is not None or what_if.without_hosts:
            from reconciler.core import whatif
        if what_if.add_host is not None and what_if.like is not None:
            desired, snapshot = whatif.add_host_like(
                desired, snapshot, what_if.add_host, what_if.like
            )
        if what_if.without_hosts:
            desired = whatif.without_hosts(desired, list(what_if.without_hosts))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    now = request.now or datetime.now(UTC)
    # as apply does: the reconciler's own moves whose record was lost are followed, not reverted
    late = late_moves.unrecorded_moves(
        desired.placement.spec.vms, snapshot, loaded.placement_changed_at
    )
    for r in late:
        print(
            f"note: {r.vm} was moved {r.source} -> {r.target} by the reconciler ({r.detail}); "
            "placement.yaml does not follow yet: the next acting round records it",
            file=sys.stderr,
        )
    desired = late_moves.following(desired, late)
    desired = _with_power_held(desired, request.state_dir)
    result = planner.plan(desired, snapshot, history, now=now)
    if snapshot.load is not None and snapshot.load.forecast is not None:
        from reconciler.core import forecast_plan  # what the forecast changed: a second plan

        result = forecast_plan.ahead_of_time(desired, snapshot, history, result, now=now)
    if request.format == "json":
        from reconciler.report import plan_json

        print(plan_json.plan_json(result), end="")
    elif request.format == "markdown":
        from reconciler.report import plan_markdown

        print(plan_markdown.plan_markdown(result, desired.placement.spec.vms), end="")
    elif request.format == "patch":
        print(plan_patch.plan_patch(desired.placement, result), end="")
    else:
        from reconciler.report import plan_table

        print(plan_table.plan_table(result, desired.placement.spec.vms), end="")
        if status is not None and status.rounds:
            streaks = ", ".join(f"{a}: {n}" for a, n in sorted(status.imbalance_rounds.items()))
            print(
                f"read the status of {status.rounds} earlier round(s) "
                f"(imbalance streak {streaks or 'none'})",
                file=sys.stderr,
            )
    changed = result.has_changes or plan_patch.placement_changes(desired.placement, result)
    return EXIT_CHANGES if changed else EXIT_OK
