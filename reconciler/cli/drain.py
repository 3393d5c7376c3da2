"""``reconciler drain HOST`` and ``undrain HOST``: maintenance as a minimal edit of cluster.yaml.

``drain`` sets ``maintenance: true`` on the host (comments and order kept), shows the
evacuation plan and, with ``--apply``, executes it as ``apply`` does. ``undrain`` clears the
flag and moves nothing back by itself: balance brings VMs back when the policy says so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reconciler.cli import apply, plan
from reconciler.cli.common import (
    EXIT_OK,
    Subparsers,
    add_observe_overrides,
    add_state_dir_argument,
    cluster_folder,
)
from reconciler.config import load_desired
from reconciler.errors import ConfigError


def register(sub: Subparsers) -> None:
    d = sub.add_parser(
        "drain",
        help="put a host in maintenance (cluster.yaml) and show or apply its evacuation",
        description="Set maintenance: true on HOST in cluster.yaml with a minimal edit, show the "
        "plan that empties it, and with --apply execute it, round after round within batch and "
        "every limit, until the host is empty or a round moves nothing (exit codes as apply; "
        "without --apply as plan: 0 nothing to move, 2 moves planned).",
    )
    undrain = sub.add_parser(
        "undrain",
        help="take a host out of maintenance; moves nothing back by itself",
        description="Clear maintenance on HOST in cluster.yaml with a minimal edit.",
    )
    for p in (d, undrain):
        p.add_argument("host", metavar="HOST")
        p.add_argument("path", nargs="?", type=Path, metavar="PATH", help="cluster folder")
    d.add_argument("--apply", action="store_true", help="execute the evacuation")
    d.add_argument("--yes", action="store_true", help="with --apply: do not ask")
    d.add_argument("--dry-run", action="store_true", help=argparse.SUPPRESS)
    d.add_argument("--format", default="text", help=argparse.SUPPRESS)
    add_state_dir_argument(d)
    add_observe_overrides(d)
    d.set_defaults(handler=run_drain)
    undrain.set_defaults(handler=run_undrain)


def _set(args: argparse.Namespace, maintenance: bool) -> bool:
    from reconciler.adapters.yaml_edit import write_maintenance

    folder = cluster_folder(args.path)
    desired = load_desired(folder)
    names = [h.name for h in desired.cluster.spec.hosts]
    if args.host not in names:
        raise ConfigError(
            f"host {args.host!r} is not in cluster {desired.cluster.metadata.name!r}",
            hint=f"one of: {', '.join(names)}",
        )
    changed = write_maintenance(folder / "cluster.yaml", args.host, maintenance)
    state = "in maintenance" if maintenance else "out of maintenance"
    print(f"{args.host} is {state}" + ("" if changed else " already"), file=sys.stderr)
    return changed


MAX_DRAIN_ROUNDS = 50
"""``drain --apply`` repeats rounds (each within batch and every limit) until the host is
empty or a round moves nothing; this bounds it."""


def run_drain(args: argparse.Namespace) -> int:
    _set(args, True)
    if args.apply:
        args.format = "text"
        code = EXIT_OK
        for _ in range(MAX_DRAIN_ROUNDS):
            code, moved, left = apply.run_once(args, host=args.host)
            if code != EXIT_OK or not moved or not left:
                break
            print(f"{args.host} still runs {left} VM(s): next round", file=sys.stderr)
        return code
    args.snapshot, args.history, args.now, args.format = None, None, None, "table"
    return plan.run(args)


def run_undrain(args: argparse.Namespace) -> int:
    _set(args, False)
    return EXIT_OK
