"""``reconciler drain HOST`` and ``undrain HOST``: maintenance as a minimal edit of cluster.yaml.

``drain`` sets ``maintenance: true`` on the host (comments and order kept), shows the
evacuation plan and, with ``--apply``, executes it as ``apply`` does. ``undrain`` clears the
flag and moves nothing back by itself: balance brings VMs back when the policy says so.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from reconciler.cli import apply, plan
from reconciler.cli.acting import add_hold_arguments, default_actor
from reconciler.cli.common import (
    EXIT_OK,
    Subparsers,
    add_observe_overrides,
    add_state_dir_argument,
    cluster_folder,
)
from reconciler.config import Severity, format_finding, load_desired, validate_folder
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
    add_hold_arguments(d)
    d.set_defaults(
        handler=run_drain,
        repo=None,
        trigger="maintenance",
        actor=default_actor(),
        audit_branch=None,
    )
    undrain.set_defaults(handler=run_undrain)


def _set(args: argparse.Namespace, maintenance: bool) -> bool:
    """Edit cluster.yaml, after checking that the edited folder is still valid."""
    from reconciler.adapters.text_file import rewrite_file
    from reconciler.config.yaml_edit import set_maintenance

    folder = cluster_folder(args.path)
    path = folder / "cluster.yaml"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(
            f"cannot read {path}: {err.strerror}", hint="give the cluster folder as PATH"
        ) from err
    try:
        edited = set_maintenance(text, args.host, maintenance, file=str(path))
    except ConfigError as err:
        names = _host_names(folder)
        raise ConfigError(
            f"host {args.host!r} is not in the Cluster of {folder}",
            hint=f"one of: {', '.join(names)}" if names else err.hint,
        ) from err
    if edited != text:
        _refuse_if_invalid(folder, path.name, edited, args.host, maintenance)
        rewrite_file(path, lambda _: edited)
    state = "in maintenance" if maintenance else "out of maintenance"
    print(f"{args.host} is {state}" + ("" if edited != text else " already"), file=sys.stderr)
    return edited != text


def _host_names(folder: Path) -> list[str]:
    try:
        return [h.name for h in load_desired(folder).cluster.spec.hosts]
    except ConfigError:
        return []


def _refuse_if_invalid(folder: Path, name: str, edited: str, host: str, maintenance: bool) -> None:
    """Validate the folder as it would be after the edit; ConfigError naming every error."""
    with tempfile.TemporaryDirectory(prefix="reconciler-drain-") as tmp:
        copy = Path(tmp)
        for f in folder.iterdir():
            if f.is_file() and f.suffix in (".yaml", ".yml"):
                shutil.copyfile(f, copy / f.name)
        (copy / name).write_text(edited, encoding="utf-8")
        report, _ = validate_folder(copy)
        errors = [
            format_finding(f).replace(str(copy), str(folder))
            for f in report.findings
            if f.severity is Severity.ERROR
        ]
    if errors:
        verb = "drain" if maintenance else "undrain"
        raise ConfigError(
            f"{verb} {host} would leave {folder} invalid, so nothing was written:\n  "
            + "\n  ".join(errors),
            hint=f"remove or move the pins to {host} first"
            if maintenance
            else "fix these errors in the folder first",
        )


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
