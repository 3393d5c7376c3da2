"""``reconciler simulate`` replays a ``statistic: forecast`` policy beside the current one, on
three days of daily cycles: the forecast learns from the trace before each round."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from reconciler.cli.common import EXIT_OK
from tests.e2e.test_plan_cli import reconciler
from tests.e2e.test_simulate_cli import KINDS, folder

__all__ = ["folder"]  # the fixture


def cycles(where: Path, vms: int = 6, days: int = 3) -> Path:
    """A PlanetLab-format folder: each VM's CPU percentage every 300 s follows a daily cycle,
    the VMs peaking at different hours."""
    day = where / "days"
    day.mkdir(parents=True)
    for i in range(vms):
        lines = []
        for k in range(days * 288):
            phase = 2 * math.pi * (k % 288) / 288 + i
            lines.append(f"{round(50 + 45 * math.sin(phase))}\n")
        (day / f"vm{i}").write_text("".join(lines))
    return day


def test_a_forecast_policy_is_replayed_beside_the_current_one(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    kinds = tmp_path / "kinds.yaml"
    kinds.write_text(KINDS)
    ahead = tmp_path / "forecast.yaml"
    text = (folder / "policy.yaml").read_text()
    text = text.replace("statistic: mean ", "statistic: forecast ")
    text = text.replace("source: samples ", "source: prometheus ")
    assert "statistic: forecast" in text
    ahead.write_text(text)
    done = reconciler(
        capsys,
        "simulate",
        folder,
        "--trace",
        cycles(tmp_path),
        "--hosts",
        "2xbox",
        "--kinds",
        kinds,
        "--policy",
        ahead,
        "--format",
        "json",
    )
    assert done.code == EXIT_OK, done.err
    report = json.loads(done.out)
    assert [p["policy"] for p in report["policies"]] == ["current", "forecast"]
    current, forecast = report["policies"]
    assert forecast["rounds"] == current["rounds"] == 3 * 96
    assert forecast["unknownRounds"] == current["unknownRounds"]
