"""``reconciler apply``: observe, plan, show, confirm, then live-migrate within every limit.

``apply`` acts whatever the policy's ``mode`` (the mode governs what ``run`` does on its own).
Exit codes: 0 everything done or nothing to do; 3 some moves failed, were skipped as stale,
or the run was interrupted; 1 error (nothing moved); 130/143 interrupted by SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from reconciler.cli import acting, apply_view
from reconciler.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    Subparsers,
    add_observe_overrides,
    add_path_argument,
    add_repo_arguments,
    add_state_dir_argument,
)
from reconciler.cli.signals import Signals
from reconciler.errors import ReconcilerError, TerminalError
from reconciler.model.plan import Plan
from reconciler.model.status import TRIGGERS, MoveOutcome

if TYPE_CHECKING:
    from reconciler.engine.round import RoundReport

APPLY_EPILOG = """\
exit codes:
  0    every planned move done, or nothing to do
  3    some moves failed, were skipped as stale, or the run was interrupted
  1    error: invalid cluster folder, no host observed, another apply holds the lock
  130  interrupted by SIGINT (143: SIGTERM): running migrations were let finish, none started

A first SIGINT/SIGTERM starts nothing more and lets the running migrations end; a second one
aborts them (the VMs stay on their sources, running).
"""


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "apply",
        help="live-migrate VMs to reach the desired state, within every limit",
        description="Observe, plan, show the plan, ask for confirmation, then execute it by\n"
        "live migration within batch, parallel, per-host and disruption-budget limits.",
        epilog=APPLY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_path_argument(p)
    p.add_argument("--yes", action="store_true", help=acting.YES_HELP)
    p.add_argument("--dry-run", action="store_true", help="show the plan and stop")
    p.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text for people (progress on a terminal), json: the round's ReconcileStatus",
    )
    add_state_dir_argument(p)
    add_observe_overrides(p)
    add_repo_arguments(p)
    acting.add_hold_arguments(p)
    p.add_argument(
        "--audit-branch",
        metavar="NAME",
        help="with --repo: record each executed batch on this branch instead of --branch "
        "(for repositories whose main branch is protected)",
    )
    p.add_argument(
        "--trigger",
        choices=TRIGGERS,
        help="with --repo: the Reconciler-Trigger of the audit commit (default: maintenance "
        "for drains, merge when the source commit is a merge, else manual)",
    )
    acting.add_actor_argument(p)
    p.set_defaults(handler=run)


def _confirm(args: argparse.Namespace, plan: Plan, signals: Signals) -> bool:
    signals.acting = _asked(args, plan)
    return signals.acting


def _asked(args: argparse.Namespace, plan: Plan) -> bool:
    if args.dry_run:
        return False
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise TerminalError(
            "apply asks for confirmation, but stdin is not a terminal",
            hint="pass --yes to apply without asking, or --dry-run to only show the plan",
        )
    print(f"Apply {len(plan.moves)} migration(s)? [y/N] ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _partial(report: RoundReport) -> bool:
    failed = any(r.outcome is not MoveOutcome.SUCCEEDED for r in report.results)
    return failed or bool(report.conflicts) or report.record_error is not None


def run(args: argparse.Namespace) -> int:
    return run_once(args)[0]


def _trigger(args: argparse.Namespace, merge: bool) -> Callable[[Plan], str]:
    """Reconciler-Trigger: --trigger, else maintenance for drains, merge for a merge commit."""
    chosen: str | None = args.trigger
    pick = acting.audit_trigger("manual", merge=merge)

    def trigger(plan: Plan) -> str:
        if chosen is not None:
            return chosen
        found = pick(plan)
        return found if found in ("maintenance", "merge") else "manual"

    return trigger


def run_once(args: argparse.Namespace, host: str | None = None) -> tuple[int, int, int]:
    """One apply round: (exit code, VMs moved, VMs still on ``host`` per the observation)."""
    from reconciler.engine.round import RoundOptions, run_round

    source = acting.build_source(args)
    loaded = source.load()
    desired = loaded.desired
    name = desired.cluster.metadata.name
    signals = Signals(interrupt_before_acting=True)
    view = apply_view.View(json_output=args.format == "json", placement=desired.placement.spec.vms)
    keeper = None
    if not args.dry_run:  # a look holds nothing; acting holds the cluster from plan to record
        keeper = acting.build_hold(args, desired, command="apply")
        acting.take_hold(keeper, name, args.lock_timeout)
    try:
        with signals.installed():
            with acting.round_ports(args, desired, source=source, hold=keeper) as ports:
                try:
                    report = run_round(
                        desired,
                        ports,
                        RoundOptions(
                            act=True,
                            holds=not args.dry_run,
                            trigger="manual",
                            revision=loaded.revision,
                            placement_changed_at=loaded.placement_changed_at,
                            audit_trigger=_trigger(args, loaded.merge),
                            confirm=lambda plan: _confirm(args, plan, signals),
                            stop=signals.stop,
                            abort=signals.abort,
                            on_event=view.event,
                            on_plan=view.plan,
                        ),
                    )
                except (ReconcilerError, KeyboardInterrupt):
                    view.close()
                    if signals.received == signal.SIGTERM:
                        return EXIT_SIGTERM, 0, 0
                    raise
            view.close()
    finally:
        if keeper is not None:
            keeper.stop()
    view.summary(report)
    if report.recorded and args.format != "json":
        print(
            f"recorded as {report.recorded[:12] if loaded.revision else report.recorded} "
            f"in {source.describe()}"
        )
    for line in report.conflicts:
        print(f"conflict: {line}", file=sys.stderr)
    if report.record_error is not None:
        print(
            f"error: the moves are done, but their record was not written: "
            f"{report.record_error.message}",
            file=sys.stderr,
        )
    moved = sum(r.outcome is MoveOutcome.SUCCEEDED for r in report.results)
    left = 0
    if host is not None and report.snapshot is not None:
        left = sum(v.host == host for v in report.snapshot.vms) - sum(
            r.source == host for r in report.results if r.outcome is MoveOutcome.SUCCEEDED
        )
    if signals.received is not None:
        code = EXIT_SIGTERM if signals.received == signal.SIGTERM else EXIT_SIGINT
    elif report.not_acting is not None:
        print(f"error: nothing was moved: {report.not_acting}", file=sys.stderr)
        code = EXIT_ERROR
    elif (
        report.results
        and any(r.outcome is not MoveOutcome.SUCCEEDED for r in report.results)
        or report.conflicts
        or report.record_error is not None
    ):
        code = EXIT_PARTIAL
    elif report.error is not None:
        code = EXIT_ERROR
    else:
        code = EXIT_OK
    return code, moved, left
