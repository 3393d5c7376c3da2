"""The forecast's history on disk with a short seasonal period: buckets of 12.5 s for a 10m
period, their width kept in the file and read back, and run's samples source forecasting a
10-minute cycle's peak from them; a file written before widths were kept reads as 5-minute
buckets."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from reconciler.adapters.files.load_history import FILE_NAME, FileLoadHistory
from reconciler.adapters.files.load_samples import FileLoadSamples
from reconciler.adapters.load.sources import SamplesLoad
from reconciler.core.load_history import LoadHistory
from reconciler.engine.sampling import SampleKeeper
from reconciler.model.load import LoadSpec
from tests.fakes import FakeClock, FakeCluster, FakeHost, FakeSampler, FakeVm

PERIOD = 600


def test_the_width_of_the_buckets_is_kept_and_an_older_file_reads_as_5_minutes(
    tmp_path: Path,
) -> None:
    values = np.full((1, 288), 0.5, dtype=np.float16)
    store = FileLoadHistory("lab", tmp_path)
    store.save(LoadHistory("lab", 144_000_000, ("x",), ("u",), values, 12.5))
    back = store.load()
    assert back is not None
    assert back.bucket == 12.5
    assert np.array_equal(back.values, values)
    path = tmp_path / "lab" / FILE_NAME
    store.save(LoadHistory("lab", 6_000_000, ("x",), ("u",), values))
    assert b'"bucket":300,' in path.read_bytes()  # as it was written before
    path.write_bytes(path.read_bytes().replace(b'"bucket":300,', b""))
    older = store.load()
    assert older is not None
    assert older.bucket == 300.0


def schedule(t: float) -> float:
    """0.1 cores, 0.95 from the 4th to the 7th minute of each 10."""
    return 0.95 if 240 <= t % PERIOD < 420 else 0.1


def test_run_keeps_a_10_minute_cycle_and_the_samples_source_sees_its_peak_coming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # the disk's flush is not tested here
    spec = LoadSpec.model_validate(
        {
            "window": "1m",
            "sampleEvery": "5s",
            "statistic": "forecast",
            "forecast": {"period": "10m", "history": "1h", "horizon": "3m", "weight": 1},
        }
    )
    start = datetime(2026, 1, 5, tzinfo=UTC)
    clock = FakeClock(start)
    cluster = FakeCluster("lab", [FakeHost("a")], [FakeVm("x", "a", vcpus=1)], clock=clock)
    sampler = FakeSampler(cluster)
    keeper = SampleKeeper(
        "lab",
        lambda: (spec, sampler),
        FileLoadSamples("lab", tmp_path),
        clock,
        history=FileLoadHistory("lab", tmp_path),
    )
    while clock.now() < start + timedelta(seconds=2 * PERIOD + 150):  # 90 s before a peak
        cluster.vms["x"].cpu_used = schedule(clock.now().timestamp())
        clock.advance(timedelta(seconds=keeper.once()))
    kept = FileLoadHistory("lab", tmp_path).load()
    assert kept is not None
    assert kept.bucket == 12.5
    source = SamplesLoad(
        FileLoadSamples("lab", tmp_path), short=True, history=FileLoadHistory("lab", tmp_path)
    )
    got = source.window(cluster.observe(), spec, clock.now())
    assert got.load is not None
    assert got.load.forecast is not None
    assert got.load.forecast.used == ["x"], got.load.forecast
    x = got.load.vms["x"]
    assert x.mean is not None
    assert x.mean < 0.15  # the window: the trough
    assert x.forecast is not None
    assert x.forecast > 0.3  # the forecast: the peak coming
    (used,) = (v.cpu_used for v in got.vms)
    assert used == pytest.approx(x.forecast, abs=1e-3)  # weight 1: the forecast alone
