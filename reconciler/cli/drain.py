"""``reconciler drain HOST`` and ``undrain HOST``: maintenance as a minimal edit of cluster.yaml.

``drain`` sets ``maintenance: true`` on the host (comments and order kept), shows the
evacuation plan and, with ``--apply``, executes it as ``apply`` does. ``undrain`` clears the
flag and moves nothing back by itself: balance brings VMs back when the policy says so.

With ``--repo`` the edit is a commit on the branch (``Reconciler-Trigger: maintenance``), or
with ``--propose`` a branch ``reconciler/maintenance/<cluster>/<host>`` and its pull request.
Either way the folder as it would be after the edit is validated first: nothing invalid is
ever written.

Exit codes: as ``plan`` without ``--apply`` (0 nothing to move, 2 moves planned), as ``apply``
with it; usage errors exit 1 (2 would read as "moves planned"). ``drain --apply`` without
``--yes`` and off a terminal is refused before the edit: it changes nothing.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from reconciler.cli import requests
from reconciler.cli.acting import YES_HELP, add_actor_argument, add_hold_arguments
from reconciler.cli.applying import Applying
from reconciler.cli.common import (
    EXIT_OK,
    Subparsers,
    add_forge_arguments,
    add_observe_overrides,
    add_repo_arguments,
    add_state_dir_argument,
    cluster_folder,
    open_forge_of,
    usage_errors_exit_1,
)
from reconciler.cli.planning import PlanRequest, show_plan
from reconciler.config import Severity, format_finding, load_desired, validate_folder
from reconciler.errors import ConfigError


@dataclass(frozen=True)
class MaintenanceEdit:
    """The edit of ``drain`` and ``undrain``: where, which host, committed or proposed."""

    host: str
    source: requests.SourceRequest
    propose: bool
    forge: requests.ForgeRequest


@dataclass(frozen=True)
class DrainRequest:
    edit: MaintenanceEdit
    evacuation: requests.ActRequest | PlanRequest
    """With --apply, executed round after round; without it, its plan shown."""


def register(sub: Subparsers) -> None:
    d = sub.add_parser(
        "drain",
        help="put a host in maintenance (cluster.yaml) and show or apply its evacuation",
        description="Set maintenance: true on HOST in cluster.yaml with a minimal edit, show the "
        "plan that empties it, and with --apply execute it, round after round within batch and "
        "every limit, until the host is empty or a round moves nothing (exit codes as apply; "
        "without --apply as plan: 0 nothing to move, 2 moves planned, 1 error or usage error).",
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
    add_state_dir_argument(d)
    add_observe_overrides(d)
    add_hold_arguments(d)
    usage_errors_exit_1(d)
    d.set_defaults(handler=run_drain)
    undrain.set_defaults(handler=run_undrain)


def edit_request(args: argparse.Namespace) -> MaintenanceEdit:
    source = requests.source_of(args, actor=True)
    if args.propose and not isinstance(source, requests.RepoRequest):
        raise ConfigError("--propose needs --repo URL", hint="pass the state repository's URL")
    return MaintenanceEdit(args.host, source, args.propose, requests.forge_request_of(args))


def request(args: argparse.Namespace) -> DrainRequest:
    """Refused here, before the edit, when --apply could not be confirmed."""
    edit = edit_request(args)
    observe = requests.observe_of(args)
    if not args.apply:
        return DrainRequest(
            edit, PlanRequest(source=edit.source, observe=observe, state_dir=args.state_dir)
        )
    acting = requests.ActRequest(
        command="drain",
        source=edit.source,
        hold=requests.hold_of(args, edit.source, waits=True),
        observe=observe,
        state_dir=args.state_dir,
        confirmation=requests.confirmation_of(args),
        trigger="maintenance",
    )
    return DrainRequest(edit, acting)


def _set(edit: MaintenanceEdit, maintenance: bool) -> bool:
    """Edit cluster.yaml, after checking that the edited folder is still valid."""
    if isinstance(edit.source, requests.RepoRequest):
        return _set_in_repo(edit, edit.source, maintenance)
    from reconciler.adapters.files.text import rewrite_file

    folder = cluster_folder(edit.source.path)
    path = folder / "cluster.yaml"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(
            f"cannot read {path}: {err.strerror}", hint="give the cluster folder as PATH"
        ) from err
    edited = _edited(folder, text, edit.host, maintenance)
    if edited != text:
        _refuse_if_invalid(folder, path.name, edited, edit.host, maintenance)
        rewrite_file(path, lambda _: edited)
    state = "in maintenance" if maintenance else "out of maintenance"
    print(f"{edit.host} is {state}" + ("" if edited != text else " already"), file=sys.stderr)
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


def _set_in_repo(edit: MaintenanceEdit, at: requests.RepoRequest, maintenance: bool) -> bool:
    """The edit as a commit on the branch, or as a proposal branch and its pull request."""
    from reconciler.adapters.git.repo import GitStateRepo
    from reconciler.engine.audit import ACTOR_TRAILER, TRIGGER_TRAILER
    from reconciler.engine.transaction import (
        Change,
        checkout_commit,
        commit_on_branch,
        no_branch,
        repo_folder,
    )

    repo = GitStateRepo(at.url, cache_dir=at.cache_dir)
    rel, host = repo_folder(at.path), edit.host
    verb = "drain" if maintenance else "undrain"
    state = "in maintenance" if maintenance else "out of maintenance"

    def change(head: str) -> Change[str] | None:
        text = repo.show(head, f"{rel}/cluster.yaml")
        if text is None:
            raise ConfigError(
                f"{repo.display_url} has no {rel}/cluster.yaml at {at.branch}",
                hint="pass the cluster folder inside the repository as PATH",
            )
        folder = checkout_commit(repo, head, rel, display=repo.display_url, at=at.branch).folder
        edited = _edited(folder, text, host, maintenance)
        if edited == text:
            return None
        _refuse_if_invalid(folder, "cluster.yaml", edited, host, maintenance)
        cluster = load_desired(folder).cluster.metadata.name
        message = f"Maintenance: {verb} {host} of cluster {cluster}"
        trailers = {
            TRIGGER_TRAILER: "maintenance",
            ACTOR_TRAILER: at.actor or requests.default_actor(),
        }
        branch = f"reconciler/maintenance/{cluster}/{host}" if edit.propose else None
        return Change({f"{rel}/cluster.yaml": edited}, message, trailers, message, branch)

    done = commit_on_branch(
        repo,
        at.branch,
        change,
        what=f"record the {verb} of {host}",
        hint="others kept pushing to the branch; run the command again",
        absent=lambda: no_branch(repo.display_url, at.branch),
    )
    if done is None:
        print(f"{host} is {state} already", file=sys.stderr)
        return False
    if done.branch != at.branch:
        _open_proposal(edit.forge, at, done.branch, done.value)
        print(f"{host}: {verb} proposed on {done.branch} ({done.commit[:12]})", file=sys.stderr)
    else:
        print(f"{host} is {state} ({done.commit[:12]} on {at.branch})", file=sys.stderr)
    return True


def _open_proposal(
    forge_request: requests.ForgeRequest, at: requests.RepoRequest, branch: str, message: str
) -> None:
    forge = open_forge_of(forge_request, at.url)
    if forge is None:
        return
    try:
        if forge.find_open(branch) is None:
            forge.create(head=branch, base=at.branch, title=message, body=message)
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
    return drain(request(args))


def drain(request: DrainRequest) -> int:
    """The edit, then the evacuation shown (as plan) or executed round after round (as apply)."""
    host = request.edit.host
    _set(request.edit, True)
    if isinstance(request.evacuation, PlanRequest):
        return show_plan(request.evacuation)
    applying = Applying(request.evacuation, json_output=False)
    code = EXIT_OK
    for _ in range(MAX_DRAIN_ROUNDS):
        done = applying.once(host)
        code = done.code
        if code != EXIT_OK or not done.moved or not done.left:
            break
        print(f"{host} still runs {done.left} VM(s): next round", file=sys.stderr)
    return code


def run_undrain(args: argparse.Namespace) -> int:
    _set(edit_request(args), False)
    return EXIT_OK
