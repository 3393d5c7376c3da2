"""``reconciler simulate``: days of load replayed through the policy's own rounds, scored like
the literature (migrations, SLATAH, PDM, SLAV, energy, ESV) beside the product's own figures
(hours over hostLimit, spread), one column per policy. See docs/simulate.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from reconciler import config
from reconciler.cli.common import (
    EXIT_OK,
    Subparsers,
    add_repo_arguments,
    add_snapshot_argument,
    cluster_folder,
    usage_errors_exit_1,
)
from reconciler.cli.history import duration
from reconciler.cli.simulating import (
    CHART_HELP,
    TRACE_HELP,
    SimulateRequest,
    simulate,
    write_text,
)
from reconciler.errors import ConfigError
from reconciler.model.desired import DesiredState
from reconciler.model.rollout import Rollout
from reconciler.model.snapshot import Snapshot

EPILOG = """\
exit codes:
  0  the simulation ran and its report was written
  1  error: a bad trace, policy or shape (file:line and how to fix it), bad arguments

Each policy is played from the same start: every interval (spec.interval, at least one trace
step) the same decision `run` makes (core.next_actions), the planner and admission with every
rule and limit; moves take the time the busy-guest model gives them. The cluster's own policy
comes first; --policy FILE adds another (its name is the file's), --base/--head with --repo
compares two revisions. Without --hosts the cluster is PATH's, as --snapshot FILE saw it
(observe --format json); with --hosts a what-if cluster (400xG4,400xG5: kinds named in
--kinds FILE, or the literature's G4 and G5), the VMs placed by `place` at the start.
The folder's rollouts (rollouts/) play as run carries them out, and --rollout FILE adds one
not merged yet: their commands are not run, each step that runs one takes --rollout-step.
"""


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "simulate",
        help="replay days of load through policies and score them side by side",
        description="Replay a load trace through the cluster's policy (and others) as `run` "
        "would decide it, and report migrations, overload (SLATAH), performance lost to "
        "migrations (PDM), SLAV, energy and ESV per policy.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", nargs="?", type=Path, metavar="PATH", help="the cluster folder")
    source = p.add_argument_group("load (one of)")
    source.add_argument(
        "--trace",
        type=Path,
        metavar="PATH",
        help=TRACE_HELP,
    )
    source.add_argument(
        "--recorded",
        action="store_true",
        help="the load run recorded on reconciler/observed/<cluster> over --since (with "
        "--repo): the snapshots the backtest of impact reads",
    )
    source.add_argument(
        "--prometheus",
        nargs="?",
        const="",
        metavar="URL",
        help="the load Prometheus recorded over --since (the policy's vmCpu query; URL: "
        "another server than spec.load.prometheus.url); needs --snapshot",
    )
    p.add_argument(
        "--since",
        type=duration,
        metavar="AGE",
        help="with --prometheus: the period replayed, ending now, e.g. 7d",
    )
    p.add_argument(
        "--step",
        type=duration,
        default=None,
        metavar="DURATION",
        help="one figure per VM this often: --prometheus and --recorded read at it (default "
        "5m, and spec.record.every), a --trace is averaged or repeated to it",
    )
    p.add_argument(
        "--policy",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="another BalancePolicy to compare with the folder's own (repeatable)",
    )
    add_repo_arguments(p)
    p.add_argument("--base", metavar="REF", help="the revision reviewed against")
    p.add_argument("--head", metavar="REF", help="the revision under review")
    p.add_argument(
        "--hosts", metavar="SHAPE", help="a what-if cluster, e.g. 400xG4,400xG5 (COUNTxKIND)"
    )
    p.add_argument("--kinds", type=Path, metavar="FILE", help="a HostKinds file for --hosts")
    add_snapshot_argument(p)
    p.add_argument(
        "--for",
        dest="period",
        type=duration,
        metavar="AGE",
        help="simulate only the first part of the trace, e.g. 12h",
    )
    p.add_argument(
        "--power",
        choices=("realistic", "literature"),
        default="realistic",
        help="realistic: every host draws at least its idle watts; literature: a host with "
        "no VM draws nothing (as in CloudSim)",
    )
    p.add_argument(
        "--rollout",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="a Rollout not merged yet, played with the folder's own rollouts (which are "
        "always played; one of the same name is replaced; repeatable)",
    )
    p.add_argument(
        "--rollout-step",
        type=duration,
        default=timedelta(minutes=10),
        metavar="DURATION",
        help="how long each rollout step that runs a command takes, at most its timeout "
        "(default 10m; commands are not run)",
    )
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    p.add_argument("--chart", type=Path, metavar="FILE.svg", help=CHART_HELP)
    usage_errors_exit_1(p)
    p.set_defaults(handler=run)


def request(args: argparse.Namespace) -> SimulateRequest:
    if sum((args.trace is not None, args.prometheus is not None, args.recorded)) != 1:
        raise ConfigError(
            "give one load to replay",
            hint="--trace PATH, --prometheus [URL] --since 7d, or --repo URL --recorded "
            "--since 7d",
        )
    if args.recorded and (args.repo is None or args.since is None):
        raise ConfigError(
            "--recorded reads what run recorded in the state repository",
            hint="give --repo URL and --since, e.g. 7d",
        )
    if args.prometheus is not None and (args.since is None or args.snapshot is None):
        raise ConfigError(
            "--prometheus replays a past period of the cluster's VMs",
            hint="give --since (e.g. 7d) and --snapshot FILE (observe --format json > FILE)",
        )
    if (args.base is None) != (args.head is None):
        raise ConfigError("--base and --head go together", hint="give both, with --repo")
    if args.base is not None and args.repo is None:
        raise ConfigError("--base and --head read revisions of a repository", hint="add --repo")
    if args.hosts is None and args.snapshot is None and args.kinds is not None:
        raise ConfigError("--kinds names the kinds of --hosts", hint="add --hosts SHAPE")
    if args.rollout and args.hosts is not None:
        raise ConfigError(
            "--rollout takes the cluster's own hosts out, and a what-if cluster (--hosts) "
            "has others",
            hint="simulate the cluster as it is: --snapshot FILE instead of --hosts",
        )
    if args.rollout_step <= timedelta(0):
        raise ConfigError("--rollout-step must be longer than 0s", hint="e.g. --rollout-step 10m")
    return SimulateRequest(
        path=args.path,
        trace=args.trace,
        prometheus=args.prometheus,
        recorded=args.recorded,
        since=args.since,
        step=args.step,
        policies=tuple(args.policy),
        repo=args.repo,
        branch=args.branch,
        cache_dir=args.cache_dir,
        base=args.base,
        head=args.head,
        hosts=args.hosts,
        kinds=args.kinds,
        snapshot=args.snapshot,
        period=args.period,
        literature=args.power == "literature",
        format=args.format,
        chart=args.chart,
        rollouts=tuple(args.rollout),
        rollout_step=args.rollout_step,
    )


def run(args: argparse.Namespace) -> int:
    wanted = request(args)
    policies, recorded = _policies(wanted)
    report = simulate(wanted, policies, recorded=recorded)
    from reconciler.report import simulation_report as out

    if wanted.chart is not None:
        write_text(wanted.chart, out.simulation_svg(report))
        print(f"chart written to {wanted.chart}", file=sys.stderr)
    if wanted.format == "json":
        sys.stdout.write(out.simulation_json(report))
    elif wanted.format == "markdown":
        chart = wanted.chart.name if wanted.chart is not None else None
        sys.stdout.write(out.simulation_markdown(report, chart))
    else:
        sys.stdout.write(out.simulation_text(report))
    return EXIT_OK


def _policies(
    request: SimulateRequest,
) -> tuple[list[tuple[str, DesiredState]], list[Snapshot] | None]:
    """(name, desired state) of each policy compared, the cluster's own first; with
    --recorded, the snapshots recorded on reconciler/observed/<cluster> over --since."""
    recorded: list[Snapshot] | None = None
    if request.repo is not None:
        from reconciler.cli.common import checkout_state
        from reconciler.cli.requests import DEFAULT_REPO_FOLDER, RepoRequest

        path = str(request.path) if request.path is not None else DEFAULT_REPO_FOLDER
        checkout = checkout_state(
            RepoRequest(
                url=request.repo, branch=request.branch, path=path, cache_dir=request.cache_dir
            )
        )
        folder = checkout.folder
        if request.base is not None and request.head is not None:
            from pathlib import PurePosixPath

            from reconciler.cli.impact import _load_at

            rel = PurePosixPath(checkout.path)
            base, base_sha = _load_at(checkout.repo, request.base, rel, "base")
            head, head_sha = _load_at(checkout.repo, request.head, rel, "head")
            out = [
                (f"base {request.base} ({base_sha[:8]})", base),
                (f"head {request.head} ({head_sha[:8]})", head),
            ]
        else:
            out = [(f"{checkout.branch} ({checkout.commit[:8]})", config.load_desired(folder))]
        if request.recorded:
            from datetime import UTC, datetime

            from reconciler.adapters.git.observations import observed_branch, observed_snapshots

            assert request.since is not None
            cluster = out[0][1].cluster.metadata.name
            since = datetime.now(UTC) - request.since
            recorded = [s for _, s in observed_snapshots(checkout.repo, cluster, since=since)]
            if not recorded:
                raise ConfigError(
                    f"{checkout.repo.display_url} has no snapshot on {observed_branch(cluster)} "
                    f"from the last {request.since}",
                    hint="run `reconciler run --repo` (it records there), or a longer --since",
                )
    else:
        folder = cluster_folder(request.path)
        out = [("current", config.load_desired(folder))]
    from reconciler.config.variants import load_with_policy

    variants = [(p.stem, load_with_policy(folder, p)) for p in request.policies]
    if request.rollouts or variants:
        out, variants = _with_rollouts(folder, request.rollouts, out, variants)
    return [*out, *variants], recorded


def _with_rollouts(
    folder: Path,
    files: Sequence[Path],
    own: list[tuple[str, DesiredState]],
    variants: list[tuple[str, DesiredState]],
) -> tuple[list[tuple[str, DesiredState]], list[tuple[str, DesiredState]]]:
    """The rollouts each policy plays: a revision its own, a --policy file the folder's, and
    the --rollout files (checked with the folder) with them, replacing one of the same name."""
    from reconciler.config.variants import load_with_rollouts

    played = load_with_rollouts(folder, files).rollouts
    given = {r.metadata.name for r in played} if files else set()

    def merged(d: DesiredState, base: Sequence[Rollout]) -> DesiredState:
        by_name = {r.metadata.name: r for r in base}
        by_name.update({r.metadata.name: r for r in played if r.metadata.name in given})
        return d.model_copy(update={"rollouts": [by_name[n] for n in sorted(by_name)]})

    return (
        [(name, merged(d, d.rollouts)) for name, d in own],
        [(name, merged(d, played)) for name, d in variants],
    )
