"""The git runner: what git may see of a URL, its environment, and its timeout."""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from reconciler.adapters.git.runner import (
    DEFAULT_USERNAME,
    TIMEOUT_ENV,
    TOKEN_ENV,
    USERNAME_ENV,
    GitRunner,
    Remote,
    default_timeout,
)
from reconciler.errors import GitError, RemoteUnreachable, TransientError
from reconciler.redact import scrub
from tests.waiting import waited


def _header(remote: Remote, base: dict[str, str] | None = None) -> dict[str, str]:
    return remote.env(base or {})


def test_an_https_url_loses_its_userinfo_and_keeps_it_for_the_header() -> None:
    remote = Remote.parse("https://alice:p%40ss-w0rd@git.example.com:8443/infra/s.git", {})
    assert remote.url == "https://git.example.com:8443/infra/s.git"
    assert remote.display == "https://***@git.example.com:8443/infra/s.git"
    assert "p%40ss" not in repr(remote)
    assert "p@ss" not in repr(remote)
    env = _header(remote)
    assert env["GIT_CONFIG_COUNT"] == "1"
    assert env["GIT_CONFIG_KEY_0"] == "http.https://git.example.com:8443/infra/s.git.extraHeader"
    basic = base64.b64encode(b"alice:p@ss-w0rd").decode()
    assert env["GIT_CONFIG_VALUE_0"] == f"Authorization: Basic {basic}"
    assert scrub(f"x {basic} p@ss-w0rd p%40ss-w0rd") == "x *** *** ***"


def test_the_header_follows_the_callers_own_git_config_entries() -> None:
    remote = Remote.parse("https://alice:pw-1234@h/x", {})
    env = _header(remote, {"GIT_CONFIG_COUNT": "2"})
    assert env["GIT_CONFIG_COUNT"] == "3"
    assert "GIT_CONFIG_KEY_2" in env
    assert "GIT_CONFIG_KEY_0" not in env


def test_the_token_from_the_environment_and_its_user_name() -> None:
    remote = Remote.parse("https://h/x", {TOKEN_ENV: "tok-123456"})
    assert (remote.url, remote.username, remote.password) == (
        "https://h/x",
        DEFAULT_USERNAME,
        "tok-123456",
    )
    named = Remote.parse("https://h/x", {TOKEN_ENV: "tok-123456", USERNAME_ENV: "oauth2"})
    assert named.username == "oauth2"
    with_user = Remote.parse("https://bob@h/x", {TOKEN_ENV: "tok-123456"})
    assert (with_user.url, with_user.username) == ("https://h/x", "bob")
    url_wins = Remote.parse("https://bob:own-pass@h/x", {TOKEN_ENV: "tok-123456"})
    assert url_wins.password == "own-pass"
    token_as_user = Remote.parse("https://ghp_tokentoken@h/x", {})
    assert (token_as_user.username, token_as_user.password) == ("ghp_tokentoken", "")
    assert Remote.parse("https://h/x", {}).env({}) == {}
    assert scrub("ghp_tokentoken x") == "ghp_tokentoken x"  # too short to be taken for one
    Remote.parse("https://ghp_0123456789abcdefXYZ@h/x", {})
    assert scrub("ghp_0123456789abcdefXYZ x") == "*** x"
    Remote.parse("https://reconciler@h/x", {})
    assert scrub("reconciler x") == "reconciler x"  # a name, not a token


def test_other_urls_keep_what_ssh_needs_and_lose_any_password() -> None:
    assert Remote.parse("ssh://git@h/x.git", {TOKEN_ENV: "t0ken-x"}).url == "ssh://git@h/x.git"
    assert Remote.parse("ssh://git@h/x.git", {TOKEN_ENV: "t0ken-x"}).env({}) == {}
    assert Remote.parse("ssh://git:pw-9876@h/x.git", {}).url == "ssh://git@h/x.git"
    assert Remote.parse("git@h:x.git", {}).url == "git@h:x.git"
    assert Remote.parse("/srv/state.git", {}).url == "/srv/state.git"
    assert Remote.parse("file:///srv/state.git", {}).url == "file:///srv/state.git"


def test_the_timeout_comes_from_the_environment_and_is_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert default_timeout() == 20.0
    monkeypatch.setenv(TIMEOUT_ENV, "3.5")
    assert default_timeout() == 3.5
    assert GitRunner(Remote.parse("/x", {})).timeout == 3.5
    for bad in ("soon", "0", "-1", "1e9"):
        monkeypatch.setenv(TIMEOUT_ENV, bad)
        with pytest.raises(GitError, match=TIMEOUT_ENV):
            default_timeout()


def test_a_call_past_its_timeout_is_stopped_with_its_children() -> None:
    runner = GitRunner(Remote.parse("https://alice:pw-secret@h/x", {}), timeout=0.5)
    # a shell alias: the sleep is git's child and holds git's stdout open
    hang = ("-c", "alias.hang=!sleep 31.25", "hang")
    for network, kind in ((False, TransientError), (True, RemoteUnreachable)):
        started = time.monotonic()
        with pytest.raises(kind) as info:
            runner.run(*hang, network=network)
        assert time.monotonic() - started < 3
        assert "did not finish within 0.5 s" in str(info.value)
        assert "pw-secret" not in str(info.value)
    # the whole process group was killed, the sleep too. SIGKILL is delivered at once but a
    # process ends only when it next runs, which on a busy machine can take a moment: wait for
    # that, bounded far below the 31 s the sleep would live if it had been left alone
    assert waited(lambda: not _sleeps(), 10, every=0.05) is not None, _sleeps()


def _sleeps() -> list[Path]:
    """The ``sleep 31.25`` processes still alive (a zombie's cmdline is empty)."""
    return [p for p in Path("/proc").glob("[0-9]*/cmdline") if _read(p) == b"sleep\x0031.25\x00"]


def test_a_call_is_done_when_git_exits_whatever_holds_its_output(tmp_path: Path) -> None:
    """A process git started that left its session and keeps git's stdout and stderr open
    (as an ssh ControlPersist master does) neither holds the call to its timeout nor turns a
    success into a timeout; a hanging git with such a process is stopped at its timeout."""
    pidfile = tmp_path / "left.pid"
    leave = (
        f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 30' & while [ ! -s {pidfile} ]; do :; done"
    )
    runner = GitRunner(Remote.parse("/x", {}), timeout=5)
    try:
        started = time.monotonic()
        result = runner.run("-c", f"alias.leave=!{leave}; echo done; echo said >&2", "leave")
        assert time.monotonic() - started < 3
        assert result.out == "done\n"
        assert result.stderr == "said\n"
        os.kill(int(pidfile.read_text()), 0)  # still there, holding both pipes
        pidfile.unlink()
        hang = GitRunner(Remote.parse("/x", {}), timeout=0.5)
        started = time.monotonic()
        with pytest.raises(TransientError):
            hang.run("-c", f"alias.hang=!{leave}; sleep 31.5", "hang")
        assert time.monotonic() - started < 3
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_a_large_output_is_read_whole() -> None:
    runner = GitRunner(Remote.parse("/x", {}), timeout=20)
    result = runner.run("-c", "alias.big=!head -c 3000000 /dev/zero", "big")
    assert len(result.stdout) == 3_000_000


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def test_git_never_sees_the_reconcilers_own_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECONCILER_FORGE_TOKEN", "forge-token-value")
    monkeypatch.setenv(TOKEN_ENV, "git-token-value")
    monkeypatch.setenv("GIT_DIR", "/somewhere/else")
    runner = GitRunner(Remote.parse("https://h/x"), timeout=10)
    env = runner.environment()
    assert "RECONCILER_FORGE_TOKEN" not in env
    assert TOKEN_ENV not in env
    assert "GIT_DIR" not in env
    assert env["GIT_TERMINAL_PROMPT"] == "0"
    assert env["GIT_CONFIG_KEY_0"] == "http.https://h/x.extraHeader"  # the token as a header


def test_a_failing_command_is_a_git_error_with_gits_words() -> None:
    runner = GitRunner(Remote.parse("/x", {}), timeout=10)
    with pytest.raises(GitError, match="not a git command"):
        runner.run("no-such-command")
    assert not runner.run("no-such-command", check=False).ok
