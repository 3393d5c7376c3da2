"""The lab reads nothing from the source tree: it runs from what a wheel of the project holds."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.adapters.lab import cluster_folder

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO / "reconciler" / "adapters" / "lab" / "assets"


@pytest.mark.parametrize("name", cluster_folder.EXAMPLE_DOCUMENTS)
def test_shipped_examples_equal_the_project_examples(name: str) -> None:
    shipped = (ASSETS / "cluster-state" / name).read_text()
    assert (
        shipped == (REPO / "cluster-state" / name).read_text()
    ), f"copy cluster-state/{name} to {ASSETS.relative_to(REPO)}/cluster-state/"


_RUN_FROM_BUILD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import reconciler.adapters.lab as lab
assert lab.__file__.startswith(sys.argv[1]), lab.__file__
started = lab.start_lab(Path(sys.argv[2]), driver="test")
print((started.cluster_dir / "rules.yaml").read_text())
lab.stop_lab(Path(sys.argv[2]))
"""


@pytest.mark.skipif(importlib.util.find_spec("setuptools") is None, reason="needs setuptools")
def test_lab_runs_from_the_built_package(tmp_path: Path) -> None:
    """``build_py`` lays out what a pure-Python wheel holds: packages and package data only.

    The lab then runs from that tree alone, in an isolated interpreter started outside the
    checkout, and still writes the example documents it ships.
    """
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(
        REPO / "reconciler", source / "reconciler", ignore=shutil.ignore_patterns("__pycache__")
    )
    build = tmp_path / "build"
    setup = "import setuptools; setuptools.setup()"
    subprocess.run(
        [sys.executable, "-c", setup, "-q", "build_py", "-d", str(build)],
        cwd=source,
        check=True,
        capture_output=True,
    )
    built = build / "reconciler" / "adapters" / "lab"
    assert (built / "lab_host.py").is_file(), "the daemon supervisor script ships"
    shipped = {p.relative_to(ASSETS) for p in ASSETS.rglob("*") if p.is_file()}
    assert {p.relative_to(built / "assets") for p in (built / "assets").rglob("*")} >= shipped
    run = subprocess.run(
        [sys.executable, "-I", "-c", _RUN_FROM_BUILD, str(build), str(tmp_path / "lab")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("# Written by `reconciler lab up`: a copy of the example's")
    assert cluster_folder.example_text("rules.yaml") in run.stdout
    assert not (tmp_path / "lab").exists()
