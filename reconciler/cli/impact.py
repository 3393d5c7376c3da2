"""``reconciler impact``: what a change of the desired state would move, for its review.

Loads the cluster folder at two revisions of the state repository, plans each on the same
snapshot (a file, or the latest on ``reconciler/observed/<cluster>``), and compares; with
``--since`` it also replays the recorded snapshots of that period under both. See
docs/review.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from reconciler import config
from reconciler.adapters.files import snapshot as snapshot_file
from reconciler.cli.common import (
    DEFAULT_REPO_FOLDER,
    EXIT_CHANGES,
    EXIT_OK,
    Subparsers,
    add_forge_arguments,
    add_now_argument,
    add_repo_arguments,
    add_snapshot_argument,
    check_snapshot_matches,
    forge_of,
    positive_int,
    require_observation,
    usage_errors_exit_1,
)
from reconciler.cli.history import duration
from reconciler.core import backtest, impact, planner
from reconciler.errors import ConfigError, ValidationFailed
from reconciler.model.desired import DesiredState
from reconciler.model.impact import Impact
from reconciler.model.quantity import format_duration
from reconciler.model.snapshot import Snapshot
from reconciler.report import impact_report

if TYPE_CHECKING:
    from reconciler.adapters.git.repo import GitStateRepo

TOKEN_ENV = "RECONCILER_FORGE_TOKEN"

EPILOG = f"""\
exit codes:
  0  no difference: the head plans what the base plans (and replays the same)
  2  a difference
  1  error: an invalid revision (file:line as validate prints it), no snapshot, bad arguments

Both revisions are planned on one snapshot with the imbalance taken as lasting (holdRounds
reached), so a threshold change shows what it moves once run has seen the imbalance long
enough; --since replays the recorded rounds, where holdRounds, cooldown and batch act.
The forge token for --post-comment comes from ${TOKEN_ENV}.
"""


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "impact",
        help="what a change of the desired state would move (for pull requests)",
        description="Plan the cluster folder at --base and at --head on the same snapshot and "
        "report what the change moves; --since replays recorded snapshots under both.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help=f"the cluster folder inside the repository (default: {DEFAULT_REPO_FOLDER})",
    )
    add_repo_arguments(p, branch=False)
    p.add_argument("--base", required=True, metavar="REF", help="the revision reviewed against")
    p.add_argument("--head", required=True, metavar="REF", help="the revision under review")
    add_snapshot_argument(p)
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    p.add_argument(
        "--since",
        type=duration,
        metavar="AGE",
        help="also replay the snapshots recorded on reconciler/observed/<cluster> in this "
        "period under both revisions, e.g. 7d",
    )
    add_now_argument(p, "plan", decides="cooldowns, minUptime and the end of --since")
    post = p.add_argument_group(
        "pull-request comment", f"post the Markdown as one comment (token in ${TOKEN_ENV})"
    )
    post.add_argument(
        "--post-comment",
        action="store_true",
        help="create or update this cluster's impact comment on --pr",
    )
    add_forge_arguments(post)
    post.add_argument("--pr", type=positive_int, metavar="N", help="the pull request's number")
    usage_errors_exit_1(p)
    p.set_defaults(handler=run)


def _load_at(
    repo: GitStateRepo, ref: str, rel: PurePosixPath, side: str
) -> tuple[DesiredState, str]:
    """The desired state of ``rel`` at ``ref``; errors name repository paths, not the cache."""
    sha = repo.resolve(ref)
    if sha is None:
        raise ConfigError(
            f"{repo.display_url} has no revision {ref!r} (--{side})",
            hint="pass a branch, a tag or a commit id the repository has",
        )
    tree = repo.checkout(sha)
    folder = tree / rel
    if not folder.is_dir():
        raise ConfigError(
            f"{repo.display_url} has no folder {rel} at {ref} ({sha[:12]}) (--{side})",
            hint="pass the cluster folder inside the repository as PATH",
        )
    try:
        desired = config.load_desired(folder)
    except ValidationFailed as err:
        message = err.message.replace(f"{tree}/", "")
        raise ValidationFailed(f"--{side} {ref} ({sha[:12]}): {message}", err.findings) from None
    return desired, sha


def _snapshot(
    args: argparse.Namespace, repo: GitStateRepo, base: DesiredState, head: DesiredState
) -> tuple[Snapshot, str]:
    from reconciler.adapters.git.observations import observed_branch, observed_snapshots

    cluster = head.cluster.metadata.name
    if args.snapshot is not None:
        snapshot, source = snapshot_file.load_snapshot(args.snapshot), f"snapshot {args.snapshot}"
    else:
        found = observed_snapshots(repo, cluster, since=None, latest_only=True)
        if not found:
            raise ConfigError(
                f"{repo.display_url} has no branch {observed_branch(cluster)} to plan on",
                hint="run `reconciler run --repo` (it records there), or pass --snapshot FILE "
                "(reconciler observe --format json)",
            )
        commit, snapshot = found[-1]
        source = f"the snapshot on {observed_branch(cluster)} ({commit[:12]})"
    for desired in (base, head):
        check_snapshot_matches(desired, snapshot, source)
    require_observation(snapshot)
    return snapshot, source


def compute(args: argparse.Namespace) -> Impact:
    """The impact the arguments ask for (no output)."""
    from reconciler.adapters.git.observations import observed_snapshots
    from reconciler.adapters.git.repo import GitStateRepo

    rel = PurePosixPath(args.path or DEFAULT_REPO_FOLDER)
    if rel.is_absolute() or ".." in rel.parts:
        raise ConfigError(
            f"PATH {rel} must be a folder inside the repository",
            hint="write it relative to the repository root, e.g. cluster-state",
        )
    repo = GitStateRepo(args.repo, cache_dir=args.cache_dir)
    repo.fetch()
    base, base_sha = _load_at(repo, args.base, rel, "base")
    head, head_sha = _load_at(repo, args.head, rel, "head")
    snapshot, source = _snapshot(args, repo, base, head)
    now: datetime = args.now or datetime.now(UTC)
    plans = [
        planner.plan(d, snapshot, impact.steady_history(d, snapshot), now=now).model_copy(
            update={"desired_revision": sha}
        )
        for d, sha in ((base, base_sha), (head, head_sha))
    ]
    replayed = None
    if args.since is not None:
        since: timedelta = args.since
        recorded = observed_snapshots(repo, head.cluster.metadata.name, since=now - since)
        snapshots = [s for _, s in recorded if s.taken_at <= now]
        replayed = backtest.replay(base, head, snapshots, since=now - since, until=now)
    return impact.compare(
        plans[0], plans[1], path=str(rel), snapshot_source=source, backtest=replayed
    )


def _post(args: argparse.Namespace, markdown: str, path: str) -> str:
    from reconciler.adapters.forges.clients import open_forge
    from reconciler.cli.propose import project_of
    from reconciler.engine.comments import upsert_comment

    token = os.environ.get(TOKEN_ENV)
    project = args.forge_project or project_of(args.repo)
    if args.pr is None or not token or not project:
        raise ConfigError(
            f"--post-comment needs --pr N, --forge-project (or a --repo URL naming it) and a "
            f"token in ${TOKEN_ENV}",
            hint="in GitHub Actions: RECONCILER_FORGE_TOKEN: ${{ github.token }} with "
            "permissions: pull-requests: write",
        )
    name = forge_of(args)
    if name == "none":
        raise ConfigError("--post-comment needs a forge", hint="pass --forge github|gitea|gitlab")
    forge = open_forge(name, project=project, token=token, api_url=args.forge_url)
    try:
        return upsert_comment(forge, args.pr, impact_report.comment_marker(path), markdown)
    finally:
        forge.disconnect()


def run(args: argparse.Namespace) -> int:
    if not args.repo:
        raise ConfigError("impact needs --repo URL", hint="pass the state repository's URL")
    result = compute(args)
    since = format_duration(args.since) if args.since is not None else None
    markdown = impact_report.impact_markdown(result, since=since)
    if args.format == "json":
        print(impact_report.impact_json(result), end="")
    elif args.format == "markdown":
        print(markdown, end="")
    else:
        print(impact_report.impact_text(result), end="")
    if args.post_comment:
        done = _post(args, markdown, result.path)
        print(f"impact comment on #{args.pr}: {done}", file=sys.stderr)
    return EXIT_CHANGES if result.differs else EXIT_OK
