"""Fixtures shared by every test package, and a visible skip for modules that need libvirt."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import settings

pytest_plugins = ["tests.lab_fixtures"]

# Wall-clock deadlines make property tests flaky on a busy CI machine; speed is measured in
# benchmarks/, not here.
settings.register_profile("reconciler", deadline=None)
settings.load_profile("reconciler")


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
