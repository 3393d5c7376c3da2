"""What a person sees while ``apply`` runs: the plan, live progress, a summary.

On a terminal each running migration has a progress bar (VM, from -> to, percent of memory
sent, speed); elsewhere one plain line per decision and outcome. ``--format json`` prints only
the round's ReconcileStatus at the end.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from reconciler.model.quantity import format_size
from reconciler.model.status import MoveOutcome
from reconciler.report import plan_table

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from reconciler.engine.execute import Event
    from reconciler.engine.round import RoundReport
    from reconciler.model.migration import MigrationProgress
    from reconciler.model.plan import Plan
    from reconciler.model.snapshot import Snapshot


PROGRESS_EVERY = 10.0
"""Seconds between two progress lines of a migration off a terminal; a new pass after the
first, a new throttle or the switch to post-copy gets a line at once."""


def _memory_figures(p: MigrationProgress) -> str:
    """``pass 3, 46.6MiB left, writes 4.0MiB/s, 160MiB sent at 4.0MiB/s, throttled 20%``"""
    parts = [
        f"pass {p.iteration}" if p.iteration else "starting",
        f"{format_size(p.memory_remaining)} left",
    ]
    if p.dirty_rate:
        parts.append(f"writes {format_size(p.dirty_rate)}/s")
    parts.append(
        f"{format_size(p.data_processed)} sent at {format_size(int(p.bytes_per_second))}/s"
    )
    if p.throttle:
        parts.append(f"throttled {p.throttle}%")
    if p.post_copy:
        parts.append("post-copy")
    return ", ".join(parts)


class View:
    def __init__(
        self, *, json_output: bool, placement: dict[str, str], console: Console | None = None
    ) -> None:
        self.json = json_output
        self.console = console  # rich's own (stderr) unless given
        terminal = console.is_terminal if console is not None else sys.stderr.isatty()
        self.tty = terminal and not json_output
        self.progress: Progress | None = None
        self.tasks: dict[str, TaskID] = {}
        self.placement = placement
        self.shown: dict[str, tuple[int, int, bool, float]] = {}
        """Per VM: the pass, throttle, post-copy and time of its last progress line."""

    def plan(self, plan: Plan, snapshot: Snapshot) -> None:
        del snapshot
        if self.json:
            return
        print(plan_table.plan_table(plan, self.placement), end="", flush=True)

    def _bar(self) -> Progress:
        if self.progress is None:
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TransferSpeedColumn,
            )

            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(binary_units=True),
                TransferSpeedColumn(),
                TimeElapsedColumn(),
                transient=False,
                console=self.console,
            )
            self.progress.start()
        return self.progress

    def event(self, e: Event) -> None:
        if self.json:
            return
        m = e.move
        if self.tty:
            bar = self._bar()
            if e.kind == "start":
                self.tasks[m.vm] = bar.add_task(f"{m.vm} {m.source} -> {m.target}", total=m.memory)
            elif e.kind == "progress" and e.progress is not None and m.vm in self.tasks:
                p = e.progress
                bar.update(
                    self.tasks[m.vm],
                    total=p.data_total or m.memory,
                    completed=p.data_processed,
                )
                phase = ""
                if p.disk_total:  # a move that copies disks: say which phase it is in
                    phase = f" disks {p.disk_processed * 100 // p.disk_total}%"
                    if p.phase == "memory":
                        phase = " memory (disks copied)"
                if p.iteration > 1 or p.post_copy:  # a guest that writes: where it stands
                    phase += f" {_memory_figures(p)}"
                if phase:
                    bar.update(
                        self.tasks[m.vm], description=f"{m.vm} {m.source} -> {m.target}{phase}"
                    )
            elif e.kind in ("done", "skip") and e.result is not None:
                r = e.result
                task = self.tasks.get(m.vm)
                if task is not None:
                    bar.update(
                        task, description=f"{m.vm} {m.source} -> {m.target} {r.outcome.value}"
                    )
                    if r.outcome is MoveOutcome.SUCCEEDED:
                        bar.update(task, completed=bar.tasks[task].total or 0)
                else:
                    bar.console.print(f"{r.outcome.value} {m.vm}: {r.detail}")
            return
        if e.kind == "start":
            print(f"migrating {m.vm}: {m.source} -> {m.target} ({m.reason.value})", flush=True)
        elif e.kind == "progress" and e.progress is not None:
            p = e.progress
            key = (p.iteration, p.throttle, p.post_copy)
            last = self.shown.get(m.vm, (1, 0, False, 0.0))
            if (last[:3] != key and key != (0, 0, False)) or p.elapsed - last[3] >= PROGRESS_EVERY:
                self.shown[m.vm] = (*key, p.elapsed)
                print(f"progress {m.vm}: {_memory_figures(p)}", flush=True)
        elif e.kind in ("done", "skip") and e.result is not None:
            r = e.result
            extra = f" in {r.seconds:.1f}s" if r.seconds else ""
            helped = [
                f"{r.iterations} passes" if r.iterations and r.iterations > 1 else "",
                f"throttled up to {r.throttle}%" if r.throttle else "",
                "post-copy" if r.post_copy else "",
            ]
            if any(helped):
                extra += f" ({', '.join(h for h in helped if h)})"
            print(
                f"{r.outcome.value} {m.vm}: {m.source} -> {m.target}{extra}: {r.detail}", flush=True
            )

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def summary(self, report: RoundReport) -> None:
        if self.json:
            sys.stdout.write(report.status.model_dump_json(by_alias=True, indent=2) + "\n")
            return
        results = report.results
        count = {o: sum(r.outcome is o for r in results) for o in MoveOutcome}
        moved = sum(r.data_bytes or 0 for r in results if r.outcome is MoveOutcome.SUCCEEDED)
        downtimes = [r.downtime_ms for r in results if r.downtime_ms is not None]
        last = report.status.last_result
        seconds = (last.finished_at - last.started_at).total_seconds() if last else 0.0
        if not results:
            print("Nothing was moved.")
            if report.plan is not None and report.plan.moves and not report.acted:
                print("(not confirmed, a dry run, or the cluster not yet observed completely)")
            return
        print(
            f"\nSummary: {count[MoveOutcome.SUCCEEDED]} moved, {count[MoveOutcome.FAILED]} failed, "
            f"{count[MoveOutcome.SKIPPED]} skipped, {count[MoveOutcome.ABORTED]} aborted"
            f"{', interrupted' if report.interrupted else ''}; {seconds:.1f}s, "
            f"{format_size(moved)} sent"
            + (
                f", downtime total {sum(downtimes):.0f} ms, worst {max(downtimes):.0f} ms"
                if downtimes
                else ""
            )
        )
        for r in results:
            if r.outcome is not MoveOutcome.SUCCEEDED:
                print(f"  {r.outcome.value} {r.vm} ({r.source} -> {r.target}): {r.detail}")
        if report.placement_written:
            names = ", ".join(f"{k} -> {v}" for k, v in sorted(report.placement_written.items()))
            print(f"placement.yaml follows: {names}")
