"""The runner of external commands, with real processes: its timeout bounds the whole call
(a ``setsid`` grandchild holding the output pipe included), output is bounded, secrets stay
off argv and out of the output. (What becomes of the whole process tree: test_process_tree.)"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.processes.runner import run_command
from reconciler.redact import MASK
from tests.lab_fixtures import pid_alive
from tests.waiting import waited

GRANDCHILD_LIFE = 30
"""Seconds the grandchild of these tests would hold the pipe if nobody killed it."""


@pytest.fixture
def pidfile(tmp_path: Path) -> Iterator[Path]:
    """Where a script writes the pid of the grandchild it leaves behind; the grandchild is
    killed (by that pid) at teardown."""
    path = tmp_path / "grandchild.pid"
    yield path
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(path.read_text()), signal.SIGKILL)


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "cmd.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _setsid_grandchild(pidfile: Path) -> str:
    """Shell that starts a grandchild in a session of its own, holding stdout, and writes
    its pid to ``pidfile`` (setsid forks when the shell made it a group leader: the pid is
    the grandchild's own, written by it)."""
    return (
        f"setsid sh -c 'echo $$ > {pidfile}; exec sleep {GRANDCHILD_LIFE}' &\n"
        f"while [ ! -s {pidfile} ]; do sleep 0.01; done\n"
    )


def test_exit_status_and_output_of_a_command() -> None:
    result = run_command(
        [
            sys.executable,
            "-c",
            "import sys; print('out'); print('err', file=sys.stderr); raise SystemExit(4)",
        ],
        timeout=10,
    )
    assert result.returncode == 4
    assert not result.ok
    assert not result.timed_out
    assert result.output.split() == ["out", "err"]
    assert result.describe(10) == "exit 4"


def test_success() -> None:
    result = run_command(["true"], timeout=10)
    assert result.ok
    assert result.output == ""
    assert result.error is None


def test_a_command_that_never_exits_is_killed_at_its_timeout(tmp_path: Path) -> None:
    # it ignores SIGTERM and keeps writing: only the group's SIGKILL ends it
    cmd = _script(tmp_path, "trap '' TERM\nwhile true; do echo tick; sleep 0.1; done\n")
    began = time.monotonic()
    result = run_command([cmd], timeout=1)
    elapsed = time.monotonic() - began
    assert result.timed_out
    assert result.returncode is None
    assert not result.ok
    assert "tick" in result.output
    assert elapsed < 5
    assert "ran longer than 1 s and was killed" in result.describe(1)


def test_a_setsid_grandchild_holding_stdout_does_not_hold_the_timeout_and_is_ended(
    tmp_path: Path, pidfile: Path
) -> None:
    cmd = _script(tmp_path, _setsid_grandchild(pidfile) + "echo started\nsleep 60\n")
    began = time.monotonic()
    result = run_command([cmd], timeout=1)
    elapsed = time.monotonic() - began
    assert result.timed_out
    assert "started" in result.output
    assert not pid_alive(int(pidfile.read_text()))  # out of the group, not out of the tree
    assert elapsed < GRANDCHILD_LIFE / 6


def test_a_command_that_exits_leaving_a_grandchild_on_its_stdout_is_done_when_it_exits(
    tmp_path: Path, pidfile: Path
) -> None:
    cmd = _script(tmp_path, _setsid_grandchild(pidfile) + "echo 'Success: Powered OFF'\n")
    began = time.monotonic()
    result = run_command([cmd], timeout=10)
    elapsed = time.monotonic() - began
    assert result.ok
    assert not result.timed_out
    assert result.output.strip() == "Success: Powered OFF"
    assert elapsed < 5


def test_what_a_command_leaves_in_its_group_is_killed_when_it_exits(tmp_path: Path) -> None:
    pid = tmp_path / "child.pid"
    cmd = _script(tmp_path, f"sleep 60 > /dev/null &\necho $! > {pid}\n")
    result = run_command([cmd], timeout=10)
    assert result.ok
    left = int(pid.read_text())
    # a killed process ends when it next runs: a bounded wait
    if waited(lambda: not pid_alive(left), 10, every=0.02) is None:
        os.kill(left, signal.SIGKILL)
        pytest.fail("the background child outlived the command")


def test_output_is_bounded_keeping_its_beginning_and_end() -> None:
    code = "import sys; sys.stdout.write('BEGIN' + 'x' * 2_000_000 + 'END')"
    result = run_command([sys.executable, "-c", code], timeout=20, max_output=1000)
    assert result.ok
    assert result.output.startswith("BEGIN")
    assert result.output.endswith("END")
    assert result.dropped == 2_000_008 - 1000
    assert len(result.output.encode()) < 1100


def test_input_reaches_stdin() -> None:
    result = run_command(
        [sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"],
        timeout=10,
        input=b"password=hunter22\n" * 20_000,  # more than a pipe holds
        max_output=1024 * 1024,
    )
    assert result.ok
    assert result.dropped == 0
    assert result.output.count("PASSWORD=HUNTER22") == 20_000


def test_a_missing_command_does_not_start() -> None:
    result = run_command(["/nonexistent/agent"], timeout=5)
    assert result.returncode is None
    assert not result.timed_out
    assert result.error is not None
    assert "cannot run /nonexistent/agent" in result.error


def test_a_secret_is_never_put_on_argv() -> None:
    result = run_command(["echo", "--password=s3cr3t-value"], timeout=5, secrets=["s3cr3t-value"])
    assert result.returncode is None
    assert result.error is not None
    assert "holds a secret" in result.error
    assert all("s3cr3t-value" not in a for a in result.argv)


def test_a_password_in_a_url_is_never_put_on_argv() -> None:
    result = run_command(["echo", "https://admin:pw1234@bmc.example.net/"], timeout=5)
    assert result.returncode is None
    assert result.error is not None


def test_a_secret_in_the_environment_is_scrubbed_from_the_output() -> None:
    result = run_command(
        [sys.executable, "-c", "import os; print('using', os.environ['BMC_PASSWORD'])"],
        timeout=10,
        env={"BMC_PASSWORD": "t0ps3cret-bmc"},
        secrets=["t0ps3cret-bmc"],
    )
    assert result.ok
    assert result.output.strip() == f"using {MASK}"


def test_the_reconcilers_own_secrets_are_not_passed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECONCILER_GIT_TOKEN", "ghp_notforagents")
    result = run_command(
        [sys.executable, "-c", "import os; print(os.environ.get('RECONCILER_GIT_TOKEN'))"],
        timeout=10,
    )
    assert result.output.strip() == "None"


# --- the cut of the kept output never leaves part of a secret ---------------------------------

SECRET = "t0ps3cret-bmc-0123456789"


@pytest.mark.parametrize("inside", [1, 5, len(SECRET) - 1])
@pytest.mark.parametrize("where", ["beginning", "end"])
def test_a_secret_the_cut_of_the_output_goes_through_shows_no_part_of_itself(
    where: str, inside: int
) -> None:
    # 1000 bytes kept: the first 500 and the last 500; the secret is printed so that the end
    # of the kept beginning (or the start of the kept end) falls inside it
    before = 500 - inside if where == "beginning" else 5000 - 500 - inside
    code = (
        "import os, sys\n"
        f"sys.stdout.write('x' * {before} + os.environ['BMC_PASSWORD'] + 'y' * "
        f"{5000 - before - len(SECRET)})\n"
    )
    result = run_command(
        [sys.executable, "-c", code],
        timeout=10,
        env={"BMC_PASSWORD": SECRET},
        secrets=[SECRET],
        max_output=1000,
    )
    assert result.ok
    assert result.dropped == 4000
    assert MASK in result.output
    shown = result.output.replace("x", " ").replace("y", " ")
    for i in range(len(SECRET) - 1):
        assert SECRET[i : i + 2] not in shown, (SECRET[i : i + 2], result.output)


def test_a_character_the_cut_goes_through_does_not_hide_a_secret() -> None:
    # the end of the kept beginning falls in the middle of the two bytes of the secret's
    # "\u00e9": what is kept of that character is left out, and the secret's beginning is
    # still seen and masked
    secret = "s3cr3t-\u00e9t\u00e9-value"
    code = (
        "import os, sys\n"
        "sys.stdout.buffer.write(b'x' * 492 + os.environ['BMC_PASSWORD'].encode() + "
        "b'y' * 5000)\n"
    )
    result = run_command(
        [sys.executable, "-c", code],
        timeout=10,
        env={"BMC_PASSWORD": secret},
        secrets=[secret],
        max_output=1000,
    )
    assert result.ok
    assert result.dropped > 0
    assert "s3cr3t" not in result.output
    assert "\ufffd" not in result.output
