"""The one way the reconciler runs git: a timeout on every call, no prompt, no secret on argv.

The state repository (``git_repo``) and the lease (``lease_git``) both run git through
``GitRunner``:

- **Timeout.** Every call is given ``timeout`` seconds (``RECONCILER_GIT_TIMEOUT``, default
  20), its output pipes included: git runs through ``run_process``
  (``reconciler.adapters.processes.runner``), in a session of its own; when the time is up the
  whole process group (``git-remote-https`` and ``ssh`` too) is killed and the call raises
  RemoteUnreachable (a call that talks to the remote) or TransientError (a local one), naming
  the command. A call is done when git exits, even if a process it started still holds its
  output (an ssh ``ControlPersist`` master).
- **No prompt.** ``GIT_TERMINAL_PROMPT=0``, ``GIT_ASKPASS=true``, no stdin and no controlling
  terminal: a missing credential fails at once instead of waiting for a person.
- **Credentials off the command line.** ``Remote.parse`` takes the userinfo out of an
  http(s) URL; git is given the bare URL, on its argv and in the clone's ``.git/config``. The
  credential reaches git through its environment only (``GIT_CONFIG_COUNT`` /
  ``GIT_CONFIG_KEY_n`` / ``GIT_CONFIG_VALUE_n`` setting ``http.<url>.extraHeader`` to a Basic
  ``Authorization`` header), which other users cannot read (``/proc/<pid>/environ`` is the
  owner's only, ``/proc/<pid>/cmdline`` is everyone's). ``RECONCILER_GIT_TOKEN`` (with
  ``RECONCILER_GIT_USERNAME``, default ``x-access-token``) gives the credential without
  putting it in the URL at all; a credential in the URL wins over the environment.
- **Errors.** A failing command raises GitError with git's message; every message is
  scrubbed (``reconciler.redact``), and the password and the header are registered there.

**Why not GitPython's ``Git.execute``** (GitPython reads the clone's refs, ``refs.py``). With
``kill_after_timeout``, ``env`` and ``with_extended_output`` it would break three of the rules
above; the first two are pinned by tests that fail when git runs through it
(``tests/adapters/test_git_runner.py``, ``test_git_timeouts.py``):

- it builds git's environment from this process's and can only add to it (``env`` and
  ``update_environment`` set variables, never remove one), so ``RECONCILER_GIT_TOKEN``,
  ``RECONCILER_FORGE_TOKEN`` and a caller's ``GIT_DIR`` reach git, its hooks and the
  remote's upload-pack; an empty value is no way out (``GIT_DIR=`` is a repository to git);
- it reads stdout and stderr to their end (``communicate``), so a process git started that
  keeps them open (an ssh ``ControlPersist`` master) holds a call git finished at once until
  that process ends, and turns it into a timeout;
- its timeout kills the processes ``pgrep -P`` finds under git at that moment, not git's
  process group: a helper started in between or one that left the tree outlives it.

It reads stderr whole too, where this runner keeps a bounded part.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from reconciler.adapters.processes.runner import run_process
from reconciler.errors import GitError, RemoteUnreachable, TransientError
from reconciler.redact import SECRET_ENV, register, scrub

GIT_TIMEOUT = 20.0
"""Seconds a git call may take, unless ``RECONCILER_GIT_TIMEOUT`` or the caller says."""
TIMEOUT_ENV = "RECONCILER_GIT_TIMEOUT"
TOKEN_ENV = "RECONCILER_GIT_TOKEN"
USERNAME_ENV = "RECONCILER_GIT_USERNAME"
DEFAULT_USERNAME = "x-access-token"
"""The user name sent with ``RECONCILER_GIT_TOKEN`` when ``RECONCILER_GIT_USERNAME`` is unset:
GitHub takes any name with a token, GitLab and Gitea take a token as the password of any
user name (GitLab's OAuth tokens want ``oauth2``: set it)."""

_TOKEN_LIKE = 16  # a user name this long in a URL is taken for a token and scrubbed
_INHERITED_REPO_ENV = (  # a caller's repository must never redirect ours
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
)


def default_timeout() -> float:
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return GIT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 0 < value <= 3600:
        raise GitError(
            f"{TIMEOUT_ENV}={raw!r} is not a number of seconds",
            hint="set it to seconds between 0 and 3600, e.g. 20",
        )
    return value


@dataclass(frozen=True)
class Remote:
    """A repository URL split into what git may see and the credential it must not."""

    url: str
    """The URL given to git: an http(s) URL without userinfo, an SSH URL without password."""
    display: str
    """The URL for messages: credentials replaced by ``***``."""
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, url: str, environ: Mapping[str, str] | None = None) -> Remote:
        env = os.environ if environ is None else environ
        token = env.get(TOKEN_ENV) or None
        display = scrub(url)
        if "://" not in url:  # a path or scp-like user@host:path: nothing secret to take out
            return cls(url=url, display=display)
        parts = urlsplit(url)
        userinfo, at, host = parts.netloc.rpartition("@")
        user_raw, colon, password_raw = userinfo.partition(":")
        user, password = unquote(user_raw), unquote(password_raw)
        if password:
            register(password, password_raw)
        if parts.scheme.lower() not in ("http", "https"):
            # ssh://user@host: the user name stays (ssh needs it), a password never does
            netloc = f"{user_raw}@{host}" if at and user_raw else host
            return cls(url=urlunsplit(parts._replace(netloc=netloc)), display=display)
        bare = urlunsplit(parts._replace(netloc=host))
        if at and colon:
            return cls(bare, display, user, password)
        if at and token:  # https://alice@host with the token in the environment
            return cls(bare, display, user, token)
        if at:  # https://TOKEN@host: the token as the user name (GitHub's form)
            if len(user) >= _TOKEN_LIKE:  # not a plain name, which would mask common words
                register(user, user_raw)
            return cls(bare, display, user, "")
        if token:
            return cls(bare, display, env.get(USERNAME_ENV) or DEFAULT_USERNAME, token)
        return cls(bare, display)

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """git's environment for this remote: ``http.<url>.extraHeader`` with the credential
        appended to any ``GIT_CONFIG_COUNT`` entries ``base`` already has."""
        if self.username is None or self.password is None:
            return {}
        basic = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        register(basic, self.password)
        try:
            n = int(base.get("GIT_CONFIG_COUNT", "0"))
        except ValueError:
            n = 0
        return {
            "GIT_CONFIG_COUNT": str(n + 1),
            f"GIT_CONFIG_KEY_{n}": f"http.{self.url}.extraHeader",
            f"GIT_CONFIG_VALUE_{n}": f"Authorization: Basic {basic}",
        }


@dataclass(frozen=True)
class GitResult:
    args: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: str

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class GitRunner:
    """Runs git for one repository (``remote``), in ``cwd`` or on ``git_dir``."""

    def __init__(
        self,
        remote: Remote,
        *,
        cwd: Path | None = None,
        git_dir: Path | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.remote = remote
        self.cwd = cwd
        self.git_dir = git_dir
        self.timeout = default_timeout() if timeout is None else timeout
        self._env = dict(env or {})

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        # neither a caller's repository nor the reconciler's own secrets reach git (or its hooks)
        drop = {*_INHERITED_REPO_ENV, *SECRET_ENV}
        base = {k: v for k, v in os.environ.items() if k not in drop}
        base.update({"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C", **self._env})
        base.update(self.remote.env(base))
        base.update(extra or {})
        return base

    def run(
        self,
        *args: str,
        input: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        network: bool = False,
        check: bool = True,
    ) -> GitResult:
        """``git ARGS``; raises GitError when it fails (unless ``check`` is off), and
        RemoteUnreachable (``network``) or TransientError when it outlives the timeout."""
        argv = ["git", *(["--git-dir", str(self.git_dir)] if self.git_dir else []), *args]
        where = cwd or self.cwd
        if where is not None and not where.is_dir():
            raise GitError(f"git {args[0]}: {where} is not a directory")
        feed = input.encode() if isinstance(input, str) else input
        try:
            done = run_process(
                argv, timeout=self.timeout, env=self.environment(env), input=feed, cwd=where,
                max_output=None, merge_stderr=False,
            )  # fmt: skip
        except OSError as err:
            raise GitError(f"cannot run git: {err.strerror}", hint="install git") from err
        if done.timed_out or done.returncode is None:
            message = (
                f"git {args[0]} on {self.remote.display} did not finish within "
                f"{self.timeout:g} s and was stopped"
            )
            hint = f"the next attempt tries again; {TIMEOUT_ENV} sets the time allowed"
            if network:
                raise RemoteUnreachable(message, hint=hint)
            raise TransientError(message, hint=hint)
        result = GitResult(
            tuple(args), done.returncode, done.stdout, scrub(done.stderr.decode(errors="replace"))
        )
        if check and not result.ok:
            raise GitError(f"git {args[0]} failed on {self.remote.display}: {detail(result)}")
        return result


def detail(result: GitResult) -> str:
    """git's own words on a failure, scrubbed, on one line."""
    text = result.stderr.strip() or scrub(result.out.strip()) or f"exit {result.returncode}"
    return " ".join(text.split())
