"""The forecast's history on disk: a week of 1,000 VMs in a few MB, kept across a restart
(read back equal), and a file that is not one a warning naming it, read as absent."""

from __future__ import annotations

import logging
import math
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
from reconciler.errors import TerminalError
from reconciler.model.load import LoadSpec
from tests.fakes import FakeClock, FakeCluster, FakeHost, FakeSampler, FakeVm

WEEK_SLOTS = 7 * 288


def week_of(vms: int, seed: int = 1) -> LoadHistory:
    rng = np.random.default_rng(seed)
    values = rng.uniform(0, 16, size=(vms, WEEK_SLOTS)).astype(np.float16)
    values[0, :100] = np.nan  # unknown buckets stay unknown
    names = tuple(f"vm-{i:04d}.example.internal" for i in range(vms))
    uuids = tuple(f"{i:08d}-0000-4000-8000-000000000000" for i in range(vms))
    return LoadHistory("lab", 5_900_000, names, uuids, values)


def test_a_week_of_1000_vms_fits_in_a_few_mb_and_comes_back_equal(tmp_path: Path) -> None:
    store = FileLoadHistory("lab", tmp_path)
    history = week_of(1000)
    store.save(history)
    size = (tmp_path / "lab" / FILE_NAME).stat().st_size
    assert size < 4.5 * 1024**2, size  # 2 bytes a bucket: 4.03 MB of buckets, 0.08 MB of names
    back = FileLoadHistory("lab", tmp_path).load()  # another process, after a restart
    assert back is not None
    assert back.end == history.end
    assert back.names == history.names
    assert back.uuids == history.uuids
    assert np.array_equal(back.values, history.values, equal_nan=True)
    assert oct((tmp_path / "lab" / FILE_NAME).stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in (tmp_path / "lab").iterdir()] == [FILE_NAME]  # no temporary left


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b'{"cluster": "lab"}', "not a load history"),
        (b"reconciler load history 1\n{not json\n", "not a load history header"),
        (b"reconciler load history 1\nno end of header", "torn: its header has no end"),
        (
            b'reconciler load history 1\n{"cluster":"lab","end":1,"slots":4,"vms":[["a","u"]]}\n'
            + b"\x00\x3c" * 3,
            "torn: 6 bytes of buckets where 8 belong",
        ),
        (
            b'reconciler load history 1\n{"cluster":"other","end":1,"slots":1,"vms":[]}\n',
            "the history of cluster 'other'",
        ),
    ],
)
def test_a_file_that_is_not_a_history_is_a_warning_naming_it_and_read_as_absent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, said: str
) -> None:
    path = tmp_path / "lab" / FILE_NAME
    path.parent.mkdir()
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        assert FileLoadHistory("lab", tmp_path).load() is None
    assert str(path) in caplog.text
    assert said in caplog.text
    assert "starts again" in caplog.text


def test_a_state_directory_it_cannot_write_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "lab").write_text("a file where the cluster's folder belongs")
    with pytest.raises(TerminalError) as err:
        FileLoadHistory("lab", tmp_path).save(week_of(2))
    assert str(tmp_path / "lab") in err.value.message
    assert err.value.hint


def cycle(t: float) -> float:
    return 1.5 - math.cos(2 * math.pi * (t % 86400) / 86400)


def test_run_keeps_the_history_across_a_restart_and_plan_forecasts_from_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run's keeper with the real files: a bucket written once it ends, the history read back
    by a keeper started again, and the samples source forecasting from it."""
    monkeypatch.setattr(
        os, "fsync", lambda fd: None
    )  # 1,700 writes: the disk's flush is not tested here
    spec = LoadSpec.model_validate(
        {
            "window": "10m",
            "sampleEvery": "5m",
            "statistic": "forecast",
            "forecast": {"history": "3d"},
        }
    )
    clock = FakeClock(datetime(2026, 1, 5, tzinfo=UTC))
    cluster = FakeCluster("lab", [FakeHost("a")], [FakeVm("x", "a", vcpus=4)], clock=clock)
    sampler = FakeSampler(cluster)

    def keeper() -> SampleKeeper:
        return SampleKeeper(
            "lab",
            lambda: (spec, sampler),
            FileLoadSamples("lab", tmp_path),
            clock,
            history=FileLoadHistory("lab", tmp_path),
        )

    def sample_for(k: SampleKeeper, seconds: float) -> None:
        for _ in range(round(seconds / 300)):
            cluster.vms["x"].cpu_used = cycle(clock.now().timestamp())
            clock.advance(timedelta(seconds=k.once()))

    first = keeper()
    sample_for(first, 1.5 * 86400)
    kept = FileLoadHistory("lab", tmp_path).load()
    assert kept is not None
    assert kept.names == ("x",)
    sample_for(keeper(), 1.5 * 86400 + 600)  # run restarted: the history goes on
    kept = FileLoadHistory("lab", tmp_path).load()
    assert kept is not None
    assert int(np.count_nonzero(~np.isnan(kept.values[0]))) >= 3 * 288 - 3
    source = SamplesLoad(
        FileLoadSamples("lab", tmp_path), short=True, history=FileLoadHistory("lab", tmp_path)
    )
    got = source.window(cluster.observe(), spec, clock.now())
    assert got.load is not None
    assert got.load.forecast is not None
    assert got.load.forecast.used == ["x"]
    assert got.load.vms["x"].forecast is not None
    assert got.load.vms["x"].forecast_error is not None
