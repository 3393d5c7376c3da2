"""``reconciler plan`` with statistic: forecast: which move was made ahead of time, in its
text and its JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from reconciler.cli import main
from tests.core.builders import NOW
from tests.core.test_forecast_plan import forecast_snapshot, policy


def test_plan_on_a_saved_snapshot_shows_the_moves_made_ahead_of_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``reconciler plan --snapshot``: the snapshot keeps the forecast it was read with, and
    the command's text and JSON say which move was made ahead of time."""
    d = policy()
    folder = tmp_path / "test"
    folder.mkdir()
    for name, doc in (
        ("cluster", d.cluster),
        ("policy", d.policy),
        ("rules", d.rules),
        ("placement", d.placement),
    ):
        data = doc.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    saved = tmp_path / "snapshot.json"
    saved.write_text(forecast_snapshot().model_dump_json(by_alias=True))
    args = [str(folder), "--snapshot", str(saved), "--state-dir", str(tmp_path / "state")]
    args += ["--now", NOW.isoformat()]
    assert main(["plan", *args]) == 2
    out = capsys.readouterr().out
    assert "ahead of time: forecast 44% at 12:00-12:30 UTC vs window 25% (h1)" in out
    assert main(["plan", *args, "--format", "json"]) == 2
    got = json.loads(capsys.readouterr().out)
    assert [(a["vm"], a["host"]) for a in got["load"]["ahead"]] == [("a", "h1")]
    assert {h["host"]: h["cpuForecast"] for h in got["hosts"]}["h2"] == 25.0
