"""``reconciler plan``: the explained migrations that would reach the desired state."""

from __future__ import annotations

import argparse
from pathlib import Path

from reconciler.cli import requests
from reconciler.cli.common import (
    Subparsers,
    add_now_argument,
    add_observe_overrides,
    add_path_argument,
    add_repo_arguments,
    add_snapshot_argument,
    add_state_dir_argument,
    usage_errors_exit_1,
)
from reconciler.cli.planning import PLAN_FORMATS, PlanRequest, WhatIf, show_plan
from reconciler.errors import ConfigError

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


def request(args: argparse.Namespace) -> PlanRequest:
    if (args.add_host is None) != (args.like is None):
        raise ConfigError("--add-host NAME and --like HOST go together", hint="give both")
    return PlanRequest(
        source=requests.source_of(args),
        observe=requests.observe_of(args),
        state_dir=args.state_dir,
        snapshot=args.snapshot,
        history=args.history,
        now=args.now,
        format=args.format,
        what_if=WhatIf(tuple(args.without_host), args.add_host, args.like),
    )


def run(args: argparse.Namespace) -> int:
    return show_plan(request(args))
