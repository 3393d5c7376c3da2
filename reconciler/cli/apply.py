"""``reconciler apply``: observe, plan, show, confirm, then live-migrate within every limit.

``apply`` acts whatever the policy's ``mode`` (the mode governs what ``run`` does on its own).
Exit codes: 0 everything done or nothing to do; 3 some moves failed, were skipped as stale,
or the run was interrupted; 1 error (nothing moved); 130/143 interrupted by SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from reconciler.cli import apply_view
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
    cluster_folder,
    load_desired,
    observe_overrides,
    status_store,
)
from reconciler.errors import ReconcilerError, TerminalError
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Plan
from reconciler.model.status import TRIGGERS, MoveOutcome

APPLY_EPILOG = """\
exit codes:
  0    every planned move done, or nothing to do
  3    some moves failed, were skipped as stale, or the run was interrupted
  1    error: invalid cluster folder, no host observed, another apply holds the lock
  130  interrupted by SIGINT (143: SIGTERM): running migrations were let finish, none started

A first SIGINT/SIGTERM starts nothing more and lets the running migrations end; a second one
aborts them (the VMs stay on their sources, running).
"""


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


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
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
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
    p.add_argument(
        "--actor",
        default=os.environ.get("RECONCILER_ACTOR") or f"reconciler@{socket.gethostname()}",
        help="with --repo: the Reconciler-Actor of the audit commit "
        "(default: $RECONCILER_ACTOR, else reconciler@<host>)",
    )
    p.set_defaults(handler=run)


class _Signals:
    """First SIGINT/SIGTERM: stop starting moves; second: abort the running ones.

    Before anything runs (observing, planning, the confirmation prompt) a signal simply ends
    the command, as KeyboardInterrupt.
    """

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.abort = threading.Event()
        self.received: int | None = None
        self.acting = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if not self.acting:
            self.received = signum
            raise KeyboardInterrupt
        if self.stop.is_set():
            self.abort.set()
        self.received = self.received or signum
        self.stop.set()

    @contextmanager
    def installed(self) -> Iterator[None]:
        old = {s: signal.signal(s, self.handle) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)


@contextmanager
def _released(lease: Any) -> Iterator[None]:
    try:
        yield
    finally:
        lease.release()


def _confirm(args: argparse.Namespace, plan: Plan, signals: _Signals) -> bool:
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


def build_ports(args: argparse.Namespace, desired: DesiredState) -> Any:
    """The real adapters behind the round's ports; libvirt is imported only here."""
    from reconciler.adapters.cluster_observer import LibvirtClusterObserver
    from reconciler.adapters.libvirt_migrator import LibvirtMigrator
    from reconciler.adapters.libvirt_recorder import LibvirtRecorder
    from reconciler.adapters.yaml_edit import PlacementFile
    from reconciler.engine.round import RoundPorts

    writer: Any = _Collected()  # with --repo the audit commit carries them to the repository
    if getattr(args, "state_checkout", None) is None:
        placement = cluster_folder(args.path) / "placement.yaml"
        writer = PlacementFile(placement) if placement.is_file() else None
    return RoundPorts(
        observer=LibvirtClusterObserver(desired.cluster, **observe_overrides(args)),
        migrator=LibvirtMigrator(desired),
        recorder=LibvirtRecorder(desired.cluster),
        status=status_store(args, desired.cluster.metadata.name),
        clock=SystemClock(),
        placement=writer,
    )


class _Collected:
    """The PlacementWriter of ``apply --repo``: the clone is read-only, the audit commit writes."""

    def write_placement(self, vms: dict[str, str]) -> bool:
        return bool(vms)


def run(args: argparse.Namespace) -> int:
    return run_once(args)[0]


def _record(args: argparse.Namespace, report: Any) -> None:
    """One audit commit for the executed batch on the state repository (``--repo``)."""
    from reconciler.adapters.status_file import status_json
    from reconciler.engine.audit import record_batch

    checkout = args.state_checkout
    plan = report.plan
    if plan is None or not report.results:
        return
    trigger = args.trigger
    if trigger is None:
        if any(m.reason.value == "Maintenance" for m in plan.moves):
            trigger = "maintenance"
        elif len(checkout.repo.parents(checkout.commit)) > 1:
            trigger = "merge"
        else:
            trigger = "manual"
    branch = args.audit_branch or checkout.branch
    commit = record_batch(
        checkout.repo,
        branch=branch,
        cluster=report.status.cluster,
        folder=checkout.path,
        results=report.results,
        own_moves=report.placement_written,
        status_json=status_json(report.status),
        plan_id=plan.plan_id,
        source=checkout.commit,
        trigger=trigger,
        actor=args.actor,
    )
    print(f"recorded as {commit[:12]} on {branch} of {checkout.repo.display_url}")


def run_once(args: argparse.Namespace, host: str | None = None) -> tuple[int, int, int]:
    """One apply round: (exit code, VMs moved, VMs still on ``host`` per the observation)."""
    from reconciler.adapters.lease_file import FileLease
    from reconciler.engine.round import run_round

    desired = load_desired(args)
    name = desired.cluster.metadata.name
    store = status_store(args, name)
    signals = _Signals()
    view = apply_view.View(json_output=args.format == "json", placement=desired.placement.spec.vms)
    lease = FileLease(store.path.parent / "lock", command="apply")
    if not lease.acquire():
        raise TerminalError(
            f"another reconciler acts on cluster {name!r}: {lease.holder() or 'unknown holder'}",
            hint=f"wait for it to finish (the lock is {lease.path}; it is released when its "
            "holder exits or dies)",
        )
    with _released(lease), signals.installed():
        ports = build_ports(args, desired)
        try:
            report = run_round(
                desired,
                ports,
                act=True,
                trigger="manual",
                confirm=lambda plan: _confirm(args, plan, signals),
                stop=signals.stop,
                abort=signals.abort,
                on_event=view.event,
                on_plan=view.plan,
            )
        except (ReconcilerError, KeyboardInterrupt):
            view.close()
            if signals.received == signal.SIGTERM:
                return EXIT_SIGTERM, 0, 0
            raise
        view.close()
    view.summary(report)
    if getattr(args, "state_checkout", None) is not None:
        _record(args, report)
    moved = sum(r.outcome is MoveOutcome.SUCCEEDED for r in report.results)
    left = 0
    if host is not None and report.snapshot is not None:
        left = sum(v.host == host for v in report.snapshot.vms) - sum(
            r.source == host for r in report.results if r.outcome is MoveOutcome.SUCCEEDED
        )
    if signals.received is not None:
        code = EXIT_SIGTERM if signals.received == signal.SIGTERM else EXIT_SIGINT
    elif report.results and any(r.outcome is not MoveOutcome.SUCCEEDED for r in report.results):
        code = EXIT_PARTIAL
    elif report.error is not None:
        code = EXIT_ERROR
    else:
        code = EXIT_OK
    return code, moved, left
