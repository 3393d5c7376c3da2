"""A short soak: hundreds of real rounds leave memory, threads and file descriptors flat."""

from __future__ import annotations

from tests.engine.soak import soak


def test_rounds_leave_memory_threads_and_fds_flat_and_a_flapping_host_gets_nothing() -> None:
    figures = soak(400)
    assert figures.rounds == 400
    assert figures.migrations > 0  # the soak really acts, it is not only observing
    assert figures.flap_migrations == 0
    assert figures.threads[1] == figures.threads[0]
    assert figures.fds[1] == figures.fds[0]
    assert figures.memory_growth_kib < 512, figures
