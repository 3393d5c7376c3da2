"""Nothing a command started outlives it: real processes that leave their session (``setsid``),
double-fork, or are left behind by a command that exits in time; fences and rollout hooks
alike. Every process of a command's tree carries a tag in its environment, so what is left of
it is found in /proc whoever its parent is now."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from reconciler.adapters.processes.fence import CommandFencer
from reconciler.adapters.processes.rollout_commands import ProcessRolloutCommands
from reconciler.adapters.processes.runner import run_command
from reconciler.model.recovery import Fence, FenceOutcome
from reconciler.model.rollout import Command
from reconciler.model.rollout_progress import Target
from tests.waiting import waited

LATER = 1.0
"""Seconds after which a process left behind would leave its mark (the marker file)."""

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def tagged(tag: str) -> list[int]:
    """Live processes (zombies are not) whose environment holds ``TREE_TAG=tag``."""
    found = []
    needle = f"TREE_TAG={tag}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle in Path(f"/proc/{name}/environ").read_bytes().split(b"\0"):
                found.append(int(name))
    return found


@pytest.fixture
def tag() -> Iterator[str]:
    """A tag for one test's processes; whatever still has it at teardown is killed."""
    value = uuid.uuid4().hex
    os.environ["TREE_TAG"] = value  # inherited by run_command's commands (not by rollouts')
    yield value
    del os.environ["TREE_TAG"]
    for pid in tagged(value):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "hook.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def leave_behind(marker: Path, *, how: str, later: float = LATER) -> str:
    """Shell that leaves a process that writes ``marker`` in LATER seconds, by ``how``:
    ``setsid`` (a session of its own, out of the command's process group) or ``daemon`` (a
    double fork whose middle process exits, so it is an orphan, in a session of its own)."""
    work = f"sleep {later}; touch {marker}"
    if how == "setsid":
        return f"setsid sh -c '{work}' > /dev/null 2>&1 &\n"
    return f"( setsid sh -c '{work}' > /dev/null 2>&1 & ) \n"


def assert_ended(tag: str, marker: Path, began: float, later: float = LATER) -> None:
    assert tagged(tag) == [], "a process of the command's tree outlived the call"
    time.sleep(max(0.0, began + later + 0.5 - time.monotonic()))
    assert not marker.exists(), "a process left behind did its work later"


@pytest.mark.parametrize("how", ["setsid", "daemon"])
def test_a_hook_that_times_out_ends_with_everything_it_started(
    tmp_path: Path, tag: str, how: str
) -> None:
    marker = tmp_path / "marker"
    began = time.monotonic()
    result = run_command(
        [script(tmp_path, leave_behind(marker, how=how) + "sleep 60\n")], timeout=0.5
    )
    assert result.timed_out
    assert_ended(tag, marker, began)


@pytest.mark.parametrize("how", ["setsid", "daemon"])
def test_a_command_that_exits_in_time_ends_what_it_left_behind(
    tmp_path: Path, tag: str, how: str
) -> None:
    marker = tmp_path / "marker"
    began = time.monotonic()
    result = run_command(
        [script(tmp_path, leave_behind(marker, how=how) + "echo done\n")], timeout=10
    )
    assert result.ok
    assert result.output.strip() == "done"
    assert_ended(tag, marker, began)


def test_a_tree_that_keeps_forking_is_ended(tmp_path: Path, tag: str) -> None:
    # every process starts another in a session of its own and exits (200 of them, one
    # every 20 ms): the tree moves on while it is being ended
    chain = tmp_path / "chain.sh"
    chain.write_text(
        f'#!/bin/sh\nsleep 0.02\n[ "$1" -gt 0 ] && setsid {chain} $(($1 - 1)) &\nexit 0\n'
    )
    chain.chmod(0o755)
    marker = tmp_path / "marker"
    began = time.monotonic()
    result = run_command(
        [script(tmp_path, f"{chain} 200 &\n" + leave_behind(marker, how="daemon") + "sleep 60\n")],
        timeout=0.5,
    )
    assert result.timed_out
    assert_ended(tag, marker, began)


def test_a_fence_that_times_out_cannot_power_anything_off_later(tmp_path: Path, tag: str) -> None:
    off = tmp_path / "powered-off"
    agent = script(tmp_path, leave_behind(off, how="daemon", later=2) + "sleep 60\n")
    began = time.monotonic()
    result = CommandFencer().fence(
        "kvm-07", Fence(command=[agent, "{host}"], timeout=timedelta(seconds=1))
    )
    assert result.outcome is FenceOutcome.TIMEOUT
    assert_ended(tag, off, began, later=2)


def test_a_rollout_hook_that_times_out_leaves_nothing_to_run_beside_its_retry(
    tmp_path: Path, tag: str
) -> None:
    marker = tmp_path / "marker"
    hook = script(tmp_path, leave_behind(marker, how="setsid", later=2) + "sleep 60\n")
    run = ProcessRolloutCommands(
        tmp_path / "logs", environ={"PATH": os.environ["PATH"], "TREE_TAG": tag}
    )
    began = time.monotonic()
    done = run.run(
        "r",
        "command/upgrade",
        Command.model_validate({"argv": [hook], "timeout": "1s", "passEnv": ["TREE_TAG"]}),
        target=Target(host="kvm-02", uri="qemu:///system"),
    )
    assert not done.ok
    assert "with everything it started" in done.detail
    assert_ended(tag, marker, began, later=2)


def test_the_reconcilers_other_children_keep_their_exit_statuses(tmp_path: Path, tag: str) -> None:
    # commands that leave orphans run in threads beside subprocesses of the reconciler's own
    # (git, ssh): no exit status of those is taken by whatever ends the commands' trees
    statuses: list[int] = []
    errors: list[BaseException] = []

    def others() -> None:
        try:
            for _ in range(20):
                statuses.append(subprocess.run(["sh", "-c", "exit 7"], check=False).returncode)
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=others)
    thread.start()
    try:
        for i in range(3):
            marker = tmp_path / f"marker{i}"
            run_command([script(tmp_path, leave_behind(marker, how="daemon"))], timeout=10)
    finally:
        thread.join(30)
    assert errors == []
    assert statuses == [7] * 20


def test_a_command_that_cannot_start_says_why(tmp_path: Path) -> None:
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\n")
    for argv, why in (
        (["/nonexistent/agent"], "No such file or directory"),
        ([str(plain)], "Permission denied"),
        (["no-such-command-anywhere"], "No such file or directory"),
    ):
        result = run_command(argv, timeout=5)
        assert result.returncode is None
        assert result.error == f"cannot run {argv[0]}: {why}"


def test_the_exit_status_and_the_signal_of_the_command_are_its_own(tmp_path: Path) -> None:
    assert run_command(["sh", "-c", "exit 42"], timeout=5).returncode == 42
    killed = run_command(["sh", "-c", "kill -TERM $$"], timeout=5)
    assert killed.returncode == -signal.SIGTERM
    assert killed.describe(5) == "killed by signal 15"
    # it ignores no signal the keeper (a Python interpreter) ignores: a broken pipe ends it
    # as it would anywhere
    ignored = run_command(["sh", "-c", "grep SigIgn /proc/$$/status"], timeout=5).output.split()
    assert int(ignored[1], 16) & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)) == 0


def test_a_reconciler_killed_while_a_hook_runs_leaves_nothing_of_the_hooks_tree(
    tmp_path: Path, tag: str
) -> None:
    marker = tmp_path / "marker"
    hook = script(tmp_path, leave_behind(marker, how="daemon", later=2) + "sleep 60\n")
    code = (
        "from reconciler.adapters.processes.runner import run_command\n"
        f"run_command([{hook!r}], timeout=60)\n"
    )
    began = time.monotonic()
    reconciler = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).parents[2])
    try:
        # the reconciler, its keeper, the hook, its sleep, the process left behind and its sleep
        assert waited(lambda: len(tagged(tag)) >= 6, 10, every=0.02) is not None
        reconciler.kill()
        reconciler.wait(10)
        assert waited(lambda: tagged(tag) == [], 10, every=0.02) is not None, tagged(tag)
    finally:
        reconciler.kill()
        reconciler.wait(10)
    assert_ended(tag, marker, began, later=2)
