"""A busy guest's migration as a person and a dashboard see it: progress lines with memory
left, dirty rate and pass; the gauges ``run`` exports while it runs; the outcome's line."""

from __future__ import annotations

import io

import pytest
from prometheus_client import generate_latest
from rich.console import Console

from reconciler.cli.apply_view import View
from reconciler.engine.execute import Event
from reconciler.engine.metrics import Metrics
from reconciler.model.migration import MigrationProgress
from reconciler.model.status import MoveOutcome, MoveResult
from tests.cli.test_apply_view import MOVE

MIB = 1024**2


def reading(elapsed: float, iteration: int, **figures: object) -> Event:
    progress = MigrationProgress.model_validate(
        {
            "vm": "web-1",
            "elapsed": elapsed,
            "iteration": iteration,
            "memory_remaining": 46 * MIB,
            "dirty_rate": 4 * MIB,
            "data_processed": 160 * MIB,
            "bytes_per_second": 4 * MIB,
            **figures,
        }
    )
    return Event("progress", MOVE, progress=progress)


DONE = MoveResult(
    vm="web-1",
    source="kvm-01",
    target="kvm-02",
    outcome=MoveOutcome.SUCCEEDED,
    reason="Balance",
    seconds=7.2,
    post_copy=True,
    iterations=3,
)


def test_off_a_terminal_a_line_per_new_pass_throttle_or_switch_and_every_10_s(
    capsys: pytest.CaptureFixture[str],
) -> None:
    view = View(json_output=False, placement={}, console=Console(file=io.StringIO()))
    view.event(Event("start", MOVE))
    for event in (
        reading(1.0, 1),  # the first pass: nothing to say yet
        reading(2.0, 2),  # a second pass
        reading(2.2, 2),
        reading(12.5, 2),  # 10 s later
        reading(13.0, 3, throttle=20),
        reading(13.2, 3, throttle=20, post_copy=True),
    ):
        view.event(event)
    view.event(Event("done", MOVE, result=DONE))
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "migrating web-1: kvm-01 -> kvm-02 (Balance)",
        "progress web-1: pass 2, 46MiB left, writes 4MiB/s, 160MiB sent at 4MiB/s",
        "progress web-1: pass 2, 46MiB left, writes 4MiB/s, 160MiB sent at 4MiB/s",
        "progress web-1: pass 3, 46MiB left, writes 4MiB/s, 160MiB sent at 4MiB/s, "
        "throttled 20%",
        "progress web-1: pass 3, 46MiB left, writes 4MiB/s, 160MiB sent at 4MiB/s, "
        "throttled 20%, post-copy",
        "succeeded web-1: kvm-01 -> kvm-02 in 7.2s (3 passes, post-copy): ",
    ]


def test_run_exports_each_running_migrations_figures_and_drops_them_when_it_ends() -> None:
    metrics = Metrics("lab")
    metrics.record_event(reading(13.0, 3, throttle=20, post_copy=True))
    text = generate_latest(metrics.registry).decode()
    for line in (
        'reconciler_migration_remaining_bytes{cluster="lab",vm="web-1"} 4.8234496e+07',
        'reconciler_migration_dirty_rate_bytes{cluster="lab",vm="web-1"} 4.194304e+06',
        'reconciler_migration_iteration{cluster="lab",vm="web-1"} 3.0',
        'reconciler_migration_throttle_percent{cluster="lab",vm="web-1"} 20.0',
        'reconciler_migration_post_copy{cluster="lab",vm="web-1"} 1.0',
    ):
        assert line in text
    metrics.record_event(Event("done", MOVE, result=DONE))
    assert 'vm="web-1"' not in generate_latest(metrics.registry).decode()
