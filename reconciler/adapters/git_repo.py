"""The state repository: a clone in a cache directory, fetched before every round.

GitPython warns that it leaks in long-running processes (its persistent ``cat-file``
helpers and cached handles), so this adapter opens a ``Repo`` per operation as a context
manager, only runs ``git`` commands through it, and closes it: a daemon's descriptors and
child processes stay flat (``tests/adapters/test_git_repo.py`` counts them).

Commits are made with plumbing (a private index, ``commit-tree``), never in the work tree,
so reading a checkout and writing a proposal do not disturb each other. Several processes
may share one cache (a ``run`` service and a person's ``plan --repo``): what changes the clone
(clone, fetch, push, new objects) holds an ``flock`` on ``<clone>.lock``, and a checkout is a
tree of its own per commit (``<clone>.trees/<commit>``), written once and then only read, so
a reader never sees another process's commit. Pushes are a
compare-and-swap (``--force-with-lease=<ref>:<expected>``); losing it raises PushRejected.
Every message that could carry the URL is scrubbed of ``user:token@``.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import re
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import git

from reconciler.errors import GitError, PushRejected, RemoteUnreachable
from reconciler.model.audit import RepoCommit

DEFAULT_AUTHOR = ("reconciler", "reconciler@localhost")
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")
_FS, _RS = "\x1f", "\x1e"


def scrub(text: str) -> str:
    """``https://user:token@host/x`` -> ``https://***@host/x``: credentials never printed."""
    return _USERINFO.sub(r"\g<scheme>***@", text)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reconciler"


def normalized_url(url: str) -> str:
    """A local path becomes absolute, so the same repository gets the same cache entry."""
    if "://" in url or re.match(r"^[^/]+@[^/]+:", url):
        return url
    return str(Path(url).expanduser().resolve())


def clone_dir(url: str, cache_dir: Path | None) -> Path:
    digest = hashlib.sha256(normalized_url(url).encode()).hexdigest()[:16]
    return (cache_dir or default_cache_dir()) / digest


KEEP_TREES = 3
"""Checked-out trees kept however old: the newest by last use."""
TREE_MAX_IDLE = 24 * 3600.0
"""Seconds after its last use when an older tree is removed."""


def _env() -> dict[str, str]:
    # never ask for a password on a terminal: a daemon would hang; fail with a message
    return {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}


def _message(err: git.GitCommandError) -> str:
    detail = (err.stderr or err.stdout or "").strip()
    detail = re.sub(r"^\s*stderr: '?|'\s*$", "", detail).strip()
    return scrub(detail or str(err))


def format_trailers(trailers: Mapping[str, str]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in trailers.items())


def parse_trailers(text: str) -> dict[str, list[str]]:
    """``Key: value`` lines (keys case-insensitive, lowered) into key -> values."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            out.setdefault(key.strip().lower(), []).append(value.strip())
    return out


class GitStateRepo:
    """One state repository, cloned under ``cache_dir`` and fetched before each round."""

    def __init__(
        self,
        url: str,
        *,
        cache_dir: Path | None = None,
        author: tuple[str, str] = DEFAULT_AUTHOR,
    ) -> None:
        self.url = url
        self.display_url = scrub(url)
        self.path = clone_dir(url, cache_dir)
        self.author = author
        self._thread_lock = threading.RLock()
        self._lock_fd: int | None = None

    # --- plumbing ----------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Exclusive use of the clone among the processes sharing the cache (re-entrant)."""
        with self._thread_lock:
            if self._lock_fd is not None:  # held already, further up this call
                yield
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = self.path.parent / f"{self.path.name}.lock"
            self._lock_fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(self._lock_fd)  # closing releases the lock
                self._lock_fd = None

    @contextmanager
    def _repo(self) -> Iterator[git.Repo]:
        if not (self.path / ".git").is_dir():
            with self._locked():
                if not (self.path / ".git").is_dir():  # another process may have cloned it
                    self._clone()
        try:
            repo = git.Repo(self.path)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as err:
            raise GitError(
                f"the cached clone {self.path} is not a git repository: {scrub(str(err))}",
                hint=f"remove {self.path}; it is cloned again on the next run",
            ) from None
        with repo:
            yield repo

    def _clone(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".clone-", dir=self.path.parent))
        try:
            git.Repo.clone_from(self.url, tmp, env=_env(), no_checkout=True).close()
            tmp.rename(self.path)
        except git.GitCommandError as err:
            raise GitError(
                f"cannot clone {self.display_url}: {_message(err)}",
                hint="check the URL and that this machine may read it",
            ) from None
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _git(
        self, *args: str, env: Mapping[str, str] | None = None, stdin: str | None = None
    ) -> str:
        with self._repo() as repo, tempfile.TemporaryFile() as feed:
            feed.write((stdin or "").encode())
            feed.seek(0)
            try:
                out: str = repo.git.execute(
                    ["git", *args],
                    env={**_env(), **(env or {})},
                    istream=feed if stdin is not None else None,
                    strip_newline_in_stdout=False,
                )
            except git.GitCommandError as err:
                raise GitError(
                    f"git {args[0]} failed on {self.display_url}: {_message(err)}"
                ) from None
            return out

    # --- reading -----------------------------------------------------------------------

    def fetch(self) -> None:
        """Bring every branch of the remote up to date (pruning deleted ones).

        A remote that does not answer is transient (RemoteUnreachable): the next round retries.
        """
        try:
            with self._locked():
                self._git(
                    "fetch", "--prune", "--force", "origin", "+refs/heads/*:refs/remotes/origin/*"
                )
        except GitError as err:
            raise RemoteUnreachable(err.message, hint="the next round fetches again") from None

    def remote_head(self, branch: str) -> str:
        """The commit of ``branch`` on the remote now (``git ls-remote``: cheap, for polling)."""
        try:
            out = self._git("ls-remote", "--heads", "origin", branch).split()
        except GitError as err:
            raise RemoteUnreachable(err.message, hint="polling again later") from None
        if not out:
            raise RemoteUnreachable(f"{self.display_url} has no branch {branch!r}")
        return out[0]

    def head(self, branch: str) -> str | None:
        """The last fetched commit of ``branch`` on the remote, or None if it has none."""
        try:
            return (
                self._git(
                    "rev-parse", "--verify", "--quiet", f"refs/remotes/origin/{branch}^{{commit}}"
                ).strip()
                or None
            )
        except GitError:
            return None

    def parents(self, commit: str) -> list[str]:
        """The parents of ``commit`` (two or more for a merge)."""
        return self._git("rev-list", "--parents", "-n", "1", commit).split()[1:]

    def checkout(self, commit: str) -> Path:
        """The files of ``commit`` in a folder of their own: read it, never write it.

        The folder stays as it is while other processes check out other commits; trees not
        used for a day are removed, the newest few kept.
        """
        sha = self._git("rev-parse", "--verify", f"{commit}^{{commit}}").strip()
        trees = self.path.parent / f"{self.path.name}.trees"
        tree = trees / sha
        with self._locked():
            if not tree.is_dir():
                self._export(sha, trees, tree)
            os.utime(tree)  # its last use, for pruning
            self._prune(trees, keep=tree)
        return tree

    def _export(self, sha: str, trees: Path, tree: Path) -> None:
        trees.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tree-", dir=trees))
        try:
            with self._repo() as repo:
                data = io.BytesIO()
                try:
                    repo.archive(data, sha, format="tar")
                except git.GitCommandError as err:
                    raise GitError(f"cannot read commit {sha[:12]}: {_message(err)}") from None
            data.seek(0)
            with tarfile.open(fileobj=data) as tar:
                tar.extractall(tmp, filter="data")  # refuses links and paths out of the tree
            tmp.rename(tree)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    @staticmethod
    def _prune(trees: Path, keep: Path) -> None:
        now = time.time()
        entries = []
        for e in trees.iterdir():
            if e.name.startswith("."):  # an export cut short by a crash
                if now - e.stat().st_mtime > TREE_MAX_IDLE:
                    shutil.rmtree(e, ignore_errors=True)
            elif e.is_dir():
                entries.append(e)
        entries.sort(key=lambda e: e.stat().st_mtime, reverse=True)
        for old in entries[KEEP_TREES:]:
            if old != keep and now - old.stat().st_mtime > TREE_MAX_IDLE:
                shutil.rmtree(old, ignore_errors=True)

    def show(self, commit: str, path: str) -> str | None:
        """The text of ``path`` at ``commit``, or None when it does not exist there."""
        try:
            return self._git("show", f"{commit}:{path}")
        except GitError:
            return None

    def commits(self, rev: str) -> list[RepoCommit]:
        """The commits of ``rev`` (e.g. ``base..tip``), newest first."""
        return self.log(rev)

    def log(
        self,
        rev: str,
        *,
        paths: Sequence[str] = (),
        since: datetime | None = None,
        grep_trailer: str | None = None,
    ) -> list[RepoCommit]:
        """Commits of ``rev`` (newest first) with their trailers, through
        ``%(trailers:...)`` so git itself decides what a trailer is."""
        fmt = _FS.join(["%H", "%an", "%ae", "%aI", "%s", "%b", "%(trailers:unfold,only)"]) + _RS
        args = ["log", f"--format={fmt}"]
        if since is not None:
            args.append(f"--since={since.isoformat()}")
        if grep_trailer:
            args.append(f"--grep=^{grep_trailer}:")
        args.append(rev)
        if paths:
            args += ["--", *paths]
        records = []
        for chunk in self._git(*args).split(_RS):
            fields = chunk.strip("\n").split(_FS)
            if len(fields) != 7:
                continue
            sha, name, email, date, subject, body, trailers = fields
            records.append(
                RepoCommit(
                    sha=sha,
                    author=name,
                    email=email,
                    date=datetime.fromisoformat(date),
                    subject=subject,
                    body=body.strip(),
                    trailers=parse_trailers(trailers),
                )
            )
        return records

    # --- writing -----------------------------------------------------------------------

    def commit_files(
        self,
        *,
        parent: str,
        files: Mapping[str, str],
        message: str,
        trailers: Mapping[str, str] = {},
    ) -> str:
        """A new commit on ``parent`` with ``files`` (path -> text) replaced; not pushed.

        Built with a private index, so the clone's work tree and index are untouched.
        """
        fd, index = tempfile.mkstemp(prefix=".index-", dir=self.path / ".git")
        os.close(fd)
        os.unlink(index)  # git wants to create it
        env = {"GIT_INDEX_FILE": index}
        try:
            self._git("read-tree", parent, env=env)
            for path, text in files.items():
                blob = self._git("hash-object", "-w", "--stdin", stdin=text).strip()
                self._git("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
            tree = self._git("write-tree", env=env).strip()
        finally:
            Path(index).unlink(missing_ok=True)
        full = message.rstrip() + "\n"
        if trailers:
            full += "\n" + format_trailers(trailers) + "\n"
        name, email = self.author
        ident = {
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
        }
        return self._git("commit-tree", tree, "-p", parent, env=ident, stdin=full).strip()

    def push(self, branch: str, commit: str | None, *, expected: str | None) -> None:
        """Set the remote ``branch`` to ``commit`` (None deletes it) only if it is still at
        ``expected`` (None: must not exist). Raises PushRejected when someone was first."""
        ref = f"refs/heads/{branch}"
        lease = f"--force-with-lease={ref}:{expected or ''}"
        spec = f"{commit}:{ref}" if commit else f":{ref}"
        with self._locked():
            self._push(branch, commit, expected, lease, spec)

    def _push(
        self, branch: str, commit: str | None, expected: str | None, lease: str, spec: str
    ) -> None:
        with self._repo() as repo:
            try:
                repo.git.execute(["git", "push", "--porcelain", lease, "origin", spec], env=_env())
            except git.GitCommandError as err:
                text = _message(err) + scrub(str(err.stdout or ""))
                if "[rejected]" in text or "stale info" in text or "fetch first" in text:
                    raise PushRejected(
                        f"{self.display_url}: {branch} moved since it was read "
                        f"(expected {expected or 'no branch'})",
                        hint="fetch and plan again; nothing was overwritten",
                    ) from None
                raise GitError(f"git push to {self.display_url} failed: {_message(err)}") from None
        if commit:  # keep the tracking ref in step, as a fetch would
            self._git("update-ref", f"refs/remotes/origin/{branch}", commit)
        else:
            self._git("update-ref", "-d", f"refs/remotes/origin/{branch}")

    # --- added for recorded observations and impact (new methods; the ones above unchanged)

    def commit_files_on(
        self,
        *,
        parent: str | None,
        files: Mapping[str, str],
        message: str,
        trailers: Mapping[str, str] = {},
    ) -> str:
        """Like :meth:`commit_files`, but ``parent=None`` makes a root commit holding only
        ``files`` (the first commit of an orphan branch)."""
        if parent is not None:
            return self.commit_files(parent=parent, files=files, message=message, trailers=trailers)
        fd, index = tempfile.mkstemp(prefix=".index-", dir=self.path / ".git")
        os.close(fd)
        os.unlink(index)
        env = {"GIT_INDEX_FILE": index}
        try:
            for path, text in files.items():
                blob = self._git("hash-object", "-w", "--stdin", stdin=text).strip()
                self._git("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
            tree = self._git("write-tree", env=env).strip()
        finally:
            Path(index).unlink(missing_ok=True)
        full = message.rstrip() + "\n"
        if trailers:
            full += "\n" + format_trailers(trailers) + "\n"
        name, email = self.author
        ident = {
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
        }
        return self._git("commit-tree", tree, env=ident, stdin=full).strip()

    def resolve(self, ref: str) -> str | None:
        """The commit ``ref`` names: a branch of the remote, else anything ``git rev-parse``
        reads in the clone (a commit id, a tag), else fetched from the remote by that name (a
        pull request's head commit or ``refs/pull/N/head``). None when none of these is one."""
        for candidate in (f"refs/remotes/origin/{ref}", ref):
            try:
                sha = self._git("rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}")
            except GitError:
                continue
            if sha.strip():
                return sha.strip()
        try:
            with self._locked():
                self._git("fetch", "--quiet", "origin", ref)
            return self._git("rev-parse", "--verify", "--quiet", "FETCH_HEAD^{commit}").strip()
        except GitError:
            return None
