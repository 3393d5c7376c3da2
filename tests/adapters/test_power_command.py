"""The command driver with real programs: a script that keeps a host's power in a file, one
that outlives its timeout, one that fails; what a status command says is read as on, off or
unknown, and never unknown taken for off."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.adapters.power.command import CommandPower, said_state
from reconciler.errors import ConfigError, TerminalError, TransientError
from reconciler.model.power import HostPower
from reconciler.model.recovery import PowerState

SECRET = "cmd-Secret-4321"


def power_script(tmp_path: Path) -> Path:
    """``power.py ACTION HOST``: on and off write the host's state beside it (and the value
    of BMC_TOKEN it was given), status prints it as fence-agents do."""
    script = tmp_path / "power.py"
    script.write_text(
        f"#!{sys.executable}\n"
        "import os, sys, pathlib\n"
        "action, host = sys.argv[1], sys.argv[2]\n"
        "state = pathlib.Path(__file__).with_name(host + '.state')\n"
        "if action == 'status':\n"
        "    print('Status: ' + (state.read_text() if state.exists() else 'ON').upper())\n"
        "    print('token was ' + os.environ.get('BMC_TOKEN', 'absent'))\n"
        "    sys.exit(0 if not state.exists() or state.read_text() == 'on' else 2)\n"
        "state.write_text(action)\n"
        "print('env:', sorted(os.environ))\n"
    )
    script.chmod(0o755)
    return script


def command_power(script: Path, **more: object) -> HostPower:
    argv = [str(script)]
    return HostPower.model_validate({
        "driver": "command",
        "command": {
            "on": [*argv, "on", "{host}"],
            "off": [*argv, "off", "{host}"],
            "status": [*argv, "status", "{host}"],
            "passEnv": ["BMC_TOKEN"],
        },
        "timeout": "5s",
        **more,
    })  # fmt: skip


def test_a_host_is_powered_off_and_on_by_its_commands(tmp_path: Path) -> None:
    script = power_script(tmp_path)
    switch = CommandPower({"BMC_TOKEN": SECRET, "PATH": "/usr/bin:/bin"})
    power = command_power(script)
    status = switch.power_state("kvm-07", power)
    assert status.state is PowerState.ON, status
    assert SECRET not in status.detail  # the script printed it: scrubbed
    assert "token was ***" in status.detail

    switch.power_off("kvm-07", power)
    assert (tmp_path / "kvm-07.state").read_text() == "off"  # {host} replaced
    off = switch.power_state("kvm-07", power)
    assert off.state is PowerState.OFF, off  # exit 2 with OFF: the fence-agents way
    switch.power_on("kvm-07", power)
    assert switch.power_state("kvm-07", power).state is PowerState.ON


def test_the_command_gets_its_pass_env_and_nothing_else_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECONCILER_GIT_TOKEN", "git-token-5678")
    monkeypatch.setenv("UNRELATED", "kept-out")
    script = tmp_path / "env.py"
    script.write_text(f"#!{sys.executable}\nimport os\nprint(sorted(os.environ))\nprint('off')\n")
    script.chmod(0o755)
    power = HostPower.model_validate({
        "driver": "command",
        "command": {"on": [str(script)], "off": [str(script)], "status": [str(script)],
                    "passEnv": ["BMC_TOKEN"]},
    })  # fmt: skip
    switch = CommandPower({**os.environ, "BMC_TOKEN": SECRET})
    status = switch.power_state("kvm-07", power)
    assert status.state is PowerState.OFF
    assert "'BMC_TOKEN'" in status.detail
    assert "RECONCILER_GIT_TOKEN" not in status.detail
    assert "UNRELATED" not in status.detail


def test_a_missing_pass_env_variable_stops_the_call_before_anything_runs(tmp_path: Path) -> None:
    script = power_script(tmp_path)
    switch = CommandPower({})
    with pytest.raises(ConfigError, match="BMC_TOKEN .* not set"):
        switch.power_off("kvm-07", command_power(script))
    assert not (tmp_path / "kvm-07.state").exists()
    status = switch.power_state("kvm-07", command_power(script))
    assert status.state is PowerState.UNKNOWN
    assert "BMC_TOKEN" in status.detail


def test_a_command_past_its_timeout_is_stopped_and_transient(tmp_path: Path) -> None:
    power = HostPower.model_validate({
        "driver": "command",
        "command": {"on": ["sleep", "30"], "off": ["sleep", "30"], "status": ["sleep", "30"]},
        "timeout": "1s",
    })  # fmt: skip
    started = time.monotonic()
    with pytest.raises(TransientError, match="ran longer than 1s and was stopped"):
        CommandPower({}).power_off("kvm-07", power)
    assert time.monotonic() - started < 4
    status = CommandPower({}).power_state("kvm-07", power)
    assert status.state is PowerState.UNKNOWN
    assert "ran longer than 1 s" in status.detail
    assert 0.9 < status.seconds < 4


def test_a_failing_or_missing_command_is_an_error_with_its_words(tmp_path: Path) -> None:
    power = HostPower.model_validate({
        "driver": "command",
        "command": {
            "on": [sys.executable, "-c", "import sys; print('BMC says no'); sys.exit(3)"],
            "off": ["/nonexistent/power-off", "{host}"],
            "status": [sys.executable, "-c", "print('the host is turned sideways')"],
        },
    })  # fmt: skip
    with pytest.raises(TerminalError, match="failed \\(exit 3\\): BMC says no"):
        CommandPower({}).power_on("kvm-07", power)
    with pytest.raises(ConfigError, match="cannot run /nonexistent/power-off") as err:
        CommandPower({}).power_off("kvm-07", power)
    assert "command.off" in (err.value.hint or "")
    status = CommandPower({}).power_state("kvm-07", power)
    assert status.state is PowerState.UNKNOWN
    assert status.detail == "exit 0: the host is turned sideways"


@pytest.mark.parametrize(
    ("output", "code", "state"),
    [
        ("on", 0, PowerState.ON),
        ("off\n", 0, PowerState.OFF),
        ("Status: ON", 0, PowerState.ON),
        ("Status: OFF", 2, PowerState.OFF),
        ("Chassis Power is off", 0, PowerState.OFF),
        ("power: on (since boot), was off", 0, PowerState.ON),  # the first one counts
        ("Status: ON", 2, PowerState.UNKNOWN),  # exit 2 goes with off only
        ("off", 1, PowerState.UNKNOWN),
        ("offline", 0, PowerState.UNKNOWN),  # a word, not a part of one
        ("", 0, PowerState.UNKNOWN),
        ("off", None, PowerState.UNKNOWN),  # killed at the timeout
    ],
)
def test_status_output_is_read(output: str, code: int | None, state: PowerState) -> None:
    assert said_state(output, code) is state


WORDS = st.sampled_from(["on", "off", "ON", "Off", "Status:", "offline", "online", "power", "is"])
OUTPUT = st.lists(st.one_of(WORDS, st.text(max_size=6)), max_size=12).map(" ".join)


@given(OUTPUT, st.one_of(st.none(), st.integers(-9, 255)))
def test_status_is_on_or_off_only_when_said_so(output: str, code: int | None) -> None:
    state = said_state(output, code)
    words = [w.lower() for w in re.findall(r"[A-Za-z]+", output)]
    said = [w for w in words if w in ("on", "off")]
    if state is PowerState.ON:
        assert code == 0
        assert said[0] == "on"
    elif state is PowerState.OFF:
        assert code in (0, 2)
        assert said[0] == "off"
    else:  # unknown: no such word, a failure, or on with the exit that goes with off
        assert not said or code not in (0, 2) or (said[0], code) == ("on", 2)
