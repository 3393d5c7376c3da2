"""The bounded runner under a remote that hangs or talks too much: a real fetch over file://
whose upload-pack is a script, and what git and its children are given of the environment."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from reconciler.adapters.git.repo import GitStateRepo
from reconciler.adapters.git.runner import TOKEN_ENV, GitRunner, Remote
from reconciler.errors import RemoteUnreachable
from tests.gitrepos import git, state_remote
from tests.waiting import waited

SECRET = "tok-s3cret-value-4711"
FORGE_SECRET = "forge-s3cret-value-0815"


@pytest.fixture(autouse=True)
def _secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reconciler's own secrets, in its environment."""
    monkeypatch.setenv(TOKEN_ENV, SECRET)
    monkeypatch.setenv("RECONCILER_FORGE_TOKEN", FORGE_SECRET)


def _with_upload_pack(tmp_path: Path, script: str, timeout: float) -> GitStateRepo:
    """A clone whose fetches run ``script`` as the remote's upload-pack."""
    url, _ = state_remote(tmp_path)
    repo = GitStateRepo(url, cache_dir=tmp_path / "cache", timeout=timeout)
    repo.fetch()
    upload_pack = tmp_path / "upload-pack"
    upload_pack.write_text(f"#!/bin/sh\n{script}\n")
    upload_pack.chmod(0o755)
    git(repo.path, "config", "remote.origin.uploadpack", str(upload_pack))
    return repo


def _alive(argv: bytes) -> list[Path]:
    """Processes whose command line is ``argv`` (a zombie's is empty)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes() == argv:
                found.append(cmdline)
        except OSError:
            continue
    return found


def test_a_fetch_from_a_remote_that_never_answers_is_stopped_at_its_timeout(tmp_path: Path) -> None:
    seen = tmp_path / "upload-pack.env"
    repo = _with_upload_pack(tmp_path, f"env > {seen}\nexec sleep 31.75", timeout=1)
    started = time.monotonic()
    with pytest.raises(RemoteUnreachable) as info:
        repo.fetch()
    took = time.monotonic() - started
    assert took < 1 + 4, took  # the timeout, and a generous margin for a loaded machine
    message = f"{info.value} {info.value.hint}"
    assert "git fetch on file://" in message
    assert "did not finish within 1 s and was stopped" in message
    assert "RECONCILER_GIT_TIMEOUT" in message  # says how to allow more time
    assert SECRET not in message
    assert FORGE_SECRET not in message
    # the remote side, started by git, got none of the reconciler's secrets...
    env = seen.read_text()
    assert "GIT_TERMINAL_PROMPT=0" in env
    assert SECRET not in env
    assert FORGE_SECRET not in env
    # ...and was killed with git: SIGKILL takes a moment to end a process on a busy machine
    assert waited(lambda: not _alive(b"sleep\x0031.75\x00"), 10, every=0.05) is not None


def test_what_a_remote_says_reaches_the_error_without_a_secret(tmp_path: Path) -> None:
    repo = _with_upload_pack(
        tmp_path, f"echo 'fatal: token {SECRET} is not allowed here' >&2\nexit 1", timeout=10
    )
    with pytest.raises(RemoteUnreachable) as info:
        repo.fetch()
    message = str(info.value)
    assert "token *** is not allowed here" in message
    assert SECRET not in message


def test_git_and_its_children_see_no_secret_and_no_callers_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What git hands on to what it starts (hooks, helpers, aliases), read from inside."""
    monkeypatch.setenv("GIT_DIR", "/a/callers/repository")
    monkeypatch.setenv("GIT_INDEX_FILE", "/a/callers/index")
    runner = GitRunner(Remote.parse("https://h/x"), cwd=tmp_path, timeout=10)
    env = runner.run("-c", "alias.env=!env", "env").out
    assert "GIT_TERMINAL_PROMPT=0" in env
    assert "GIT_ASKPASS=true" in env
    assert "GIT_CONFIG_KEY_0=http.https://h/x.extraHeader" in env  # the token, as a header
    assert SECRET not in env
    assert FORGE_SECRET not in env
    assert "/a/callers" not in env
