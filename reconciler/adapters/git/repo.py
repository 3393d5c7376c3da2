"""The state repository: a clone in a cache directory, fetched before every round.

git runs only through ``GitRunner`` (``git_runner``): every call has a timeout, never prompts,
and never carries a credential on its command line or into the clone's ``.git/config``
(the clone's ``origin`` is the URL without userinfo; the credential travels in git's
environment). Branch heads are read through GitPython (``refs.py``), in this process: no git
is started for them. No ``Repo`` object stays open between calls, so a daemon's descriptors
and child processes stay flat (``tests/adapters/test_git_repo.py`` counts them).

Commits are made with plumbing (a private index, ``commit-tree``), never in the work tree,
so reading a checkout and writing a proposal do not disturb each other. Several processes
may share one cache (a ``run`` service and a person's ``plan --repo``): what changes the clone
(clone, fetch, push, new objects) holds an ``flock`` on ``<clone>.lock``, and a checkout is a
tree of its own per commit (``<clone>.trees/<commit>``), written once and then only read, so
a reader never sees another process's commit. Pushes are a
compare-and-swap (``--force-with-lease=<ref>:<expected>``); losing it, in whichever form the
remote says so (``lost_race``), raises PushRejected.
Every message is scrubbed of credentials (``reconciler.redact``).
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

from reconciler.adapters.git.refs import ReadByGit, read_ref
from reconciler.adapters.git.runner import GitRunner, Remote, detail
from reconciler.errors import DocumentError, GitError, PushRejected, RemoteUnreachable
from reconciler.model.audit import RepoCommit

DEFAULT_AUTHOR = ("reconciler", "reconciler@localhost")
_FS, _RS = "\x1f", "\x1e"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reconciler"


def normalized_url(url: str) -> str:
    """A local path becomes absolute, so the same repository gets the same cache entry; a
    URL loses its credentials, which are not part of which repository it is."""
    if "://" in url or re.match(r"^[^/]+@[^/]+:", url):
        return Remote.parse(url, {}).url
    return str(Path(url).expanduser().resolve())


def clone_dir(url: str, cache_dir: Path | None) -> Path:
    digest = hashlib.sha256(normalized_url(url).encode()).hexdigest()[:16]
    return (cache_dir or default_cache_dir()) / digest


KEEP_TREES = 3
"""Checked-out trees kept however old: the newest by last use."""
TREE_MAX_IDLE = 24 * 3600.0
"""Seconds after its last use when an older tree is removed."""


def format_trailers(trailers: Mapping[str, str]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in trailers.items())


_LOST_RACE = (
    "[rejected]",  # non-fast-forward, fetch first, stale info: the client saw the branch move
    "stale info",
    "fetch first",
    "non-fast-forward",
    "failed to update ref",  # [remote rejected]: the remote's compare-and-swap of the ref
    "failed to lock",
    "cannot lock ref",  # "... is at X but expected Y", or another push holding its lock
    "incorrect old value provided",  # smart HTTP's words for the same
)
"""The words of a push refused because the branch moved, or was being moved, meanwhile."""


def lost_race(output: str) -> bool:
    """Whether git's output of a failed push says another writer got there first: a client
    side ``[rejected]`` as well as a ``[remote rejected]`` whose ref update lost to another
    push (22 of 30 losers over file:// take that form). A hook's refusal is not one."""
    return any(words in output for words in _LOST_RACE)


def parse_trailers(text: str) -> dict[str, list[str]]:
    """``Key: value`` lines (keys case-insensitive, lowered) into key -> values."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            out.setdefault(key.strip().lower(), []).append(value.strip())
    return out


class GitStateRepo:
    """One state repository, cloned under ``cache_dir`` and fetched before each round.

    ``timeout`` bounds every git call (default: ``RECONCILER_GIT_TIMEOUT`` or 20 s).
    """

    def __init__(
        self,
        url: str,
        *,
        cache_dir: Path | None = None,
        author: tuple[str, str] = DEFAULT_AUTHOR,
        timeout: float | None = None,
    ) -> None:
        self.remote = Remote.parse(url)
        self.url = self.remote.url  # what git is given: no credentials
        self.display_url = self.remote.display
        self.path = clone_dir(url, cache_dir)
        self.author = author
        self._runner = GitRunner(self.remote, cwd=self.path, timeout=timeout)
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

    def _ensure_clone(self) -> None:
        if not (self.path / ".git").is_dir():
            with self._locked():
                if not (self.path / ".git").is_dir():  # another process may have cloned it
                    self._clone()

    def _clone(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".clone-", dir=self.path.parent))
        try:
            # the URL without credentials: it is what .git/config keeps as origin
            self._runner.run(
                "clone", "--quiet", "--no-checkout", self.url, str(tmp),
                cwd=self.path.parent, network=True,
            )  # fmt: skip
            tmp.rename(self.path)
        except GitError as err:
            raise GitError(
                f"cannot clone {self.display_url}: {err.message}",
                hint="check the URL, the credential and that this machine may read it",
            ) from err
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _run(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        network: bool = False,
    ) -> bytes:
        self._ensure_clone()
        return self._runner.run(*args, env=env, input=stdin, network=network).stdout

    def _git(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        network: bool = False,
    ) -> str:
        return self._run(*args, env=env, stdin=stdin, network=network).decode("utf-8", "replace")

    # --- reading -----------------------------------------------------------------------

    def fetch(self) -> None:
        """Bring every branch of the remote up to date (pruning deleted ones).

        A remote that does not answer is transient (RemoteUnreachable): the next round retries.
        """
        try:
            with self._locked():
                self._git(
                    "fetch", "--prune", "--force", "origin", "+refs/heads/*:refs/remotes/origin/*",
                    network=True,
                )  # fmt: skip
        except GitError as err:
            raise RemoteUnreachable(err.message, hint="the next round fetches again") from err

    def remote_head(self, branch: str) -> str:
        """The commit of ``branch`` on the remote now (``git ls-remote``: cheap, for polling)."""
        try:
            out = self._git("ls-remote", "--heads", "origin", branch, network=True).split()
        except GitError as err:
            raise RemoteUnreachable(err.message, hint="polling again later") from err
        if not out:
            raise RemoteUnreachable(f"{self.display_url} has no branch {branch!r}")
        return out[0]

    def head(self, branch: str) -> str | None:
        """The last fetched commit of ``branch`` on the remote, or None if it has none.

        Read through GitPython (``refs.py``): no process; git is asked where GitPython would
        not read the refs as git does."""
        self._ensure_clone()
        ref = f"refs/remotes/origin/{branch}"
        try:
            return read_ref(self.path / ".git", ref)
        except ReadByGit:
            pass
        try:
            return (
                self._git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip() or None
            )
        except GitError:
            return None

    def parents(self, commit: str) -> list[str]:
        """The parents of ``commit`` (two or more for a merge)."""
        return self._git("rev-list", "--parents", "-n", "1", commit).split()[1:]

    def changed_at(self, commit: str, path: str) -> datetime | None:
        """When ``path`` last changed on the first-parent history of ``commit`` (committer
        date: a merged pull request counts from its merge), None when it never existed."""
        out = self._git("log", "-1", "--first-parent", "--format=%cI", commit, "--", path).strip()
        return datetime.fromisoformat(out) if out else None

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
            try:
                data = io.BytesIO(self._run("archive", "--format=tar", sha))
            except GitError as err:
                raise GitError(f"cannot read commit {sha[:12]}: {err.message}") from err
            try:
                with tarfile.open(fileobj=data) as tar:
                    tar.extractall(tmp, filter="data")  # refuses links and paths out of the tree
            except tarfile.FilterError as err:
                raise self._refused(sha, err) from None
            except tarfile.TarError as err:
                raise GitError(f"cannot read commit {sha[:12]}: {err}") from err
            tmp.rename(tree)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _refused(self, sha: str, err: tarfile.FilterError) -> DocumentError:
        """A file of commit ``sha`` that would reach outside the repository's tree: a
        symbolic link to an absolute path or out through ``..`` (nothing was read through it,
        nothing written outside)."""
        member = err.tarinfo
        where = f"{member.name} in commit {sha[:12]} of {self.display_url}"
        if member.issym() or member.islnk():
            return DocumentError(
                f"{where} is a symbolic link to {member.linkname}, outside the repository; "
                "the commit is not read",
                file=member.name,
                hint="replace the link with a copy of the file it points to, or point it at a "
                "file inside the repository with a relative path, and push",
            )
        return DocumentError(
            f"{where} cannot be checked out safely ({err}); the commit is not read",
            file=member.name,
            hint="remove the file from the repository and push",
        )

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
        max_count: int | None = None,
    ) -> list[RepoCommit]:
        """Commits of ``rev`` (newest first) with their trailers, through
        ``%(trailers:...)`` so git itself decides what a trailer is."""
        fields = ["%H", "%an", "%ae", "%aI", "%cn", "%ce", "%s", "%b", "%(trailers:unfold,only)"]
        fmt = _FS.join(fields) + _RS
        args = ["log", f"--format={fmt}"]
        if since is not None:
            args.append(f"--since={since.isoformat()}")
        if grep_trailer:
            args.append(f"--grep=^{grep_trailer}:")
        if max_count is not None:
            args.append(f"--max-count={max_count}")
        args.append(rev)
        if paths:
            args += ["--", *paths]
        records = []
        for chunk in self._git(*args).split(_RS):
            fields = chunk.strip("\n").split(_FS)
            if len(fields) != 9:
                continue
            sha, name, email, date, committer, committer_email, subject, body, trailers = fields
            records.append(
                RepoCommit(
                    sha=sha,
                    author=name,
                    email=email,
                    date=datetime.fromisoformat(date),
                    subject=subject,
                    body=body.strip(),
                    trailers=parse_trailers(trailers),
                    committer=committer,
                    committer_email=committer_email,
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
        return self._commit(parent, files, message, trailers)

    def _commit(
        self,
        parent: str | None,
        files: Mapping[str, str],
        message: str,
        trailers: Mapping[str, str],
    ) -> str:
        """The commit of ``files`` over ``parent``'s tree (None: a root commit of them alone)."""
        fd, index = tempfile.mkstemp(prefix=".index-", dir=self.path / ".git")
        os.close(fd)
        os.unlink(index)  # git wants to create it
        env = {"GIT_INDEX_FILE": index}
        try:
            if parent is not None:
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
        parents = ["-p", parent] if parent is not None else []
        return self._git("commit-tree", tree, *parents, env=ident, stdin=full).strip()

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
        self._ensure_clone()
        pushed = self._runner.run(
            "push", "--porcelain", lease, "origin", spec, network=True, check=False
        )
        if not pushed.ok:
            if lost_race(pushed.stderr + pushed.out):
                raise PushRejected(
                    f"{self.display_url}: {branch} moved since it was read "
                    f"(expected {expected or 'no branch'})",
                    hint="fetch and plan again; nothing was overwritten",
                )
            raise GitError(f"git push to {self.display_url} failed: {detail(pushed)}")
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
        return self._commit(parent, files, message, trailers)

    def resolve(self, ref: str) -> str | None:
        """The commit ``ref`` names: a branch of the remote, else anything ``git rev-parse``
        reads in the clone (a commit id, a tag), else fetched from the remote by that name (a
        pull request's head commit or ``refs/pull/N/head``). None when none of these is one."""
        branch = self.head(ref)
        if branch is not None:
            return branch
        try:
            sha = self._git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip()
        except GitError:
            sha = ""
        if sha:
            return sha
        try:
            with self._locked():
                self._git("fetch", "--quiet", "origin", ref)
            return self._git("rev-parse", "--verify", "--quiet", "FETCH_HEAD^{commit}").strip()
        except GitError:
            return None
