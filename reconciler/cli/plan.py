"""``reconciler plan``: the explained migrations that would reach the desired state."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from reconciler.cli.common import (
    EXIT_CHANGES,
    EXIT_OK,
    Subparsers,
    add_now_argument,
    add_observe_overrides,
    add_path_argument,
    add_repo_arguments,
    add_snapshot_argument,
    add_state_dir_argument,
    history_for,
    load_desired,
    placement_changed_at,
    snapshot_for,
    usage_errors_exit_1,
)
from reconciler.core import intents, planner, whatif
from reconciler.errors import ConfigError
from reconciler.report import plan_json, plan_markdown, plan_patch, plan_table

PLAN_FORMATS = ("table", "json", "patch", "markdown")

PLAN_EPILOG = """\
exit codes (like terraform plan -detailed-exitcode):
  0  no changes: nothing to move now or later, placement.yaml stays as it is
  2  changes: the plan has moves or deferred moves, or updates placement.yaml
  1  error: bad arguments (usage errors too, unlike other commands), invalid
     cluster folder, unreadable snapshot or history, a snapshot of another cluster

Without --snapshot the hosts are observed live through libvirt; a host that does not answer
is shown as unknown and nothing moves to or from it. Unsatisfiable items alone do not make
a change: they are printed, and the exit code stays 0.
"""


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "plan",
        help="compute the migrations that reach the desired state",
        description="Compute the migrations that bring the cluster to its desired state,\n"
        "with the reason for each, and print them. Changes nothing.",
        epilog=PLAN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_path_argument(p)
    add_snapshot_argument(p)
    add_state_dir_argument(p)
    add_observe_overrides(p)
    p.add_argument(
        "--history",
        type=Path,
        metavar="FILE",
        help="imbalance streaks for an offline what-if (kind: History, JSON or YAML); "
        "default: the status the last apply or run round left in the state dir",
    )
    p.add_argument(
        "--format",
        choices=PLAN_FORMATS,
        default="table",
        help="table for people (default), json: the whole plan, patch: an RFC 6902 JSON Patch "
        "of the Placement document, markdown: for a pull-request comment",
    )
    whatif = p.add_argument_group("what-if", "plan a changed cluster without editing it")
    whatif.add_argument(
        "--without-host",
        action="append",
        default=[],
        metavar="NAME",
        help="as if this host were gone: its VMs need a place elsewhere (repeatable)",
    )
    whatif.add_argument(
        "--add-host", metavar="NAME", help="as if an empty host NAME were added (with --like)"
    )
    whatif.add_argument(
        "--like", metavar="HOST", help="the host whose capacity and labels --add-host copies"
    )
    add_now_argument(p, "plan", decides="cooldowns and minUptime")
    usage_errors_exit_1(p)
    add_repo_arguments(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    desired = load_desired(args)
    snapshot = snapshot_for(args, desired)
    history, status = history_for(args, desired.cluster.metadata.name)
    # drain runs this with its own arguments: the what-ifs are plan's alone
    add_host, like = getattr(args, "add_host", None), getattr(args, "like", None)
    without: list[str] = getattr(args, "without_host", None) or []
    if (add_host is None) != (like is None):
        raise ConfigError("--add-host NAME and --like HOST go together", hint="give both")
    try:
        if add_host is not None and like is not None:
            desired, snapshot = whatif.add_host_like(desired, snapshot, add_host, like)
        if without:
            desired = whatif.without_hosts(desired, without)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    now: datetime = args.now or datetime.now(UTC)
    # as apply does: the reconciler's own moves whose record was lost are followed, not reverted
    late = intents.unrecorded_moves(
        desired.placement.spec.vms, snapshot, placement_changed_at(args)
    )
    for r in late:
        print(
            f"note: {r.vm} was moved {r.source} -> {r.target} by the reconciler ({r.detail}); "
            "placement.yaml does not follow yet: the next acting round records it",
            file=sys.stderr,
        )
    desired = intents.following(desired, late)
    result = planner.plan(desired, snapshot, history, now=now)
    if args.format == "json":
        print(plan_json.plan_json(result), end="")
    elif args.format == "markdown":
        print(plan_markdown.plan_markdown(result, desired.placement.spec.vms), end="")
    elif args.format == "patch":
        print(plan_patch.plan_patch(desired.placement, result), end="")
    else:
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
