"""``reconciler validate``: check cluster folders against the models and the rules."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from reconciler import config
from reconciler.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    Subparsers,
    add_forge_arguments,
    add_repo_arguments,
    checkout_state,
    forge_of,
)
from reconciler.cli.requests import ForgeRequest, RepoRequest, forge_request_of
from reconciler.errors import ConfigError, ReconcilerError

TOKEN_ENV = "RECONCILER_FORGE_TOKEN"
DEFAULT_PATH = Path("cluster-state/")
STATUS_CONTEXT = "reconciler/validate"


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "validate",
        help="check cluster-state folders against models and rules",
        description="Check cluster-state files and folders; a folder of cluster folders checks "
        "each cluster. Exit 0 when valid (warnings allowed), 1 on any error, 2 on usage errors.",
    )
    p.add_argument(
        "paths",
        nargs="*",
        type=Path,
        default=[DEFAULT_PATH],
        metavar="PATH",
        help="cluster folders, folders of clusters, or single files (default: cluster-state/)",
    )
    p.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: one line per finding and a summary per cluster; json: an array of findings",
    )
    add_repo_arguments(p)
    status = p.add_argument_group(
        "commit status", "post the result on a commit of a forge (token in $RECONCILER_FORGE_TOKEN)"
    )
    status.add_argument("--post-status", metavar="SHA", help="the commit to post the result on")
    add_forge_arguments(status)
    status.add_argument("--status-url", metavar="URL", help="where the status links to")
    p.set_defaults(handler=_run_validate)


@dataclass(frozen=True)
class StatusPost:
    """--post-status: the result as a commit status on ``commit``."""

    commit: str
    forge: ForgeRequest
    url: str | None


@dataclass(frozen=True)
class ValidateRequest:
    paths: tuple[Path, ...]
    """Folders and files as given, or with --repo the cluster folders in the repository."""
    repo: tuple[RepoRequest, ...]
    """With --repo: each of ``paths`` at the head of the branch."""
    format: str
    status: StatusPost | None


def request(args: argparse.Namespace) -> ValidateRequest:
    paths: tuple[Path, ...] = tuple(args.paths)
    repo: tuple[RepoRequest, ...] = ()
    if args.repo:
        given = [str(p) for p in paths] if paths != (DEFAULT_PATH,) else ["cluster-state"]
        repo = tuple(
            RepoRequest(url=args.repo, branch=args.branch, path=rel, cache_dir=args.cache_dir)
            for rel in given
        )
    status = None
    if args.post_status:
        status = StatusPost(args.post_status, forge_request_of(args), args.status_url)
    return ValidateRequest(paths, repo, args.format, status)


def _paths(request: ValidateRequest) -> list[Path]:
    """The paths given; with --repo, inside the repository's work tree at the branch head."""
    if not request.repo:
        return list(request.paths)
    return [checkout_state(at).folder for at in request.repo]


def _post_status(post: StatusPost, valid: bool, errors: int, warnings: int) -> None:
    """The result as a commit status, e.g. on the pull request's head commit.

    A status that cannot be posted (no token, as in a fork's pull request; a forge that refuses
    or does not answer) is a warning on stderr: the exit code stays the validation's own.
    """
    import os

    from reconciler.adapters.forges.clients import open_forge

    token = os.environ.get(TOKEN_ENV)
    try:
        forge_name = forge_of(post.forge.name)
        if forge_name == "none":
            raise ConfigError(
                "no forge is chosen (--forge none, or no token)",
                hint=f"pass --forge and export {TOKEN_ENV}",
            )
        project = post.forge.project
        if not token or not project:
            missing = " and ".join(
                what
                for what, absent in (
                    ("--forge-project", not project),
                    (f"a token in ${TOKEN_ENV}", not token),
                )
                if absent
            )
            raise ConfigError(
                f"it needs {missing}",
                hint="in GitHub Actions: RECONCILER_FORGE_TOKEN: ${{ github.token }} with "
                "permissions: statuses: write (pull requests from forks get no such token)",
            )
        forge = open_forge(forge_name, project=project, token=token, api_url=post.forge.url)
        try:
            forge.set_status(
                post.commit,
                state="success" if valid else "failure",
                context=STATUS_CONTEXT,
                description=f"{errors} error(s), {warnings} warning(s)",
                url=post.url,
            )
        finally:
            forge.disconnect()
    except ReconcilerError as err:
        hint = f"\n    hint: {err.hint}" if err.hint else ""
        print(
            f"warning: cannot post the commit status on {post.commit}: {err.message}{hint}",
            file=sys.stderr,
        )


def _run_validate(args: argparse.Namespace) -> int:
    return validate(request(args))


def validate(request: ValidateRequest) -> int:
    paths = _paths(request)
    missing = [p for p in paths if not p.exists()]
    if missing:
        for path in missing:
            print(f"error: {path}: no such file or folder", file=sys.stderr)
        return EXIT_USAGE
    reports = config.validate_paths(paths)
    findings = [f for report in reports for f in report.findings]
    if request.format == "json":
        print(json.dumps([f.model_dump(mode="json") for f in findings], indent=2))
    else:
        for finding in findings:
            print(config.format_finding(finding))
        for report in reports:
            print(report.summary())
    valid = all(report.valid for report in reports)
    if request.status is not None:
        errors = sum(f.severity.value == "error" for f in findings)
        _post_status(request.status, valid, errors, len(findings) - errors)
    return EXIT_OK if valid else EXIT_ERROR
