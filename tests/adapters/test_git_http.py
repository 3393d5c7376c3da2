"""The state repository and the lease over real HTTP: ``git http-backend`` behind Basic auth.

The credential must work, and never reach a command line (``/proc/*/cmdline`` is polled
while git runs), the clone's ``.git/config``, a commit or a message; a remote that hangs
must fail every call within its timeout.
"""

from __future__ import annotations

import base64
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reconciler.adapters.git.lease import GitLease
from reconciler.adapters.git.repo import GitStateRepo
from reconciler.adapters.git.runner import DEFAULT_USERNAME, TOKEN_ENV, USERNAME_ENV
from reconciler.errors import RemoteUnreachable, TransientError
from tests.githttp import PASSWORD, USER, CmdlineWatch, GitHttpServer, git_http
from tests.gitrepos import state_remote

REPO = "remote.git"  # state_remote's bare repository, served from tmp_path
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
SECRETS = [PASSWORD, BASIC]


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GitHttpServer]:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(USERNAME_ENV, raising=False)
    state_remote(tmp_path)
    with git_http(tmp_path) as server:
        yield server


def remote_objects_text(bare: Path) -> str:
    """Every object of the remote, commits' messages and identities included, as text."""
    out = subprocess.run(
        ["git", "--git-dir", str(bare), "cat-file", "--batch-all-objects", "--batch"],
        capture_output=True,
        check=True,
    ).stdout
    return out.decode(errors="replace")


def assert_secret_free(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


def test_state_repo_over_http_keeps_the_credential_off_argv_config_and_commits(
    served: GitHttpServer, tmp_path: Path
) -> None:
    url = served.url(REPO)
    host = served.base.removeprefix("http://")
    with CmdlineWatch(SECRETS, marker=host) as watch:
        repo = GitStateRepo(url, cache_dir=tmp_path / "cache")
        repo.fetch()
        head = repo.head("main")
        assert head is not None
        assert repo.remote_head("main") == head
        assert (repo.checkout(head) / "cluster-state" / "cluster.yaml").is_file()
        sha = repo.commit_files(parent=head, files={"f": "x\n"}, message="A change")
        repo.push("reconciler/lab", sha, expected=None)
        assert repo.remote_head("reconciler/lab") == sha
        repo.fetch()
        assert [c.sha for c in repo.log(f"{head}..origin/reconciler/lab")] == [sha]
    assert watch.seen, f"no git process seen talking to {host} in {watch.polls} polls"
    assert watch.hits == []
    config = (repo.path / ".git" / "config").read_text()
    assert served.url(REPO, credentials=False) in config
    assert_secret_free(config)
    assert_secret_free(repr(repo.__dict__))
    assert_secret_free(remote_objects_text(tmp_path / REPO))
    assert served.requests
    assert all(ok for _, ok in served.requests)


def test_without_a_credential_the_remote_refuses_at_once_and_says_so(
    served: GitHttpServer, tmp_path: Path
) -> None:
    repo = GitStateRepo(served.url(REPO, credentials=False), cache_dir=tmp_path / "c", timeout=10)
    started = time.monotonic()
    with pytest.raises(RemoteUnreachable) as info:
        repo.fetch()
    assert time.monotonic() - started < 5  # no prompt waited on
    assert "Authentication failed" in str(info.value) or "401" in str(info.value)


def test_a_wrong_credential_is_never_printed(served: GitHttpServer, tmp_path: Path) -> None:
    wrong = served.url(REPO).replace(PASSWORD, "wr0ng-s3cr3t")
    repo = GitStateRepo(wrong, cache_dir=tmp_path / "c")
    with pytest.raises(RemoteUnreachable) as state_error:
        repo.fetch()
    lease = GitLease(wrong, "lab", tmp_path / "w", identity="a")
    with pytest.raises(TransientError) as lease_error:
        lease.acquire()
    for err in (state_error.value, lease_error.value):
        assert "wr0ng-s3cr3t" not in f"{err} {err.hint} {err!r}"
        assert "***@127.0.0.1" in str(err)
    assert "wr0ng-s3cr3t" not in lease.remote


def test_the_lease_over_http_keeps_the_credential_off_every_command_line(
    served: GitHttpServer, tmp_path: Path
) -> None:
    url = served.url(REPO)
    with CmdlineWatch(SECRETS, marker=served.base.removeprefix("http://")) as watch:
        a = GitLease(url, "lab", tmp_path / "a", identity="a")
        b = GitLease(url, "lab", tmp_path / "b", identity="b")
        for _ in range(5):
            assert a.acquire()
            assert not b.acquire()
        assert a.confirm()
        assert (b.holder() or "").startswith("a ")
        a.release()
        assert b.acquire()
    assert watch.seen
    assert watch.hits == []
    for scratch in (tmp_path / "a", tmp_path / "b"):
        assert_secret_free((scratch / "config").read_text())
    assert_secret_free(remote_objects_text(tmp_path / REPO))


def test_the_token_from_the_environment_needs_no_credential_in_the_url(
    served: GitHttpServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, PASSWORD)
    monkeypatch.setenv(USERNAME_ENV, USER)
    url = served.url(REPO, credentials=False)
    with CmdlineWatch(SECRETS, marker=served.base.removeprefix("http://")) as watch:
        repo = GitStateRepo(url, cache_dir=tmp_path / "cache")
        repo.fetch()
        head = repo.head("main") or ""
        sha = repo.commit_files(parent=head, files={"f": "y\n"}, message="With a token")
        repo.push("main", sha, expected=head)
        lease = GitLease(url, "lab", tmp_path / "w", identity="a")
        assert lease.acquire()
        assert lease.confirm()
    assert watch.hits == []
    assert_secret_free((repo.path / ".git" / "config").read_text())
    monkeypatch.delenv(TOKEN_ENV)  # the token, not anything cached, let them in
    with pytest.raises(RemoteUnreachable):
        GitStateRepo(url, cache_dir=tmp_path / "cache").fetch()


def test_the_token_alone_goes_with_the_default_user_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state_remote(tmp_path)
    monkeypatch.setenv(TOKEN_ENV, PASSWORD)
    monkeypatch.delenv(USERNAME_ENV, raising=False)
    with git_http(tmp_path, user=DEFAULT_USERNAME) as server:
        repo = GitStateRepo(server.url(REPO, credentials=False), cache_dir=tmp_path / "c")
        repo.fetch()
        assert repo.head("main")


def _within(limit: float, call: Callable[[], object]) -> TransientError:
    started = time.monotonic()
    with pytest.raises(TransientError) as info:
        call()
    took = time.monotonic() - started
    assert took < limit, f"{info.value} after {took:.1f} s"
    return info.value


def test_a_hanging_remote_fails_every_state_repo_call_within_its_timeout(
    served: GitHttpServer, tmp_path: Path
) -> None:
    repo = GitStateRepo(served.url(REPO), cache_dir=tmp_path / "cache", timeout=1.0)
    repo.fetch()
    head = repo.head("main") or ""
    sha = repo.commit_files(parent=head, files={"f": "z\n"}, message="Stuck")
    served.hang.set()
    calls: list[Callable[[], object]] = [
        repo.fetch,
        lambda: repo.remote_head("main"),
        lambda: repo.push("main", sha, expected=head),
        GitStateRepo(served.url(REPO), cache_dir=tmp_path / "fresh", timeout=1.0).fetch,
    ]
    for call in calls:
        err = _within(1.0 + 2.0, call)
        assert "did not finish within 1 s" in str(err)
        assert_secret_free(f"{err} {err.hint}")
    # what needs no remote still works from the clone
    assert repo.show(head, "cluster-state/cluster.yaml")


def test_a_hanging_remote_fails_every_lease_call_within_its_timeout(
    served: GitHttpServer, tmp_path: Path
) -> None:
    lease = GitLease(served.url(REPO), "lab", tmp_path / "w", identity="a", git_timeout=1.0)
    assert lease.acquire()
    served.hang.set()
    for call in (lease.acquire, lease.confirm, lease.holder, lease.release):
        err = _within(1.0 + 2.0, call)
        assert "did not finish within 1 s" in str(err)
        assert_secret_free(f"{err} {err.hint}")
