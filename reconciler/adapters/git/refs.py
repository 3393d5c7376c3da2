"""The refs of a clone, read through GitPython: files read in this process, no git started.

``read_ref(git_dir, ref)`` reads one ref with GitPython's ``Repo`` (the ref's file, else its
line in ``packed-refs``, a symbolic ref followed to its end). Nothing is started, so there is
nothing to time out and no environment to keep secrets out of; ``head`` (read several times
a round) costs a file read instead of a ``git rev-parse``.

GitPython reads refs as git does only in a repository of git's default formats; elsewhere
``read_ref`` raises ``ReadByGit`` and the caller asks git through the bounded runner:

- an ``extensions.*`` setting GitPython does not implement: SHA-256 object names
  (``objectFormat``, which a clone of a SHA-256 remote takes), reftable refs
  (``refStorage``), or any other it would ignore;
- ``GIT_COMMON_DIR`` in this process's environment, which GitPython follows to another
  repository's refs (git never sees it: the runner drops it);
- a ref file GitPython cannot make sense of (left empty by a crash, say): git says what it is.

Why nothing else of the repository is read through GitPython (``docs/gitops.md``, GitPython):
its object reads go through ``git cat-file --batch`` processes that live as long as the
``Repo``, are read with no timeout and get this process's environment (its secrets and a
caller's ``GIT_DIR`` included; ``Git.execute`` can add variables, never remove one); its pure
Python object database (``GitDB``) is deprecated by GitPython for security and performance;
its log (``iter_commits``) runs ``git rev-list`` unbounded and reads each commit's trailers
with a ``git interpret-trailers`` of its own. Objects, the log and trees are read by one
bounded ``git`` call each (``runner.py``).

Importing GitPython runs ``git version`` once per process (its own check that git works,
without a timeout); it reads no repository and runs no hook. It is imported on first use.
"""

from __future__ import annotations

import configparser
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Final

from reconciler.errors import GitError

if TYPE_CHECKING:
    from git import Repo

_DEFAULT_FORMAT: Final = {
    "objectformat": "sha1",
    "refstorage": "files",
    # extensions that change nothing GitPython reads from refs
    "noop": None,
    "preciousobjects": None,
    "worktreeconfig": None,
}
"""``extensions.*`` settings under which GitPython reads refs as git does (None: any value)."""
_KEEP_FORMATS: Final = 64
_formats: dict[Path, tuple[tuple[int, int, int], bool]] = {}
"""Each repository's config file as last read (inode, mtime, size) -> its verdict."""
_lock = threading.Lock()


class ReadByGit(Exception):
    """GitPython would not read this repository's refs as git does: ask git."""


def read_ref(git_dir: Path, ref: str) -> str | None:
    """The object name ``ref`` (e.g. ``refs/remotes/origin/main``) holds in the repository at
    ``git_dir``, None when there is no such ref; ReadByGit when git must be asked."""
    try:
        import git
        from git.refs.symbolic import SymbolicReference
    except ImportError as err:  # GitPython refuses to load without a working git
        raise GitError(f"cannot load GitPython: {err}", hint="install git") from err
    try:
        repo = git.Repo(git_dir, expand_vars=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as err:
        raise GitError(
            f"{git_dir} is not a git repository",
            hint="remove the cached clone it belongs to; the next command clones it again",
        ) from err
    try:
        if not _default_format(repo, git_dir):
            raise ReadByGit(ref)
        try:
            return SymbolicReference.dereference_recursive(repo, ref)
        except ValueError:  # absent, not a valid ref name, or not an object name
            return None
        except (TypeError, AssertionError, IndexError) as err:  # a file it cannot parse
            raise ReadByGit(ref) from err
    finally:
        repo.close()


def _default_format(repo: Repo, git_dir: Path) -> bool:
    """Whether GitPython reads the refs of ``repo`` (opened at ``git_dir``) as git would."""
    if Path(repo.common_dir).resolve() != git_dir.resolve():  # GIT_COMMON_DIR, or a worktree
        return False
    config = git_dir / "config"
    try:
        seen = config.stat()
    except OSError:
        return False  # git says what is wrong with it
    stamp = (seen.st_ino, seen.st_mtime_ns, seen.st_size)
    with _lock:
        known = _formats.get(config)
    if known is not None and known[0] == stamp:
        return known[1]
    verdict = _extensions_known(repo)
    with _lock:
        if len(_formats) > _KEEP_FORMATS:
            _formats.clear()
        _formats[config] = (stamp, verdict)
    return verdict


def _extensions_known(repo: Repo) -> bool:
    try:
        config = repo.config_reader("repository")
        if not config.has_section("extensions"):
            return True
        settings = {name.lower(): str(value).lower() for name, value in config.items("extensions")}
    except (OSError, configparser.Error):
        return False  # git says what is wrong with it
    return all(
        name in _DEFAULT_FORMAT and _DEFAULT_FORMAT[name] in (None, value)
        for name, value in settings.items()
    )
