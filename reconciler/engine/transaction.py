"""One git transaction on a branch of the state repository: read the head, edit, commit, push.

``checkout_head(repo, branch, folder)`` is the only way a command reads a branch: fetch, read
the head, check out its files (a tree of their own per commit, read only) and find the
cluster folder in them, with one set of errors (no such branch, a PATH outside the
repository, no such folder at that commit). ``checkout_commit`` is its second half, for a
commit found otherwise (the head an edit is made on, a revision ``impact`` compares).

``commit_on_branch(repo, branch, edit)`` is the only way the reconciler writes a commit on a
branch others write too (the audit records of every cluster of a fleet, the rollouts' records,
``drain``'s edit). Like client-go's ``RetryOnConflict``:

1. fetch, and read the head of ``branch``;
2. ``edit(head)`` works out the change from the files at that head (None: nothing to do);
3. commit it on that head and push it as a compare-and-swap from that head;
4. a lost race (``PushRejected``: the adapter maps every form a remote answers with, a
   ``[rejected]`` non-fast-forward as well as a ``[remote rejected] (failed to update ref)``
   or ``cannot lock ref ... but expected``) waits a jittered, growing delay and starts again
   at 1, so the edit is always made again on what the others wrote.

``RetryPolicy`` says how often and how long: by default 12 attempts; the wait after the
``n``-th lost race is drawn evenly from ``[0, min(cap, slot * 2**(n-1)))`` ("full jitter", so
writers that collided once spread out instead of colliding again), where ``slot`` is the
larger of 50 ms and the time the attempt took (a slot shorter than one attempt cannot part
the writers: a slow remote gets longer waits), and ``cap`` is 4 s: on a quick remote at
most about 22 s of waiting in all, under a contention no fleet's rounds reach. Its random
source, its clock and its sleep are injectable, so tests decide every delay. Any other
error (the remote does not answer, a hook refused the push) is raised at once: only a lost
race is retried here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Final, Generic, TypeVar

from reconciler.errors import ConfigError, GitError, PushRejected, ReconcilerError

if TYPE_CHECKING:  # read by every command that reads a branch: the ports only for types
    from reconciler.engine.ports import StateRepo

T = TypeVar("T")

ATTEMPTS: Final = 12
"""Tries of one transaction before it gives up (a fleet of clusters writing to one branch)."""
BASE_DELAY: Final = 0.05
"""Seconds: the ceiling of the first wait after a lost race; it doubles with each loss..."""
MAX_DELAY: Final = 4.0
"""...up to this ceiling."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often a transaction that lost a race tries again, and how long it waits first."""

    attempts: int = ATTEMPTS
    base: float = BASE_DELAY
    cap: float = MAX_DELAY
    rng: random.Random = field(default_factory=random.Random, compare=False)
    """Where the jitter comes from (a seeded one in tests)."""
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)
    """Times each attempt, whose length sets the first slot of the jitter."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, not {self.attempts}")
        if not 0 <= self.base <= self.cap:
            raise ValueError(f"delays must satisfy 0 <= base <= cap ({self.base}, {self.cap})")

    def delay(self, lost: int, took: float = 0.0) -> float:
        """Seconds to wait after the ``lost``-th lost race (1, 2, ...) of attempts that took
        ``took`` seconds: drawn evenly below a ceiling that starts at the larger of ``base``
        and ``took`` (a slot no shorter than one attempt, or jitter cannot part the writers)
        and doubles with each loss, up to ``cap``."""
        ceiling = min(self.cap, max(self.base, took) * 2.0 ** (lost - 1))
        return float(self.rng.uniform(0.0, ceiling))

    def ceiling(self, took: float = 0.0) -> float:
        """The longest the waits of one transaction whose attempts take ``took`` seconds can
        add up to."""
        return sum(min(self.cap, max(self.base, took) * 2.0**n) for n in range(self.attempts - 1))


@dataclass(frozen=True)
class Change(Generic[T]):
    """What an edit makes of the files at a head: the commit to make, and its own ``value``
    (what it decided, handed back with the commit)."""

    files: Mapping[str, str]
    message: str
    trailers: Mapping[str, str]
    value: T
    push_to: str | None = None
    """Push the commit to this branch instead (a proposal: made on the head read, replacing
    whatever that branch holds, compared against its fetched head)."""


@dataclass(frozen=True)
class Committed(Generic[T]):
    """A change pushed: its commit, the head it was made on and the edit's value."""

    commit: str
    parent: str
    branch: str
    """Where it was pushed."""
    value: T
    attempts: int
    """How many tries it took (1: no race lost)."""


def commit_on_branch(
    repo: StateRepo,
    branch: str,
    edit: Callable[[str], Change[T] | None],
    *,
    retry: RetryPolicy | None = None,
    what: str = "write the commit",
    hint: str = "the next attempt reads the new head and writes it again",
    absent: Callable[[], ReconcilerError] | None = None,
) -> Committed[T] | None:
    """Make ``edit``'s change on the head of ``branch`` and push it, again on the new head after
    every lost race; None when ``edit`` says there is nothing to do.

    ``absent`` makes the error for a ``branch`` that does not exist (default: GitError).
    PushRejected, saying "the branch kept moving", when every attempt lost its race; ``what``
    and ``hint`` word it.
    """
    policy = retry or RetryPolicy()
    target = branch
    took = 0.0
    for attempt in range(1, policy.attempts + 1):
        if attempt > 1:
            policy.sleep(policy.delay(attempt - 1, took))
        started = policy.clock()
        repo.fetch()
        head = repo.head(branch)
        if head is None:
            raise (absent() if absent is not None else _no_branch(branch))
        change = edit(head)
        if change is None:
            return None
        commit = repo.commit_files(
            parent=head,
            files=dict(change.files),
            message=change.message,
            trailers=dict(change.trailers),
        )
        target = change.push_to or branch
        expected = head if change.push_to is None else repo.head(target)
        try:
            repo.push(target, commit, expected=expected)
        except PushRejected:
            took = max(0.0, policy.clock() - started)
            continue  # someone pushed first: read their head and make the change on top of it
        return Committed(
            commit=commit, parent=head, branch=target, value=change.value, attempts=attempt
        )
    raise PushRejected(
        f"could not {what} on {target}: the branch kept moving ({policy.attempts} tries)",
        hint=hint,
    )


def _no_branch(branch: str) -> GitError:
    return GitError(f"the state repository has no branch {branch!r} to record on")


# --- reading a branch -----------------------------------------------------------------------


@dataclass(frozen=True)
class Checkout:
    """A commit of the state repository, checked out."""

    commit: str
    root: Path
    """The files of ``commit``, in a folder of their own (read them, never write them)."""
    folder: Path
    """The cluster folder in them."""


def repo_folder(path: str) -> str:
    """``path`` (PATH of a command with ``--repo``) as a folder inside the repository, POSIX
    and relative; ConfigError for an absolute one or one that climbs out with ``..``."""
    rel = PurePosixPath(path)
    if rel.is_absolute() or ".." in rel.parts:
        raise ConfigError(
            f"PATH {rel} must be a folder inside the repository",
            hint="write it relative to the repository root, e.g. cluster-state",
        )
    return str(rel)


def no_branch(display: str, branch: str) -> ConfigError:
    """The error of a command whose ``--branch`` the repository does not have."""
    return ConfigError(
        f"{display} has no branch {branch!r}",
        hint="pass the branch that holds the cluster folders with --branch",
    )


def checkout_head(
    repo: StateRepo, branch: str, folder: str, *, display: str, present: bool = True
) -> Checkout:
    """Fetch, and check out the head of ``branch`` with the cluster folder ``folder`` in it
    (``display`` names the repository in errors). ConfigError for a PATH outside the
    repository (before anything is fetched), a branch the remote does not have, and, unless
    ``present`` is off, a folder the commit does not have."""
    rel = repo_folder(folder)
    repo.fetch()
    commit = repo.head(branch)
    if commit is None:
        raise no_branch(display, branch)
    return checkout_commit(repo, commit, rel, display=display, at=branch, present=present)


def checkout_commit(
    repo: StateRepo,
    commit: str,
    folder: str,
    *,
    display: str,
    at: str,
    present: bool = True,
    context: str = "",
) -> Checkout:
    """The files of ``commit`` and the cluster folder ``folder`` in them; ConfigError when the
    commit has no such folder (unless ``present`` is off), naming it as ``at`` (the branch or
    revision it was asked for) with ``context`` after."""
    rel = repo_folder(folder)
    root = repo.checkout(commit)
    path = root / rel
    if present and not path.is_dir():
        raise ConfigError(
            f"{display} has no folder {rel} at {at} ({commit[:12]}){context}",
            hint="pass the cluster folder inside the repository as PATH",
        )
    return Checkout(commit, root, path)


__all__ = [
    "Change",
    "Checkout",
    "Committed",
    "RetryPolicy",
    "checkout_commit",
    "checkout_head",
    "commit_on_branch",
    "no_branch",
    "repo_folder",
]
