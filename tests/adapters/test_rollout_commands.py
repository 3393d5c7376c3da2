"""Rollout commands run for real (sh, sleep, env): placeholders, the environment they get and
do not get, timeouts, secrets kept out of the output, logs kept for a person."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.adapters.processes.rollout_commands import MAX_OUTPUT, ProcessRolloutCommands
from reconciler.model.rollout import Command
from reconciler.model.rollout_progress import Target

T = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)
TARGET = Target(host="kvm-02", uri="qemu+ssh://kvm-02/system")


def command(*argv: str, timeout: str = "10s", **fields: object) -> Command:
    return Command.model_validate({"argv": list(argv), "timeout": timeout, **fields})


def commands(tmp_path: Path, **environ: str) -> ProcessRolloutCommands:
    base = {"PATH": "/usr/bin:/bin", "HOME": "/root", "RECONCILER_GIT_TOKEN": "tok-a8b9c0d1"}
    return ProcessRolloutCommands(tmp_path, environ={**base, **environ}, clock=lambda: T)


def test_placeholders_are_replaced_and_the_log_is_kept(tmp_path: Path) -> None:
    run = commands(tmp_path)
    done = run.run(
        "r",
        "command/upgrade",
        command(
            "sh",
            "-c",
            'echo "on $1 via $2 as $WHO"',
            "sh",
            "{host}",
            "{uri}",
            env={"WHO": "{host}-updater"},
        ),
        target=TARGET,
    )
    assert done.ok
    assert done.detail == "exit 0"
    assert done.output == "on kvm-02 via qemu+ssh://kvm-02/system as kvm-02-updater"
    assert done.log == str(tmp_path / "r" / "kvm-02" / "command-upgrade-20261201T220000Z.log")
    log = Path(done.log).read_text()
    assert log.startswith("# sh -c ")
    assert "on kvm-02 via" in log


def test_only_path_home_lang_tz_env_and_pass_env_reach_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTHER", "not-for-you")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.delenv("TZ", raising=False)
    run = commands(tmp_path, CEPH_KEY="ceph-5e3f2a1b")
    done = run.run(
        "r",
        "before/noout",
        command("env", env={"PLAIN": "1"}, passEnv=["CEPH_KEY"]),
        target=None,
    )
    names = sorted(line.split("=", 1)[0] for line in done.output.splitlines())
    home = ["HOME"] if "HOME" in os.environ else []
    assert names == sorted(["CEPH_KEY", *home, "LANG", "PATH", "PLAIN"])
    assert "ceph-5e3f2a1b" not in done.output  # a passed value is a secret: scrubbed
    assert "CEPH_KEY=***" in done.output
    assert done.log is not None
    assert "ceph-5e3f2a1b" not in Path(done.log).read_text()
    assert Path(done.log).parent.name == "rollout"


def test_a_pass_env_the_reconciler_lacks_fails_before_running(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    done = commands(tmp_path).run(
        "r", "command/x", command("touch", str(marker), passEnv=["CEPH_KEY"]), target=TARGET
    )
    assert not done.ok
    assert done.detail == "not run: passEnv CEPH_KEY not set in the reconciler's environment"
    assert not marker.exists()


def test_a_failure_and_a_timeout(tmp_path: Path) -> None:
    run = commands(tmp_path)
    failed = run.run(
        "r", "command/x", command("sh", "-c", "echo E: broken >&2; exit 100"), target=TARGET
    )
    assert (failed.ok, failed.detail, failed.output) == (False, "exit 100", "E: broken")
    slow = run.run("r", "command/y", command("sleep", "30", timeout="1s"), target=TARGET)
    assert not slow.ok
    assert slow.detail == "ran longer than 1s and was killed, with everything it started"
    missing = run.run("r", "command/z", command("/nonexistent/tool"), target=TARGET)
    assert not missing.ok
    assert missing.detail.startswith("cannot run /nonexistent/tool")


@pytest.mark.parametrize("secret_env", ["RECONCILER_GIT_TOKEN"])
def test_the_reconcilers_own_secrets_never_reach_a_command(
    tmp_path: Path, secret_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(secret_env, "tok-a8b9c0d1")
    done = commands(tmp_path).run(
        "r", "command/x", command("sh", "-c", f'echo "[${secret_env}]"'), target=TARGET
    )
    assert done.output == "[]"


def test_a_pass_env_secret_the_cut_of_the_kept_output_goes_through_is_not_in_the_log(
    tmp_path: Path,
) -> None:
    # the log keeps the first and the last 128 KiB: the secret straddles both cuts
    half = MAX_OUTPUT // 2
    secret = "ceph-5e3f2a1b-9c8d7e6f"
    script = (
        f'head -c {half - 10} /dev/zero | tr "\\0" x; printf %s "$CEPH_KEY"; '
        f'head -c {3 * half} /dev/zero | tr "\\0" y; printf %s "$CEPH_KEY"; '
        f'head -c {half - 12} /dev/zero | tr "\\0" z'
    )
    run = commands(tmp_path, CEPH_KEY=secret)
    done = run.run(
        "r", "command/x", command("sh", "-c", script, passEnv=["CEPH_KEY"]), target=TARGET
    )
    assert done.ok, done.detail
    assert done.log is not None
    log = Path(done.log).read_text()
    assert "bytes left out" in log
    assert log.count("***") == 2
    shown = log.replace("x", " ").replace("y", " ").replace("z", " ")
    for i in range(len(secret) - 1):
        assert secret[i : i + 2] not in shown, secret[i : i + 2]
