"""``reconciler validate``: check cluster folders against the models and the rules."""

from __future__ import annotations

import argparse
import json
import sys
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
from reconciler.errors import ConfigError, ReconcilerError

TOKEN_ENV = "RECONCILER_FORGE_TOKEN"
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
        default=[Path("cluster-state/")],
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


def _paths(args: argparse.Namespace) -> list[Path]:
    """The paths given; with --repo, inside the repository's work tree at the branch head."""
    paths: list[Path] = args.paths
    if not args.repo:
        return paths
    given = [str(p) for p in paths] if paths != [Path("cluster-state/")] else ["cluster-state"]
    out = []
    for rel in given:
        checkout = checkout_state(argparse.Namespace(**{**vars(args), "path": Path(rel)}))
        out.append(checkout.folder)
    return out


def _post_status(args: argparse.Namespace, valid: bool, errors: int, warnings: int) -> None:
    """The result as a commit status, e.g. on the pull request's head commit.

    A status that cannot be posted (no token, as in a fork's pull request; a forge that refuses
    or does not answer) is a warning on stderr: the exit code stays the validation's own.
    """
    import os

    from reconciler.adapters.forges.clients import open_forge

    token = os.environ.get(TOKEN_ENV)
    try:
        forge_name = forge_of(args)
        if forge_name == "none":
            raise ConfigError(
                "no forge is chosen (--forge none, or no token)",
                hint=f"pass --forge and export {TOKEN_ENV}",
            )
        if not token or not args.forge_project:
            missing = " and ".join(
                what
                for what, absent in (
                    ("--forge-project", not args.forge_project),
                    (f"a token in ${TOKEN_ENV}", not token),
                )
                if absent
            )
            raise ConfigError(
                f"it needs {missing}",
                hint="in GitHub Actions: RECONCILER_FORGE_TOKEN: ${{ github.token }} with "
                "permissions: statuses: write (pull requests from forks get no such token)",
            )
        forge = open_forge(
            forge_name, project=args.forge_project, token=token, api_url=args.forge_url
        )
        try:
            forge.set_status(
                args.post_status,
                state="success" if valid else "failure",
                context=STATUS_CONTEXT,
                description=f"{errors} error(s), {warnings} warning(s)",
                url=args.status_url,
            )
        finally:
            forge.disconnect()
    except ReconcilerError as err:
        hint = f"\n    hint: {err.hint}" if err.hint else ""
        print(
            f"warning: cannot post the commit status on {args.post_status}: {err.message}{hint}",
            file=sys.stderr,
        )


def _run_validate(args: argparse.Namespace) -> int:
    paths = _paths(args)
    missing = [p for p in paths if not p.exists()]
    if missing:
        for path in missing:
            print(f"error: {path}: no such file or folder", file=sys.stderr)
        return EXIT_USAGE
    reports = config.validate_paths(paths)
    findings = [f for report in reports for f in report.findings]
    if args.format == "json":
        print(json.dumps([f.model_dump(mode="json") for f in findings], indent=2))
    else:
        for finding in findings:
            print(config.format_finding(finding))
        for report in reports:
            print(report.summary())
    valid = all(report.valid for report in reports)
    if args.post_status:
        errors = sum(f.severity.value == "error" for f in findings)
        _post_status(args, valid, errors, len(findings) - errors)
    return EXIT_OK if valid else EXIT_ERROR
