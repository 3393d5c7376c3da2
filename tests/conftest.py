"""Fixtures shared by every test package."""

pytest_plugins = ["tests.lab_fixtures"]
