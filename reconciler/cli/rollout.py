"""``reconciler rollout plan NAME`` and ``rollout status NAME``: a rollout before and while it runs.

Both only look: ``plan`` shows the order of the hosts, where each host's VMs would go if it
were taken out now and what blocks (a running VM that cannot leave, no room);
``status`` shows where the rollout stands from its records (the state directory, or the state
repository with ``--repo``) and a look at the hosts. ``run`` carries rollouts out.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

from reconciler.cli import requests
from reconciler.cli.common import (
    EXIT_OK,
    Subparsers,
    add_now_argument,
    add_observe_overrides,
    add_path_argument,
    add_repo_arguments,
    add_snapshot_argument,
    add_state_dir_argument,
    history_for,
    snapshot_for,
    usage_errors_exit_1,
)
from reconciler.cli.desired import open_source, rollout_records
from reconciler.cli.requests import ObserveOverrides, SourceRequest
from reconciler.errors import ConfigError, ReconcilerError
from reconciler.model.desired import DesiredState
from reconciler.model.rollout import Rollout
from reconciler.model.snapshot import Snapshot

if TYPE_CHECKING:  # the engine is imported when the command runs, not when it is parsed
    from reconciler.engine.sources import FolderSource, RepoSource

EXIT_LOOK: Final = 3
"""A person must look: a host is blocked (plan, status) or the rollout stopped (status)."""

EPILOG: Final = """\
exit codes:
  0  plan: nothing blocks; status: not started, in progress, paused or done
  3  plan: a host is blocked (a running VM that cannot leave, no room for its VMs);
     status: blocked or stopped at a failed step (the host and step are named)
  1  error: bad arguments, invalid cluster folder, no rollout of that name

Without --snapshot the hosts are observed live through libvirt. status reads the rollout's
records from --state-dir, or with --repo from <cluster folder>/rollouts/<name>.progress.json
on the branch; when no host can be observed it shows the records alone.
"""


@dataclass(frozen=True)
class RolloutRequest:
    """What ``rollout plan`` or ``rollout status`` was asked."""

    action: str
    name: str
    source: SourceRequest
    observe: ObserveOverrides
    state_dir: Path | None = None
    snapshot: Path | None = None
    now: datetime | None = None
    format: str = "text"


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "rollout",
        help="show a rollout's plan, or where it stands (run carries it out)",
        description="Rolling host maintenance (rollouts/<name>.yaml): see docs/rollouts.md.",
    )
    actions = p.add_subparsers(dest="rollout_action", required=True, metavar="ACTION")
    for action, text in (
        (
            "plan",
            "the order of the hosts, where each host's VMs would go if it were taken out now, "
            "and what blocks; changes nothing",
        ),
        ("status", "where the rollout stands: its records and a look at the hosts"),
    ):
        a = actions.add_parser(
            action,
            help=text,
            description=f"Show {text}.",
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        a.add_argument("name", metavar="NAME", help="the rollout (rollouts/NAME.yaml)")
        add_path_argument(a)
        add_snapshot_argument(a)
        add_state_dir_argument(a)
        add_observe_overrides(a)
        add_repo_arguments(a)
        add_now_argument(a, action, decides="windows and timeouts")
        a.add_argument(
            "--format", choices=("text", "json"), default="text", help="text (default) or json"
        )
        usage_errors_exit_1(a)
        a.set_defaults(handler=run)


def request(args: argparse.Namespace) -> RolloutRequest:
    return RolloutRequest(
        action=args.rollout_action,
        name=args.name,
        source=requests.source_of(args),
        observe=requests.observe_of(args),
        state_dir=args.state_dir,
        snapshot=args.snapshot,
        now=args.now,
        format=args.format,
    )


def _rollout(desired: DesiredState, name: str) -> Rollout:
    for rollout in desired.rollouts:
        if rollout.metadata.name == name:
            return rollout
    names = ", ".join(r.metadata.name for r in desired.rollouts) or "none"
    raise ConfigError(
        f"cluster {desired.cluster.metadata.name!r} has no rollout {name!r} (its rollouts: "
        f"{names})",
        hint=f"write rollouts/{name}.yaml in the cluster folder; see docs/rollouts.md",
    )


def run(args: argparse.Namespace) -> int:
    asked = request(args)
    source = open_source(asked.source)
    desired = source.load().desired
    rollout = _rollout(desired, asked.name)
    now: datetime = asked.now or datetime.now(UTC)
    if asked.action == "plan":
        return _plan(asked, desired, rollout, now)
    return _status(asked, source, desired, rollout, now)


def _plan(request: RolloutRequest, desired: DesiredState, rollout: Rollout, now: datetime) -> int:
    from reconciler.core.rollout_report import rollout_plan
    from reconciler.report.rollout_text import plan_text

    snapshot = snapshot_for(desired, snapshot=request.snapshot, observe=request.observe)
    history, _ = history_for(
        desired.cluster.metadata.name, history=None, state_dir=request.state_dir
    )
    plan = rollout_plan(rollout, desired, snapshot, history, now=now)
    if request.format == "json":
        print(plan.model_dump_json(by_alias=True, indent=2))
    else:
        print(plan_text(plan), end="")
    return EXIT_LOOK if plan.blocked else EXIT_OK


def _status(
    request: RolloutRequest,
    source: FolderSource | RepoSource,
    desired: DesiredState,
    rollout: Rollout,
    now: datetime,
) -> int:
    from reconciler.core.rollout import next_actions_all
    from reconciler.core.rollout_report import rollout_status
    from reconciler.report.rollout_text import status_text

    store = rollout_records(source, desired.cluster.metadata.name, request.state_dir)
    records = {r.metadata.name: store.load(r.metadata.name).records for r in desired.rollouts}
    snapshot: Snapshot | None
    try:
        snapshot = snapshot_for(desired, snapshot=request.snapshot, observe=request.observe)
    except ReconcilerError as err:
        if request.snapshot is not None:
            raise
        print(f"note: the hosts could not be looked at: {err}", file=sys.stderr)
        snapshot = None
    decision = None
    if snapshot is not None:
        decisions = next_actions_all(desired, snapshot, records, now=now)
        decision = next(d for d in decisions if d.rollout == request.name)
    status = rollout_status(
        rollout, desired, snapshot, records[request.name], now=now, decision=decision
    )
    if request.format == "json":
        print(status.model_dump_json(by_alias=True, indent=2))
    else:
        print(status_text(status), end="")
    return EXIT_LOOK if status.phase in ("Blocked", "Stopped") else EXIT_OK


__all__ = ["RolloutRequest", "register", "request", "run"]
