"""Fixtures shared by every test package, and a visible skip for modules that need libvirt."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

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


NO_LIBVIRT = (
    "libvirt-python is not installed: pip install -e '.[libvirt]' (it builds against libvirt-dev "
    "and pkg-config), or make setup"
)


class _Module(pytest.Module):
    """A test module that skips, with the reason, when importing it needs the missing
    libvirt-python (the libvirt adapters import it at module level)."""

    def collect(self) -> Iterable[pytest.Item | pytest.Collector]:
        try:
            return super().collect()
        except self.CollectError as err:
            if importlib.util.find_spec("libvirt") is None and "No module named 'libvirt'" in str(
                err
            ):
                pytest.skip(f"{self.path.name}: {NO_LIBVIRT}", allow_module_level=True)
            raise


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module:
    return _Module.from_parent(parent, path=module_path)
