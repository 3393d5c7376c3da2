"""Fixtures shared by every test package."""

from hypothesis import settings

pytest_plugins = ["tests.lab_fixtures"]

# Wall-clock deadlines make property tests flaky on a busy CI machine; speed is measured in
# benchmarks/, not here.
settings.register_profile("reconciler", deadline=None)
settings.load_profile("reconciler")
