"""The fence command: exit 0 only confirms; a failure and a timeout do not, and the timeout
holds whatever the agent leaves behind. The status action: off, on, or unknown."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from reconciler.adapters.processes.fence import CommandFencer, status_command
from reconciler.model.recovery import Fence, FenceOutcome, PowerState, PowerStatus


def run(*argv: str, timeout: float = 5) -> tuple[FenceOutcome, str]:
    result = CommandFencer().fence(
        "kvm-07", Fence(command=list(argv), timeout=timedelta(seconds=timeout))
    )
    return result.outcome, result.detail


def test_exit_zero_confirms_and_the_host_is_substituted() -> None:
    outcome, detail = run(sys.executable, "-c", "import sys; print(sys.argv[1])", "{host}")
    assert outcome is FenceOutcome.OK
    assert detail == "kvm-07"


def test_a_non_zero_exit_is_a_failure() -> None:
    outcome, detail = run(sys.executable, "-c", "print('no power'); raise SystemExit(3)")
    assert outcome is FenceOutcome.FAILED
    assert detail == "exit 3: no power"


def test_a_command_that_hangs_is_killed_at_its_timeout() -> None:
    began = time.monotonic()
    outcome, _ = run(sys.executable, "-c", "import time; time.sleep(60)", timeout=1)
    assert outcome is FenceOutcome.TIMEOUT
    assert time.monotonic() - began < 10


def test_a_missing_command_is_a_failure() -> None:
    outcome, detail = run("/nonexistent/fence_agent")
    assert outcome is FenceOutcome.FAILED
    assert "cannot run" in detail


# --- a fence agent that leaves a process behind ---------------------------------------------

GRANDCHILD_LIFE = 30


@pytest.fixture
def pidfile(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "grandchild.pid"
    yield path
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(path.read_text()), signal.SIGKILL)


def _agent(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fence_fake"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _leave_grandchild(pidfile: Path) -> str:
    """A grandchild in a session of its own (out of the fence's process group), holding
    stdout; it writes its own pid for the teardown."""
    return (
        f"setsid sh -c 'echo $$ > {pidfile}; exec sleep {GRANDCHILD_LIFE}' &\n"
        f"while [ ! -s {pidfile} ]; do sleep 0.01; done\n"
    )


def test_a_hanging_fence_whose_grandchild_holds_stdout_gives_up_at_its_timeout(
    tmp_path: Path, pidfile: Path
) -> None:
    agent = _agent(tmp_path, _leave_grandchild(pidfile) + "sleep 60\n")
    began = time.monotonic()
    outcome, detail = run(agent, "{host}", timeout=2)
    elapsed = time.monotonic() - began
    assert outcome is FenceOutcome.TIMEOUT
    assert "ran longer than 2 s" in detail
    assert elapsed < GRANDCHILD_LIFE / 5


def test_a_fence_that_exits_zero_leaving_a_grandchild_on_stdout_is_confirmed(
    tmp_path: Path, pidfile: Path
) -> None:
    agent = _agent(tmp_path, _leave_grandchild(pidfile) + "echo 'Success: Powered OFF'\n")
    began = time.monotonic()
    outcome, detail = run(agent, timeout=10)
    assert outcome is FenceOutcome.OK
    assert detail == "Success: Powered OFF"
    assert time.monotonic() - began < 5


def test_a_fence_that_never_exits_is_killed_at_its_timeout(tmp_path: Path) -> None:
    agent = _agent(tmp_path, "trap '' TERM INT HUP\nwhile :; do sleep 0.1; done\n")
    began = time.monotonic()
    outcome, _ = run(agent, timeout=1)
    assert outcome is FenceOutcome.TIMEOUT
    assert time.monotonic() - began < 5


def test_a_fence_that_talks_a_lot_keeps_its_last_words(tmp_path: Path) -> None:
    agent = _agent(tmp_path, "yes chatter | head -c 5000000\necho 'BMC refused'\nexit 1\n")
    outcome, detail = run(agent, timeout=20)
    assert outcome is FenceOutcome.FAILED
    assert detail.startswith("exit 1: ")
    assert detail.endswith("BMC refused")
    assert len(detail) < 400


# --- the status action ----------------------------------------------------------------------


def _status_agent(tmp_path: Path, answers: str) -> str:
    """A fake fence agent: it records its arguments and answers the status action as
    fence-agents do (``Status: ON`` exit 0, ``Status: OFF`` exit 2) from ``answers``, a file
    holding ``on``, ``off`` or a script of its own."""
    path = tmp_path / "fence_scripted"
    path.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {tmp_path}/calls\n'
        f"state=$(cat {answers})\n"
        'case "$*" in *status*) ;; *) echo "Success: Powered OFF"; exit 0;; esac\n'
        'case "$state" in\n'
        '  on) echo "Status: ON"; exit 0;;\n'
        '  off) echo "Status: OFF"; exit 2;;\n'
        '  *) echo "Failed: Unable to obtain correct plug status or plug is not available"; '
        "exit 1;;\n"
        "esac\n"
    )
    path.chmod(0o755)
    return str(path)


def status(
    tmp_path: Path, state: str, *command: str, explicit: list[str] | None = None
) -> PowerStatus:
    answers = tmp_path / "state"
    answers.write_text(state)
    agent = _status_agent(tmp_path, str(answers))
    fence = Fence(command=[agent, *command], timeout=timedelta(seconds=5))
    return CommandFencer().status("kvm-07", fence, None if explicit is None else [agent, *explicit])


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls").read_text().splitlines()


def test_status_off_from_a_fence_agent(tmp_path: Path) -> None:
    got = status(tmp_path, "off", "--ip={host}-bmc", "--action=off")
    assert got.state is PowerState.OFF
    assert got.detail == "Status: OFF"
    assert calls(tmp_path) == ["--ip=kvm-07-bmc --action=status"]


def test_status_on_from_a_fence_agent(tmp_path: Path) -> None:
    got = status(tmp_path, "on", "--ip=bmc", "-o", "off")
    assert got.state is PowerState.ON
    assert calls(tmp_path) == ["--ip=bmc -o status"]


def test_status_of_an_agent_without_an_action_asks_for_status(tmp_path: Path) -> None:
    got = status(tmp_path, "off", "--ip=bmc")
    assert got.state is PowerState.OFF
    assert calls(tmp_path) == ["--ip=bmc --action=status"]


def test_an_explicit_status_action_is_run_as_given(tmp_path: Path) -> None:
    got = status(tmp_path, "off", "--action=off", explicit=["status", "{host}"])
    assert got.state is PowerState.OFF
    assert calls(tmp_path) == ["status kvm-07"]


def test_a_failing_status_action_is_unknown_never_off(tmp_path: Path) -> None:
    got = status(tmp_path, "broken", "--action=off")
    assert got.state is PowerState.UNKNOWN
    assert got.detail.startswith("exit 1: Failed: Unable to obtain")


@pytest.mark.parametrize(
    ("said", "code", "state"),
    [
        ("Status: OFF", 2, PowerState.OFF),
        ("off", 0, PowerState.OFF),
        ("Status: ON", 0, PowerState.ON),
        ("ON", 0, PowerState.ON),
        ("Status: ON", 2, PowerState.UNKNOWN),  # the words and the exit disagree
        ("Status: OFF", 1, PowerState.UNKNOWN),
        ("Status: OFF\nStatus: ON", 0, PowerState.UNKNOWN),
        ("power is off, probably", 0, PowerState.UNKNOWN),
        ("", 0, PowerState.UNKNOWN),
    ],
)
def test_what_a_status_action_says(tmp_path: Path, said: str, code: int, state: PowerState) -> None:
    script = tmp_path / "say"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' '{said}'\nexit {code}\n")
    script.chmod(0o755)
    fence = Fence(command=[str(script), "--action=off"], timeout=timedelta(seconds=5))
    assert CommandFencer().status("kvm-07", fence).state is state


def test_a_status_action_that_hangs_is_unknown_at_the_timeout(tmp_path: Path) -> None:
    agent = _agent(tmp_path, 'case "$*" in *status*) sleep 60;; esac\n')
    fence = Fence(command=[agent, "--action=off"], timeout=timedelta(seconds=1))
    began = time.monotonic()
    got = CommandFencer().status("kvm-07", fence)
    assert got.state is PowerState.UNKNOWN
    assert "ran longer than 1 s" in got.detail
    assert time.monotonic() - began < 5


def test_a_command_without_a_status_action_is_unknown_without_running_it(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "power-off"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    fence = Fence(command=[str(script), "{host}"], timeout=timedelta(seconds=5))
    got = CommandFencer().status("kvm-07", fence)
    assert got.state is PowerState.UNKNOWN
    assert "has no status action" in got.detail
    assert not marker.exists()


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            ["fence_ipmilan", "--ip=x", "--action=off"],
            ["fence_ipmilan", "--ip=x", "--action=status"],
        ),
        (["fence_ipmilan", "--action", "reboot"], ["fence_ipmilan", "--action", "status"]),
        (["fence_redfish", "-o", "off", "-a", "x"], ["fence_redfish", "-o", "status", "-a", "x"]),
        (["fence_redfish", "-ooff"], ["fence_redfish", "-ostatus"]),
        (
            ["/usr/sbin/fence_ipmilan", "--ip=x"],
            ["/usr/sbin/fence_ipmilan", "--ip=x", "--action=status"],
        ),
        (["/usr/local/bin/power-off", "{host}"], None),
    ],
)
def test_the_status_command_derived_from_a_fence_command(
    command: list[str], expected: list[str] | None
) -> None:
    assert status_command(command) == expected
