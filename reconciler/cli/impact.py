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
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from reconciler import config
from reconciler.adapters.files import snapshot as snapshot_file
from reconciler.cli.common import (
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
    project_of,
    usage_errors_exit_1,
)
from reconciler.cli.history import duration
from reconciler.cli.requests import DEFAULT_REPO_FOLDER, ForgeRequest, forge_request_of
from reconciler.cli.simulating import CHART_HELP, TRACE_HELP
from reconciler.core import backtest, impact, planner
from reconciler.core.rollout_report import rollout_plan
from reconciler.engine.observed import require_observed
from reconciler.engine.transaction import checkout_commit, repo_folder
from reconciler.errors import ConfigError, ValidationFailed
from reconciler.model.desired import DesiredState
from reconciler.model.impact import Impact
from reconciler.model.quantity import format_duration
from reconciler.model.simulation import SimulationReport
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
    sim = p.add_argument_group(
        "simulation", "replay base and head over days of load (docs/simulate.md)"
    )
    sim.add_argument(
        "--simulate",
        action="store_true",
        help="also replay both revisions through their rounds over --since of the load "
        "Prometheus recorded (spec.load.source: prometheus), or over --trace, on the snapshot's "
        "cluster, and add the scores to the report and the comment",
    )
    sim.add_argument("--trace", type=Path, metavar="PATH", help=TRACE_HELP)
    sim.add_argument("--chart", type=Path, metavar="FILE.svg", help=CHART_HELP)
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
    done = checkout_commit(
        repo, sha, str(rel), display=repo.display_url, at=ref, context=f" (--{side})"
    )
    try:
        desired = config.load_desired(done.folder)
    except ValidationFailed as err:
        message = err.message.replace(f"{done.root}/", "")
        raise ValidationFailed(f"--{side} {ref} ({sha[:12]}): {message}", err.findings) from None
    return desired, sha


@dataclass(frozen=True)
class CommentRequest:
    """--post-comment: keep this cluster's impact comment on pull request ``pr``."""

    pr: int | None
    forge: ForgeRequest


@dataclass(frozen=True)
class ImpactRequest:
    url: str
    cache_dir: Path | None
    path: str
    """The cluster folder inside the repository."""
    base: str
    head: str
    snapshot: Path | None
    format: str
    since: timedelta | None
    now: datetime | None
    comment: CommentRequest | None
    simulate: bool = False
    trace: Path | None = None
    chart: Path | None = None


def request(args: argparse.Namespace) -> ImpactRequest:
    if not args.repo:
        raise ConfigError("impact needs --repo URL", hint="pass the state repository's URL")
    return ImpactRequest(
        url=args.repo,
        cache_dir=args.cache_dir,
        path=args.path or DEFAULT_REPO_FOLDER,
        base=args.base,
        head=args.head,
        snapshot=args.snapshot,
        format=args.format,
        since=args.since,
        now=args.now,
        comment=CommentRequest(args.pr, forge_request_of(args)) if args.post_comment else None,
        simulate=args.simulate,
        trace=args.trace,
        chart=args.chart,
    )


def _snapshot(
    request: ImpactRequest, repo: GitStateRepo, base: DesiredState, head: DesiredState
) -> tuple[Snapshot, str]:
    from reconciler.adapters.git.observations import observed_branch, observed_snapshots

    cluster = head.cluster.metadata.name
    if request.snapshot is not None:
        snapshot = snapshot_file.load_snapshot(request.snapshot)
        source = f"snapshot {request.snapshot}"
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
    require_observed(snapshot)
    return snapshot, source


def compute(request: ImpactRequest) -> tuple[Impact, SimulationReport | None]:
    """The impact the request asks for, and the simulation of both revisions when it asks
    for one (no output)."""
    from reconciler.adapters.git.observations import observed_snapshots
    from reconciler.adapters.git.repo import GitStateRepo

    rel = PurePosixPath(repo_folder(request.path))
    repo = GitStateRepo(request.url, cache_dir=request.cache_dir)
    repo.fetch()
    base, base_sha = _load_at(repo, request.base, rel, "base")
    head, head_sha = _load_at(repo, request.head, rel, "head")
    snapshot, source = _snapshot(request, repo, base, head)
    now = request.now or datetime.now(UTC)
    plans = [
        planner.plan(d, snapshot, impact.steady_history(d, snapshot), now=now).model_copy(
            update={"desired_revision": sha}
        )
        for d, sha in ((base, base_sha), (head, head_sha))
    ]
    replayed = None
    if request.since is not None:
        since = request.since
        recorded = observed_snapshots(repo, head.cluster.metadata.name, since=now - since)
        snapshots = [s for _, s in recorded if s.taken_at <= now]
        replayed = backtest.replay(base, head, snapshots, since=now - since, until=now)
    compared = impact.compare(
        plans[0], plans[1], path=str(rel), snapshot_source=source, backtest=replayed
    )
    simulated = None
    if request.simulate:
        sides = [(f"base {request.base}", base), (f"head {request.head}", head)]
        simulated = _simulated(request, sides, snapshot)
    # a rollout the head adds or changes: the plan a reviewer approves by merging it
    rollouts = [
        rollout_plan(r, head, snapshot, impact.steady_history(head, snapshot), now=now)
        for r in head.rollouts
        if r not in base.rollouts
    ]
    if not rollouts:
        return compared, simulated
    return compared.model_copy(update={"rollouts": rollouts, "differs": True}), simulated


def _simulated(
    request: ImpactRequest, sides: list[tuple[str, DesiredState]], snapshot: Snapshot
) -> SimulationReport:
    """Both revisions replayed over the load: --trace, else what Prometheus recorded over
    --since (the head's spec.load.prometheus)."""
    from reconciler.cli.simulating import SimulateRequest, simulate
    from reconciler.model.load import LoadSource

    head = sides[1][1]
    recorded = head.policy.spec.load.source is LoadSource.PROMETHEUS
    if request.trace is None and not (recorded and request.since is not None):
        raise ConfigError(
            "--simulate replays the load Prometheus recorded over --since, or a --trace",
            hint="give --since 7d with spec.load.source: prometheus, or --trace PATH",
        )
    wanted = SimulateRequest(
        path=None,
        trace=request.trace,
        prometheus="" if request.trace is None else None,
        recorded=False,
        since=request.since,
        step=None,
        policies=(),
        repo=None,
        branch="main",
        cache_dir=None,
        base=None,
        head=None,
        hosts=None,
        kinds=None,
        snapshot=None,
        period=None,
        literature=False,
        format="markdown",
        chart=request.chart,
    )
    return simulate(wanted, sides, snapshot)


def _post(comment: CommentRequest, url: str, markdown: str, path: str) -> str:
    from reconciler.adapters.forges.clients import open_forge
    from reconciler.engine.comments import upsert_comment

    token = os.environ.get(TOKEN_ENV)
    project = comment.forge.project or project_of(url)
    if comment.pr is None or not token or not project:
        raise ConfigError(
            f"--post-comment needs --pr N, --forge-project (or a --repo URL naming it) and a "
            f"token in ${TOKEN_ENV}",
            hint="in GitHub Actions: RECONCILER_FORGE_TOKEN: ${{ github.token }} with "
            "permissions: pull-requests: write",
        )
    name = forge_of(comment.forge.name)
    if name == "none":
        raise ConfigError("--post-comment needs a forge", hint="pass --forge github|gitea|gitlab")
    forge = open_forge(name, project=project, token=token, api_url=comment.forge.url)
    try:
        return upsert_comment(forge, comment.pr, impact_report.comment_marker(path), markdown)
    finally:
        forge.disconnect()


def run(args: argparse.Namespace) -> int:
    return show(request(args))


def show(request: ImpactRequest) -> int:
    result, simulated = compute(request)
    since = format_duration(request.since) if request.since is not None else None
    markdown = impact_report.impact_markdown(result, since=since)
    if simulated is not None:
        from reconciler.cli.simulating import write_text
        from reconciler.report import simulation_report

        chart = request.chart.name if request.chart is not None else None
        markdown += "\n" + simulation_report.simulation_markdown(simulated, chart)
        if request.chart is not None:
            write_text(request.chart, simulation_report.simulation_svg(simulated))
    if request.format == "json":
        print(impact_report.impact_json(result, simulated), end="")
    elif request.format == "markdown":
        print(markdown, end="")
    else:
        print(impact_report.impact_text(result), end="")
        if simulated is not None:
            from reconciler.report import simulation_report

            print(simulation_report.simulation_text(simulated), end="")
    if request.comment is not None:
        done = _post(request.comment, request.url, markdown, result.path)
        print(f"impact comment on #{request.comment.pr}: {done}", file=sys.stderr)
    return EXIT_CHANGES if result.differs else EXIT_OK
