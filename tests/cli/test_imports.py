"""A command imports what it uses and nothing more: start-up is paid on every run.

Each command runs in a fresh interpreter, as a user starts it; what it left in ``sys.modules``
is compared with what it can never need.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.model.base import HostName, VmName, VmUuid
from reconciler.model.snapshot import HostState, Snapshot, VmRunState, VmState

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "cluster-state"
GIB = 1 << 30

NEVER_OFFLINE = (
    "scipy",  # the exact planner's solver
    "numpy",
    "watchfiles",  # run's folder watcher
    "tooz",  # run's leader election
    "httpx",  # forges, metrics
    "libvirt",  # live observation and migration
    "git",
    "reconciler.adapters.libvirt",
    "reconciler.adapters.git",
    "reconciler.adapters.forges",
    "reconciler.adapters.etcd",
    "reconciler.adapters.http",
)
"""Modules no offline command on the example folder needs."""

NEVER_AT_START = (
    "logging",  # the engine's logs and a damaged state file's warning
    "xml.etree",  # domain XML, which a snapshot holds none of
)
"""Modules that ``validate`` and ``plan`` on the valid example folder never need."""

RUN = """\
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules))))  # registered first: runs last
from reconciler.cli import main_then_exit
main_then_exit()
"""


def imported_by(*argv: str | Path) -> tuple[int, set[str]]:
    """The exit code of ``reconciler ARGV``, run as its console script runs it, and every
    module it imported."""
    done = subprocess.run(
        [sys.executable, "-c", RUN, *map(str, argv)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=ROOT,
    )
    assert done.stdout, done.stderr
    return done.returncode, set(json.loads(done.stdout.splitlines()[-1]))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` imported, themselves or a submodule of them."""
    return [n for n in names if any(m == n or m.startswith(f"{n}.") for m in modules)]


def example_snapshot(where: Path) -> Path:
    """A snapshot of the example folder's three hosts and the VMs its Placement lists."""
    hosts = [
        HostState(
            name=HostName(f"kvm-0{i}"),
            uri=f"qemu+ssh://root@kvm-0{i}.example.net/system",
            reachable=True,
            arch="x86_64",
            cpus=32,
            memory_total=128 * GIB,
            memory_free=64 * GIB,
        )
        for i in (1, 2, 3)
    ]
    placed = {"web-1": "kvm-01", "web-2": "kvm-02", "web-3": "kvm-03", "db-1": "kvm-02"}
    vms = [
        VmState(
            name=VmName(name),
            uuid=VmUuid(f"00000000-0000-4000-8000-{n:012d}"),
            host=HostName(host),
            state=VmRunState.RUNNING,
            vcpus=4,
            memory_max=8 * GIB,
            memory_current=8 * GIB,
            uptime=86400.0,
        )
        for n, (name, host) in enumerate(placed.items())
    ]
    snapshot = Snapshot(
        cluster="lab", taken_at=datetime(2026, 1, 1, tzinfo=UTC), hosts=hosts, vms=vms
    )
    path = where / "snapshot.json"
    path.write_text(snapshot.model_dump_json(by_alias=True))
    return path


def test_validate_imports_no_planner_no_world() -> None:
    code, modules = imported_by("validate", EXAMPLE)
    assert code == 0
    assert loaded(modules, NEVER_OFFLINE) == []
    assert loaded(modules, NEVER_AT_START) == []
    # validate reads the folder: no snapshots, histories, status, plans or rounds
    assert (
        loaded(
            modules,
            (
                "reconciler.engine",
                "reconciler.core.planner",
                "reconciler.report",
                "reconciler.model.history",
                "reconciler.model.status",
                "reconciler.model.plan",
                "reconciler.adapters.files.snapshot",
                "reconciler.adapters.files.status",
                "jsonpatch",
            ),
        )
        == []
    )


@pytest.mark.parametrize(
    ("fmt", "unused"),
    [
        ("table", ("reconciler.report.plan_json", "reconciler.report.plan_markdown")),
        ("json", ("reconciler.report.plan_table", "reconciler.report.plan_markdown")),
    ],
)
def test_an_offline_plan_imports_its_format_alone(
    tmp_path: Path, fmt: str, unused: tuple[str, ...]
) -> None:
    snapshot = example_snapshot(tmp_path)
    args = ("plan", EXAMPLE, "--snapshot", snapshot, "--format", fmt)
    code, modules = imported_by(*args, "--state-dir", tmp_path / "state")
    assert code in (0, 2)
    assert "reconciler.core.planner" in modules  # it did plan
    assert loaded(modules, NEVER_OFFLINE) == []
    assert loaded(modules, ("reconciler.core.whatif", "jsonpatch", *unused)) == []
    assert loaded(modules, NEVER_AT_START) == []


def test_the_check_sees_an_import() -> None:
    """What the tests above rely on: a module a command does import is found."""
    code, modules = imported_by("validate", EXAMPLE)
    assert code == 0
    assert loaded(modules, ("reconciler.config", "pydantic")) == ["reconciler.config", "pydantic"]


def test_an_apply_without_rollouts_imports_no_rollout_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A look at a cluster that declares no rollout, and writes nothing: no rollout engine,
    no comment-keeping YAML writer, no worker processes' pickling."""
    from reconciler.adapters import lab as lab_api

    lab = lab_api.start_lab(tmp_path / "lab", driver="test")
    monkeypatch.setenv("RECONCILER_LOCK_DIR", str(tmp_path / "locks"))
    code, modules = imported_by(
        "apply", lab.cluster_dir, "--dry-run", "--state-dir", tmp_path / "state"
    )
    assert code == 0
    assert "reconciler.engine.round" in modules  # it did run a round
    assert "libvirt" in modules
    unused = (
        "reconciler.engine.rollouts",
        "reconciler.core.rollout",
        "reconciler.core.rollout_vms",
        "reconciler.config.rollout_checks",
        "reconciler.config.yaml_edit",
        "ruamel",
        "pickle",
        "scipy",
        "watchfiles",
        "tooz",
        "httpx",
        "git",
    )
    assert loaded(modules, unused) == []


PLUGINS = """\
import atexit, sys
from pydantic.plugin import _loader
atexit.register(lambda: print("scanned" if _loader._plugins is not None else "not scanned"))
sys.argv[1:] = ["validate", sys.argv[1]]
from reconciler.cli import main_then_exit
main_then_exit()
"""


@pytest.mark.parametrize(
    ("env", "outcome"),
    [(None, "not scanned"), ("", "scanned"), ("some-plugin", "scanned")],
)
def test_the_command_looks_for_pydantic_plugins_only_when_asked(
    env: str | None, outcome: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off by default (no scan of every installed package's metadata on each start); a value
    of ``PYDANTIC_DISABLE_PLUGINS`` the user set, even empty, is left as it is."""
    monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    if env is not None:
        monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", env)
    done = subprocess.run(
        [sys.executable, "-c", PLUGINS, str(EXAMPLE)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == outcome
