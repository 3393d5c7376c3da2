"""``reconciler drain HOST`` and ``undrain HOST``: maintenance as a minimal edit of cluster.yaml.

``drain`` sets ``maintenance: true`` on the host (comments and order kept), shows the
evacuation plan and, with ``--apply``, executes it as ``apply`` does. ``undrain`` clears the
flag and moves nothing back by itself: balance brings VMs back when the policy says so.

With ``--repo`` the edit is a commit on the branch (``Reconciler-Trigger: maintenance``), or
with ``--propose`` a branch ``reconciler/maintenance/<cluster>/<host>`` and its pull request.
Either way the folder as it would be after the edit is validated first: nothing invalid is
ever written.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from reconciler.cli import apply, plan
from reconciler.cli.acting import YES_HELP, add_actor_argument, add_hold_arguments
from reconciler.cli.common import (
    DEFAULT_REPO_FOLDER,
    EXIT_OK,
    Subparsers,
    add_forge_arguments,
    add_observe_overrides,
    add_repo_arguments,
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
        p.add_argument(
            "path",
            nargs="?",
            type=Path,
            metavar="PATH",
            help="cluster folder (default: cluster-state/, or .lab/cluster-state when a lab is "
            "up)",
        )
        add_repo_arguments(p)
        p.add_argument(
            "--propose",
            action="store_true",
            help="with --repo: push the edit to reconciler/maintenance/<cluster>/<host> and open "
            "its pull request instead of committing on --branch",
        )
        add_forge_arguments(p)
        add_actor_argument(p)
    d.add_argument("--apply", action="store_true", help="execute the evacuation")
    d.add_argument("--yes", action="store_true", help=YES_HELP)
    d.add_argument("--dry-run", action="store_true", help=argparse.SUPPRESS)
    d.add_argument("--format", default="text", help=argparse.SUPPRESS)
    add_state_dir_argument(d)
    add_observe_overrides(d)
    add_hold_arguments(d)
    d.set_defaults(handler=run_drain, trigger="maintenance", audit_branch=None)
    undrain.set_defaults(handler=run_undrain)


def _set(args: argparse.Namespace, maintenance: bool) -> bool:
    """Edit cluster.yaml, after checking that the edited folder is still valid."""
    if args.repo:
        return _set_in_repo(args, maintenance)
    if args.propose:
        raise ConfigError("--propose needs --repo URL", hint="pass the state repository's URL")
    from reconciler.adapters.files.text import rewrite_file

    folder = cluster_folder(args.path)
    path = folder / "cluster.yaml"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(
            f"cannot read {path}: {err.strerror}", hint="give the cluster folder as PATH"
        ) from err
    edited = _edited(folder, text, args.host, maintenance)
    if edited != text:
        _refuse_if_invalid(folder, path.name, edited, args.host, maintenance)
        rewrite_file(path, lambda _: edited)
    state = "in maintenance" if maintenance else "out of maintenance"
    print(f"{args.host} is {state}" + ("" if edited != text else " already"), file=sys.stderr)
    return edited != text


def _edited(folder: Path, text: str, host: str, maintenance: bool) -> str:
    from reconciler.config.yaml_edit import set_maintenance

    try:
        return set_maintenance(text, host, maintenance, file=str(folder / "cluster.yaml"))
    except ConfigError as err:
        names = _host_names(folder)
        raise ConfigError(
            f"host {host!r} is not in the Cluster of {folder}",
            hint=f"one of: {', '.join(names)}" if names else err.hint,
        ) from err


def _set_in_repo(args: argparse.Namespace, maintenance: bool) -> bool:
    """The edit as a commit on --branch, or as a proposal branch and its pull request."""
    from reconciler.adapters.git.repo import GitStateRepo
    from reconciler.engine.audit import ACTOR_TRAILER, TRIGGER_TRAILER
    from reconciler.errors import PushRejected

    repo = GitStateRepo(args.repo, cache_dir=args.cache_dir)
    rel = str(args.path) if args.path is not None else DEFAULT_REPO_FOLDER
    verb = "drain" if maintenance else "undrain"
    for _ in range(5):
        repo.fetch()
        head = repo.head(args.branch)
        if head is None:
            raise ConfigError(
                f"{repo.display_url} has no branch {args.branch!r}", hint="pass --branch"
            )
        folder = repo.checkout(head) / rel
        text = repo.show(head, f"{rel}/cluster.yaml")
        if text is None:
            raise ConfigError(
                f"{repo.display_url} has no {rel}/cluster.yaml at {args.branch}",
                hint="pass the cluster folder inside the repository as PATH",
            )
        edited = _edited(folder, text, args.host, maintenance)
        state = "in maintenance" if maintenance else "out of maintenance"
        if edited == text:
            print(f"{args.host} is {state} already", file=sys.stderr)
            return False
        _refuse_if_invalid(folder, "cluster.yaml", edited, args.host, maintenance)
        cluster = load_desired(folder).cluster.metadata.name
        message = f"Maintenance: {verb} {args.host} of cluster {cluster}"
        trailers = {TRIGGER_TRAILER: "maintenance", ACTOR_TRAILER: args.actor}
        commit = repo.commit_files(
            parent=head, files={f"{rel}/cluster.yaml": edited}, message=message, trailers=trailers
        )
        branch = f"reconciler/maintenance/{cluster}/{args.host}" if args.propose else args.branch
        try:
            repo.push(branch, commit, expected=repo.head(branch) if args.propose else head)
        except PushRejected:
            continue  # someone pushed first: edit their head again
        if args.propose:
            _open_proposal(args, branch, message)
            print(f"{args.host}: {verb} proposed on {branch} ({commit[:12]})", file=sys.stderr)
        else:
            print(f"{args.host} is {state} ({commit[:12]} on {args.branch})", file=sys.stderr)
        return True
    raise PushRejected(f"{args.branch} kept moving: the {verb} was not recorded")


def _open_proposal(args: argparse.Namespace, branch: str, message: str) -> None:
    from reconciler.cli.propose import open_forge_of

    forge = open_forge_of(args)
    if forge is None:
        return
    try:
        if forge.find_open(branch) is None:
            forge.create(head=branch, base=args.branch, title=message, body=message)
    finally:
        forge.disconnect()


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
            hint=f"first change the rules that need {host} (pins, required host rules)"
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
