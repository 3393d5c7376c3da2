"""deploy/reconciler.service: systemd's own tools rate and verify it, and the sandbox leaves
open what the reconciler needs (libvirt's sockets, the network, its two directories).

``systemd-analyze verify`` checks that ExecStart's binary exists; the unit names
``/opt/reconciler/.venv/bin/reconciler``, which a test machine does not have, so it verifies a
copy whose ExecStart is this checkout's ``reconciler`` (the same entry point), nothing else
changed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.promtools import DEPLOY, REPO

UNIT = DEPLOY / "reconciler.service"
INSTALLED = "/opt/reconciler/.venv/bin/reconciler"
MAX_EXPOSURE = 4.0
"""systemd-analyze's "OK" ends at 4.0 (below it "MEDIUM", "EXPOSED", "UNSAFE")."""


def _analyze(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    return subprocess.run([tool, *args], capture_output=True, text=True, check=False)


def _settings() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


def test_systemd_analyze_security_rates_the_unit_ok() -> None:
    done = _analyze("security", "--offline=yes", "--no-pager", str(UNIT))
    if "--offline" in done.stderr and done.returncode != 0:
        pytest.skip(f"this systemd-analyze has no --offline: {done.stderr.strip()}")
    match = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", done.stdout)
    assert match is not None, done.stdout + done.stderr
    score, verdict = float(match.group(1)), match.group(2)
    assert score <= MAX_EXPOSURE, f"exposure {score} {verdict}"
    assert verdict in {"OK", "SAFE"}
    header = UNIT.read_text().splitlines()[4]
    assert f"rates it {score} {verdict}" in header, "the unit's comment quotes another score"


def test_systemd_analyze_verify_is_clean(tmp_path: Path) -> None:
    here = Path(sys.executable).with_name("reconciler")
    assert here.exists(), "the project is not installed in this interpreter's environment"
    text = UNIT.read_text()
    assert f"ExecStart={INSTALLED} " in text
    copy = tmp_path / "reconciler.service"
    copy.write_text(text.replace(f"ExecStart={INSTALLED} ", f"ExecStart={here} "))
    done = _analyze("verify", str(copy))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
    assert done.stderr.strip() == ""


def test_the_sandbox_leaves_open_what_the_reconciler_needs() -> None:
    unit = _settings()
    families = " ".join(unit["RestrictAddressFamilies"]).split()
    assert {"AF_UNIX", "AF_INET", "AF_INET6"} <= set(families)  # libvirt sockets, ssh, git
    assert "PrivateNetwork" not in unit
    assert "IPAddressDeny" not in unit
    assert "PrivateUsers" not in unit  # would hide the libvirt group from the socket's check
    assert unit["SupplementaryGroups"] == ["libvirt"]
    for key in ("InaccessiblePaths", "TemporaryFileSystem", "BindPaths"):
        assert key not in unit, f"{key} may hide /run/libvirt, ssh or git"
    assert unit["StateDirectory"] == ["reconciler"]
    assert unit["CacheDirectory"] == ["reconciler"]
    (start,) = unit["ExecStart"]
    assert "--state-dir /var/lib/reconciler" in start
    assert "--cache-dir /var/cache/reconciler" in start
    assert unit["ProtectSystem"] == ["strict"]  # so nothing else is writable


def test_documentation_points_at_the_docs_of_this_repository() -> None:
    links = _settings()["Documentation"]
    assert links
    for link in links:
        match = re.fullmatch(
            r"https://github\.com/placement-reconciler/reconciler/blob/main/(docs/[\w.]+)", link
        )
        assert match is not None, link
        assert (REPO / match.group(1)).is_file(), link
