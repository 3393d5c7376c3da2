"""One confirmed round over the acting path, as ``apply`` and ``drain --apply`` run it: the plan
shown, the confirmation, live progress, the summary and the exit code.

A request refused for lack of a terminal never gets here (``requests.confirmation_of``). A dry
run holds nothing and is a look; otherwise the cluster is held from before the observation
until the record is written, and an answer "no" writes nothing and gives the hold back.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reconciler.cli import apply_view
from reconciler.cli.acting import ActingPath
from reconciler.cli.common import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, EXIT_SIGINT, EXIT_SIGTERM
from reconciler.cli.requests import ActRequest, Confirmation
from reconciler.cli.signals import Signals
from reconciler.errors import ReconcilerError
from reconciler.model.plan import Plan
from reconciler.model.status import MoveOutcome

if TYPE_CHECKING:
    from reconciler.engine.round import RoundReport


@dataclass(frozen=True)
class Applied:
    """What one round did, for its command."""

    code: int
    moved: int
    """VMs moved."""
    left: int
    """VMs still on the host asked about, as the round observed them and moved them away."""


def exit_code(report: RoundReport, received: int | None) -> int:
    """The exit code of a round, as apply --help tells it: 130/143 after SIGINT/SIGTERM; 1
    when nothing was started because the cluster was never observed completely, or on an
    error; 3 when some move failed or was skipped, a person's placement change was kept over
    the round's, or the record was not written; else 0."""
    if received is not None:
        return EXIT_SIGTERM if received == signal.SIGTERM else EXIT_SIGINT
    if report.not_acting is not None:
        return EXIT_ERROR
    if _partial(report):
        return EXIT_PARTIAL
    return EXIT_ERROR if report.error is not None else EXIT_OK


def _partial(report: RoundReport) -> bool:
    failed = any(r.outcome is not MoveOutcome.SUCCEEDED for r in report.results)
    return failed or bool(report.conflicts) or report.record_error is not None


class Applying:
    """Rounds of one request, each confirmed as the request says (``drain --apply`` runs
    several, one after the other)."""

    def __init__(self, request: ActRequest, *, json_output: bool) -> None:
        self.request = request
        self.path = ActingPath(request)
        self.json_output = json_output

    def once(self, host: str | None = None) -> Applied:
        """One round: observe, plan, show, confirm, act, record, report."""
        loaded = self.path.source.load()
        desired = loaded.desired
        signals = Signals(interrupt_before_acting=True)
        view = apply_view.View(json_output=self.json_output, placement=desired.placement.spec.vms)
        looks = self.request.confirmation is Confirmation.DRY_RUN
        keeper = None
        if not looks:  # a look holds nothing; acting holds the cluster from plan to record
            keeper = self.path.hold(desired)
            self.path.take(keeper, desired.cluster.metadata.name)
        try:
            with signals.installed(), self.path.ports(desired, hold=keeper) as ports:
                try:
                    report = self.path.round(
                        loaded,
                        ports,
                        act=True,
                        holds=not looks,
                        trigger="manual",
                        merge=loaded.merge,
                        confirm=lambda plan: self._confirm(plan, signals),
                        stop=signals.stop,
                        abort=signals.abort,
                        on_event=view.event,
                        on_plan=view.plan,
                    )
                except (ReconcilerError, KeyboardInterrupt):
                    view.close()
                    if signals.received == signal.SIGTERM:
                        return Applied(EXIT_SIGTERM, 0, 0)
                    raise
                view.close()
        finally:
            if keeper is not None:
                keeper.stop()
        view.summary(report)
        self._report(report, commit=loaded.revision, interrupted=signals.received is not None)
        moved = sum(r.outcome is MoveOutcome.SUCCEEDED for r in report.results)
        left = 0
        if host is not None and report.snapshot is not None:
            left = sum(v.host == host for v in report.snapshot.vms) - sum(
                r.source == host for r in report.results if r.outcome is MoveOutcome.SUCCEEDED
            )
        return Applied(exit_code(report, signals.received), moved, left)

    def _confirm(self, plan: Plan, signals: Signals) -> bool:
        signals.acting = self._asked(plan)
        return signals.acting

    def _asked(self, plan: Plan) -> bool:
        if self.request.confirmation is Confirmation.DRY_RUN:
            return False
        if self.request.confirmation is Confirmation.YES:
            return True
        print(f"Apply {len(plan.moves)} migration(s)? [y/N] ", end="", file=sys.stderr, flush=True)
        return sys.stdin.readline().strip().lower() in ("y", "yes")

    def _report(self, report: RoundReport, *, commit: str | None, interrupted: bool) -> None:
        """After the summary: where the record went, conflicts, what kept the round from acting."""
        if report.recorded and not self.json_output:
            where = report.recorded[:12] if commit else report.recorded
            print(f"recorded as {where} in {self.path.source.describe()}")
        for line in report.conflicts:
            print(f"conflict: {line}", file=sys.stderr)
        if report.record_error is not None:
            print(
                f"error: the moves are done, but their record was not written: "
                f"{report.record_error.message}",
                file=sys.stderr,
            )
        if report.not_acting is not None and not interrupted:
            print(f"error: nothing was moved: {report.not_acting}", file=sys.stderr)
