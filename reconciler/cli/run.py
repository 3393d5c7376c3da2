"""``reconciler run``: the unattended loop, one active instance per cluster, observable over HTTP.

Exits 0 after SIGTERM or SIGINT (running migrations settle first; a second signal aborts them,
the VMs staying on their sources), 1 when it cannot start (invalid cluster folder at start, the
listen address taken, git missing).
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.cli import acting
from reconciler.cli.common import (
    EXIT_OK,
    Subparsers,
    add_forge_arguments,
    add_observe_overrides,
    add_path_argument,
    add_repo_arguments,
    add_state_dir_argument,
    positive_float,
)
from reconciler.cli.signals import Signals

if TYPE_CHECKING:  # the loop's machinery is imported when `run` runs, not for every command
    from reconciler.model.desired import DesiredState
    from reconciler.model.policy import BalancePolicy
    from reconciler.model.snapshot import Snapshot
    from reconciler.model.status import ReconcileStatus

log = logging.getLogger(__name__)

HOLD_RETRY_SECONDS = 5.0
"""How soon a round that could not confirm its hold before acting is tried again."""

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
    add_forge_arguments(p)
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
    p.add_argument(
        "--coordination",
        default=os.environ.get(acting.COORDINATION_ENV) or None,
        metavar="URL",
        help="hold the cluster through a coordination service instead of the git lease or "
        f"the machine's lock, e.g. etcd3+http://host:2379 (default: ${acting.COORDINATION_ENV})",
    )
    p.set_defaults(handler=run)


DESIRED_CHANGES = ("desired-state-changed", "webhook")


def run(args: argparse.Namespace) -> int:
    from reconciler.adapters.files.status import default_state_dir
    from reconciler.adapters.http.server import HttpServer, parse_listen
    from reconciler.cli import observations
    from reconciler.cli import propose as propose_command
    from reconciler.core.windows import mode_now
    from reconciler.engine import logs, triggers
    from reconciler.engine.loop import Loop
    from reconciler.engine.metrics import Metrics
    from reconciler.engine.round import RoundOptions, RoundReport, run_round
    from reconciler.engine.sources import RepoSource
    from reconciler.model.policy import Mode

    logs.configure(args.log_format)
    state_dir: Path = args.state_dir or default_state_dir()
    source = acting.build_source(args)
    current = [source.load()]  # read again before every round
    first = current[0].desired
    cluster = first.cluster.metadata.name
    metrics = Metrics(cluster)
    stop, abort = threading.Event(), threading.Event()
    wakeup = triggers.Wakeup()
    keeper = acting.build_hold(
        args,
        first,
        command="run",
        state_dir=state_dir,
        wakeup=wakeup,
        round_stop=stop,
        on_change=metrics.set_leader,
    )
    clock = acting.SystemClock()
    last: list[RoundReport | None] = [None]
    recorder = observations.Recorder.of(source, state_dir, cluster)
    recovery = acting.build_recovery(
        first, state_dir=state_dir, source=source, on_fence=metrics.record_fence
    )

    def recover(
        desired: DesiredState, snapshot: Snapshot, status: ReconcileStatus
    ) -> ReconcileStatus:
        act = desired.policy.spec.mode is Mode.APPLY and keeper.confirm()
        new: ReconcileStatus = acting.recover(
            recovery, desired, snapshot, status, act=act, wakeup=wakeup
        )
        return new

    def load_policy() -> BalancePolicy:
        current[0] = source.load()
        return current[0].desired.policy

    def run_one(trigger: str, act: bool) -> ReconcileStatus:
        loaded = current[0]
        desired = loaded.desired

        def window() -> str | None:
            if mode_now(desired.policy, clock.now()) is Mode.APPLY:
                return None
            return "the policy's apply window closed"

        changed = any(t in trigger.split("+") for t in DESIRED_CHANGES)
        last[0] = None
        with acting.round_ports(
            args, desired, source=source, hold=keeper, state_dir=state_dir
        ) as ports:
            ports.recovery = recover
            report = run_round(
                desired,
                ports,
                RoundOptions(
                    act=act,
                    holds=True,
                    trigger=trigger,
                    revision=loaded.revision,
                    placement_changed_at=loaded.placement_changed_at,
                    audit_trigger=acting.audit_trigger(trigger, merge=changed),
                    confirm=acting.confirming(keeper, wakeup, cluster, HOLD_RETRY_SECONDS),
                    gate=window,
                    stop=stop,
                    abort=abort,
                    on_plan=metrics.record_observation,
                ),
            )
        last[0] = report
        recorder.after_round(report.snapshot, desired.policy, clock.now())
        return report.status

    def propose() -> None:
        # the round's own plan: one observation and one plan per round
        report = last[0]
        if report is None or report.plan is None or not isinstance(source, RepoSource):
            return
        folder, root, commit = source.path, source.root, source.commit
        if folder is None or root is None or commit is None:
            return
        _, line = propose_command.propose_plan(
            args,
            repo=source.repo,
            base=source.branch,
            source=commit,
            root=root,
            folder=folder,
            desired=current[0].desired,
            plan=report.plan,
        )
        log.info("proposal: %s", line)

    loop = Loop(
        cluster=cluster,
        run_round=run_one,
        load_policy=load_policy,
        clock=clock,
        metrics=metrics,
        wakeup=wakeup,
        round_stop=stop,
        propose=propose if isinstance(source, RepoSource) else None,
        leadership=keeper,
        release=keeper.stop,
    )

    def health() -> tuple[bool, dict[str, object]]:
        if keeper.failure is not None:
            return False, {
                "state": "failed",
                "reason": "HoldKeeperFailed",
                "message": f"the hold on the cluster is no longer kept: {keeper.failure}",
            }
        failing = recovery.last.fence_failing
        if failing:
            return False, {
                "state": "failed",
                "reason": "FenceFailed",
                "message": "; ".join(f"fencing {h} failed: {d}" for h, d in failing.items())
                + ": its VMs are not restarted",
                "hosts": sorted(failing),
            }
        return loop.health.healthy, loop.health.report()

    server = None
    if args.listen != "off":
        server = HttpServer(
            parse_listen(args.listen),
            registry=metrics.registry,
            health=health,
            on_push=wakeup.trigger,
            secret=os.environ.get(SECRET_ENV) or None,
            branch=args.branch if args.repo else None,
        )
    watcher = (
        triggers.RevisionPoller(
            lambda: source.repo.remote_head(args.branch), wakeup, every=args.poll
        )
        if isinstance(source, RepoSource)
        else triggers.FolderWatcher(acting.source_folder(source), wakeup)
    )
    # the loop's own stop event, not the round's: a standby taking the lease clears that one
    signals = Signals(abort=abort, on_stop=loop.stop)
    try:
        with signals.installed():
            if server is not None:
                server.start()
            watcher.start()
            keeper.start()
            loop.run()
    finally:
        watcher.stop()
        if server is not None:
            server.stop()
    return EXIT_OK
