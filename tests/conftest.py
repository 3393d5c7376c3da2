"""Fixtures shared by every test package."""

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

pytest_plugins = ["tests.lab_fixtures"]

# Wall-clock deadlines make property tests flaky on a busy CI machine; speed is measured in
# benchmarks/, not here.
# The default profile is derandomized, so a run (CI's included) fails or passes the same way
# every time; HYPOTHESIS_PROFILE=explore searches new examples, more of them, on demand.
settings.register_profile("reconciler", deadline=None, derandomize=True)
settings.register_profile("explore", deadline=None, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "reconciler"))


@pytest.fixture(autouse=True, scope="session")
def _private_lock_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Cluster locks of this test session in a folder of its own: another session on the same
    machine (the same cluster names) must not hold them."""
    old = os.environ.get("RECONCILER_LOCK_DIR")
    os.environ["RECONCILER_LOCK_DIR"] = str(tmp_path_factory.mktemp("locks"))
    yield
    if old is None:
        os.environ.pop("RECONCILER_LOCK_DIR", None)
    else:
        os.environ["RECONCILER_LOCK_DIR"] = old
