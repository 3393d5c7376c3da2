"""run's own load samples: the file that keeps the window across a restart, and the sampler
that reads every host with one call each, within a timeout."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import pytest

from reconciler.adapters.files.load_samples import FileLoadSamples
from reconciler.adapters.libvirt.sampler import LibvirtSampler
from reconciler.core.load_samples import HostSample, added
from reconciler.errors import TerminalError
from reconciler.model.load import LoadSpec
from tests.adapters.test_status_file import read_only_dir

__all__ = ["read_only_dir"]  # the fixture, shared

SPEC = LoadSpec.model_validate({"window": "2m", "sampleEvery": "10s"})


def test_the_samples_survive_a_restart(tmp_path: Path) -> None:
    store = FileLoadSamples("lab", tmp_path)
    assert store.load() is None
    samples = added(None, "lab", SPEC, [HostSample("a", 100.0, (("x", "u", 3, 5000),))], 100.0)
    store.save(samples)
    assert store.path == tmp_path / "lab" / "load-samples.json"
    again = FileLoadSamples("lab", tmp_path).load()  # another process, later
    assert again == samples
    assert again is not None
    assert again.vms["x"].readings == [(100.0, 5000, "a", 3)]
    assert [p.name for p in store.path.parent.iterdir()] == ["load-samples.json"]


def test_a_torn_file_is_a_warning_and_the_window_starts_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = FileLoadSamples("lab", tmp_path)
    store.path.parent.mkdir(parents=True)
    store.path.write_text('{"cluster": "lab", "every": 10, "vms": {"x": {"uu')
    with caplog.at_level(logging.WARNING):
        assert store.load() is None
    assert "treated as absent: the window starts again" in caplog.text


def test_a_read_only_state_directory_is_a_clear_error(read_only_dir: Path) -> None:
    store = FileLoadSamples("lab", read_only_dir)
    with pytest.raises(TerminalError, match="cannot write the load samples") as caught:
        store.save(added(None, "lab", SPEC, [], 1.0))
    assert caught.value.hint is not None
    assert "--state-dir" in caught.value.hint


def test_a_host_that_answers_one_that_cannot_be_reached_and_one_that_hangs() -> None:
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)  # accepts connections, never answers
        port = hung.getsockname()[1]
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            refused = closed.getsockname()[1]  # bound, not listening: refused
            sampler = LibvirtSampler(
                {
                    "ok": "test:///default",
                    "down": f"qemu+tcp://127.0.0.1:{refused}/system",
                    "hung": f"qemu+tcp://127.0.0.1:{port}/system",
                },
                connect_timeout=1,
                call_timeout=1,
            )
            try:
                started = time.monotonic()
                first = {s.host: s for s in sampler.sample()}
                took = time.monotonic() - started
                second = {s.host: s for s in sampler.sample()}
            finally:
                sampler.close()
    assert took < 5
    assert first["ok"].error is None
    # libvirt's test driver reports no CPU time: its domains give no reading
    assert first["ok"].vms == ()
    assert first["down"].error is not None
    assert "cannot connect" in first["down"].error
    assert first["hung"].error is not None
    assert "within" in first["hung"].error
    assert second["ok"].error is None
    assert second["hung"].error is not None
