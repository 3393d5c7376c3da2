"""deploy/fleet.conf: the drop-in that makes deploy/reconciler.service one instance of a fleet.

systemd's own tool verifies the unit with the drop-in applied (a copy whose ExecStart is this
checkout's ``reconciler``, as tests/deploy/test_service_unit.py does), and the URL it sets is
one ``run --coordination`` takes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.adapters.etcd.membership import ToozMembership
from tests.deploy.promtools import DEPLOY

UNIT = DEPLOY / "reconciler.service"
DROPIN = DEPLOY / "fleet.conf"
INSTALLED = "/opt/reconciler/.venv/bin/reconciler"


def _coordination() -> str:
    (line,) = (x for x in DROPIN.read_text().splitlines() if x.startswith("Environment="))
    key, value = line.removeprefix("Environment=").split("=", 1)
    assert key == "RECONCILER_COORDINATION"
    return value


def test_the_unit_with_the_dropin_verifies_clean(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    here = Path(sys.executable).with_name("reconciler")
    copy = tmp_path / "reconciler.service"
    copy.write_text(UNIT.read_text().replace(f"ExecStart={INSTALLED} ", f"ExecStart={here} "))
    (tmp_path / "reconciler.service.d").mkdir()
    shutil.copy(DROPIN, tmp_path / "reconciler.service.d" / "fleet.conf")
    done = subprocess.run([tool, "verify", str(copy)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == ""


def test_the_dropin_names_an_etcd_run_takes() -> None:
    url = _coordination()
    assert url.startswith("etcd3+http")
    ToozMembership(url, "check")  # refused at once if the URL were not one it can use
