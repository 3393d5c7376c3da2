"""``reconciler run``: the unattended loop, one active instance per cluster, observable over HTTP.

Exits 0 after SIGTERM or SIGINT (running migrations settle first; a second signal aborts them,
the VMs staying on their sources), 1 when it cannot start (invalid cluster folder at start, the
listen address taken, git missing).
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from reconciler import config
from reconciler.cli.common import (
    EXIT_OK,
    Subparsers,
    add_forge_arguments,
    add_observe_overrides,
    add_path_argument,
    add_repo_arguments,
    add_state_dir_argument,
    checkout_state,
    cluster_folder,
    positive_float,
)

if TYPE_CHECKING:  # the loop's machinery is imported when `run` runs, not for every command
    from reconciler.engine.leadership import CheckedLease, LeaseKeeper
    from reconciler.engine.loop import Loop, RunRound
    from reconciler.engine.metrics import Metrics
    from reconciler.model.status import ReconcileStatus

DEFAULT_LISTEN = "127.0.0.1:9187"
SECRET_ENV = "RECONCILER_WEBHOOK_SECRET"


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "run",
        help="reconcile on its own: every interval, on changes, within the policy's mode",
        description="Run reconcile rounds every spec.interval and at once when the desired "
        "state changes (folder watched, repository polled, webhook). The policy's mode decides: "
        "observe reports, propose keeps the proposal current, apply migrates inside windows. "
        "One instance per cluster acts; others stand by on the lease. See docs/run.md.",
    )
    add_path_argument(p)
    add_repo_arguments(p)
    add_forge_arguments(
        p, default="none", what="pull requests (mode propose, with --repo)", push_only=True
    )
    p.add_argument(
        "--poll",
        type=positive_float,
        default=60.0,
        metavar="SECONDS",
        help="how often to look for new commits with --repo (default: 60)",
    )
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"/metrics, /healthz and /webhook (default: {DEFAULT_LISTEN}); off: --listen off",
    )
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument("--identity", help="this instance's name in the lease (default: host:pid)")
    add_state_dir_argument(p)
    add_observe_overrides(p)
    p.set_defaults(handler=run)


class _Signals:
    """First SIGTERM/SIGINT: stop the loop (no new move); second: abort running migrations."""

    def __init__(self, loop: Loop, abort: threading.Event) -> None:
        self.loop = loop
        self.abort = abort

    def handle(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if self.loop.stopping:
            self.abort.set()
        self.loop.stop()


def _lease(args: argparse.Namespace, cluster: str, state_dir: Path) -> CheckedLease:
    from reconciler.adapters.lease_file import FileLease, lock_path
    from reconciler.adapters.lease_git import GitLease

    if args.repo:
        return GitLease(
            args.repo, cluster, state_dir / cluster / "lease.git", identity=args.identity
        )
    return FileLease(lock_path(state_dir, cluster))


def _round(
    args: argparse.Namespace,
    folder: list[Path],
    metrics: Metrics,
    keeper: LeaseKeeper,
    stop: threading.Event,
    abort: threading.Event,
    revision: list[str | None],
) -> RunRound:
    from reconciler.cli import apply
    from reconciler.engine.round import run_round

    def run_one(trigger: str, act: bool) -> ReconcileStatus:
        desired = config.load_desired(folder[0])
        ports = apply.build_ports(argparse.Namespace(**{**vars(args), "path": folder[0]}), desired)
        report = run_round(
            desired,
            ports,
            act=act,
            trigger=trigger,
            revision=revision[0],
            confirm=lambda plan: keeper.confirm(),
            stop=stop,
            abort=abort,
            on_plan=metrics.record_observation,
        )
        return report.status

    return run_one


def run(args: argparse.Namespace) -> int:
    from reconciler.adapters.http_server import HttpServer, parse_listen
    from reconciler.adapters.lease_git import RENEW_DEADLINE, RETRY_PERIOD
    from reconciler.adapters.status_file import default_state_dir
    from reconciler.cli import apply
    from reconciler.cli import propose as propose_command
    from reconciler.engine import logs, triggers
    from reconciler.engine.leadership import LeaseKeeper
    from reconciler.engine.loop import Loop
    from reconciler.engine.metrics import Metrics

    logs.configure(args.log_format)
    state_dir: Path = args.state_dir or default_state_dir()
    revision: list[str | None] = [None]
    if args.repo:
        checkout = checkout_state(args)  # fetched and checked out at the branch head
        revision[0] = checkout.commit
        folder = [checkout.folder]  # each commit's files have a folder of their own
    else:
        checkout = None
        folder = [cluster_folder(args.path)]
    cluster = config.load_desired(folder[0]).cluster.metadata.name
    metrics = Metrics(cluster)
    stop, abort = threading.Event(), threading.Event()
    wakeup = triggers.Wakeup()
    keeper = LeaseKeeper(
        _lease(args, cluster, state_dir),
        wakeup,
        stop,
        retry_period=RETRY_PERIOD,
        renew_deadline=RENEW_DEADLINE,
        on_change=metrics.set_leader,
    )

    def refresh() -> None:
        fresh = checkout_state(args)
        revision[0], folder[0] = fresh.commit, fresh.folder

    def propose() -> None:
        # the propose command's own round: plan on a fresh observation, push, open or update
        ns = argparse.Namespace(**{**vars(args), "snapshot": None, "history": None, "now": None})
        propose_command.run(ns)

    loop = Loop(
        cluster=cluster,
        run_round=_round(args, folder, metrics, keeper, stop, abort, revision),
        load_policy=lambda: config.load_desired(folder[0]).policy,
        clock=apply.SystemClock(),
        metrics=metrics,
        wakeup=wakeup,
        round_stop=stop,
        refresh=refresh if checkout is not None else None,
        propose=propose if checkout is not None else None,
        leadership=keeper,
        release=keeper.stop,
    )
    server = None
    if args.listen != "off":
        server = HttpServer(
            parse_listen(args.listen),
            registry=metrics.registry,
            health=lambda: (loop.health.healthy, loop.health.report()),
            on_push=wakeup.trigger,
            secret=os.environ.get(SECRET_ENV) or None,
            branch=args.branch if args.repo else None,
        )
    watcher = (
        triggers.RevisionPoller(
            lambda: checkout.repo.remote_head(args.branch), wakeup, every=args.poll
        )
        if checkout is not None
        else triggers.FolderWatcher(folder[0], wakeup)
    )
    handler = _Signals(loop, abort)
    old = {s: signal.signal(s, handler.handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if server is not None:
            server.start()
        watcher.start()
        keeper.start()
        loop.run()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        watcher.stop()
        if server is not None:
            server.stop()
    return EXIT_OK
