"""The lease of a cluster shared through its state repository: a ref updated by compare-and-swap.

``refs/reconciler/lease/<cluster>`` points at a parentless commit whose message is the lease
record (holder, acquire time, sequence, duration). Taking, renewing and releasing it are pushes
with ``--force-with-lease=<ref>:<old>``: the remote accepts one only if the ref still is what
this instance last read, so two instances can never both believe they took it.

Expiry follows client-go's leader election and does not compare clocks across machines: a
candidate takes the lease over when it has seen the record unchanged for a whole lease
duration on its own monotonic clock. The holder renews every retry period and stops acting
when it has not renewed within the renew deadline (shorter than the lease, so it stops before
anyone may take over). Defaults are client-go's: 15 s lease, 10 s renew deadline, 2 s retry.

Renewals create no new objects for ever: a record holds no renew time, only a ``sequence``
that counts renewals modulo ``RECORDS``, and its commit's dates are the term's acquire time,
so renewal ``k`` and renewal ``k + RECORDS`` are the same commit object. The ref still
changes at every renewal, which is all a standby's expiry needs, and a term writes at most
``RECORDS`` commits (plus its release record) however long it lasts; the remote and every
scratch repository keep them once. ``RECORDS`` renewals (64 s at the 2 s retry period) are
far longer than a lease, so a standby never sees the same record again within one.

Git runs through ``GitRunner``: every call has a timeout, and a credential in the URL or in
``RECONCILER_GIT_TOKEN`` reaches git through its environment, never its command line.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from reconciler.adapters.git.runner import GitRunner, Remote, detail
from reconciler.errors import GitError, TerminalError, TransientError

LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0
RECORDS = 32
"""Distinct records (commit objects) a term cycles through while renewing."""
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_IDENT = {
    "GIT_AUTHOR_NAME": "reconciler",
    "GIT_AUTHOR_EMAIL": "reconciler@localhost",
    "GIT_COMMITTER_NAME": "reconciler",
    "GIT_COMMITTER_EMAIL": "reconciler@localhost",
}


def lease_ref(cluster: str) -> str:
    return f"refs/reconciler/lease/{cluster}"


def default_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{int(time.time())}"


class GitLease:
    """A Lease in ``remote``'s ref for ``cluster``; ``work_dir`` holds a scratch bare repo.

    ``git_timeout`` bounds every git call (default: ``RECONCILER_GIT_TIMEOUT`` or 20 s).
    """

    def __init__(
        self,
        remote: str,
        cluster: str,
        work_dir: Path,
        *,
        identity: str | None = None,
        lease_duration: float = LEASE_DURATION,
        renew_deadline: float = RENEW_DEADLINE,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        git_timeout: float | None = None,
    ) -> None:
        if renew_deadline >= lease_duration:
            raise TerminalError(
                f"renew deadline {renew_deadline}s must be shorter than the lease {lease_duration}s"
            )
        self._remote = Remote.parse(remote)
        self.remote = self._remote.display  # for messages: never the credential
        self.ref = lease_ref(cluster)
        self.work_dir = work_dir
        self.me = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self._monotonic = monotonic
        self._now = now
        self._git_runner = GitRunner(self._remote, git_dir=work_dir, timeout=git_timeout)
        self._seen: str | None = None
        self._seen_at = 0.0
        self._held: str | None = None
        self._renewed_at = 0.0
        self._acquired_at: datetime | None = None
        self._sequence = 0
        self._records: dict[str, dict[str, object]] = {}  # commit -> record, read or written
        self._written: dict[str, str] = {}  # record's message -> its commit, this term

    # -- git ---------------------------------------------------------------------------------

    def _git(self, *args: str, input: str | None = None, env: dict[str, str] | None = None) -> str:
        """A local git call on the scratch repository; its output."""
        return self._git_runner.run(*args, input=input, env=env).out

    def _ensure_repo(self) -> None:
        if not (self.work_dir / "HEAD").exists():
            self.work_dir.mkdir(parents=True, exist_ok=True)
            try:
                self._git_runner.run("init", "--quiet", "--bare", cwd=self.work_dir)
            except GitError as err:
                raise TerminalError(f"cannot create {self.work_dir}: {err.message}") from err

    def _remember(self, sha: str, record: dict[str, object]) -> None:
        if len(self._records) > 4 * RECORDS:  # another holder's terms: keep it bounded
            self._records.clear()
        self._records[sha] = record

    def _read(self) -> tuple[str | None, dict[str, object]]:
        """The ref's commit on the remote and its record ({} when absent or released)."""
        self._ensure_repo()
        listed = self._git_runner.run(
            "ls-remote", "--refs", self._remote.url, self.ref, network=True, check=False
        )
        if not listed.ok:
            raise TransientError(f"cannot read the lease on {self.remote}: {detail(listed)}")
        sha = listed.out.split()[0] if listed.out.strip() else None
        if sha is None:
            return None, {}
        if sha in self._records:  # a record seen or written before: nothing to fetch
            return sha, self._records[sha]
        if not self._git_runner.run("cat-file", "-e", sha, check=False).ok:
            got = self._git_runner.run(
                "fetch", "--quiet", "--no-tags", self._remote.url, f"+{self.ref}:{self.ref}",
                network=True, check=False,
            )  # fmt: skip
            if not got.ok:
                raise TransientError(f"cannot fetch the lease from {self.remote}: {detail(got)}")
        try:
            record = json.loads(self._git("log", "-1", "--format=%B", sha))
        except (json.JSONDecodeError, GitError):
            record = {}
        record = record if isinstance(record, dict) else {}
        self._remember(sha, record)
        return sha, record

    def _commit(self, record: dict[str, object], when: datetime) -> str:
        """The record's commit: the same record at the same time is the same object."""
        message = json.dumps(record, sort_keys=True)
        if message in self._written:
            return self._written[message]
        stamp = f"@{int(when.timestamp())} +0000"
        try:
            new = self._git(
                "commit-tree", EMPTY_TREE, "-m", message,
                env={**_IDENT, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp},
            ).strip()  # fmt: skip
        except GitError as err:
            raise TerminalError(f"cannot write the lease record: {err.message}") from err
        if len(self._written) > RECORDS:
            self._written.clear()
        self._written[message] = new
        self._remember(new, record)
        return new

    def _push(
        self, old: str | None, record: dict[str, object], when: datetime | None = None
    ) -> str | None:
        """Swap the ref from ``old`` to a new record; its commit, or None when another won."""
        self._ensure_repo()
        self._ensure_empty_tree()
        new = self._commit(record, when or self._acquired_at or self._now())
        pushed = self._git_runner.run(
            "push", "--quiet", "--porcelain", f"--force-with-lease={self.ref}:{old or ''}",
            self._remote.url, f"{new}:{self.ref}",
            network=True, check=False,
        )  # fmt: skip
        if pushed.ok:
            return new
        text = pushed.out + pushed.stderr
        if "stale info" in text or "rejected" in text or "fetch first" in text:
            return None
        raise TransientError(f"cannot push the lease to {self.remote}: {detail(pushed)}")

    def _ensure_empty_tree(self) -> None:
        if EMPTY_TREE not in self._written.values():
            # written once per process; a commit needs its tree in the object store to be sent
            if self._git("mktree", input="").strip() != EMPTY_TREE:
                raise TerminalError(f"{self.work_dir}: git wrote an unexpected empty tree")
            self._written["\0empty-tree"] = EMPTY_TREE

    # -- the Lease port -------------------------------------------------------------------------

    def _record(self) -> dict[str, object]:
        assert self._acquired_at is not None
        return {
            "holder": self.me,
            "acquireTime": self._acquired_at.isoformat(),
            "sequence": self._sequence,
            "leaseDurationSeconds": self.lease_duration,
        }

    def _ours(self, record: dict[str, object]) -> bool:
        """A record of this instance's current term."""
        return (
            self._acquired_at is not None
            and record.get("holder") == self.me
            and record.get("acquireTime") == self._acquired_at.isoformat()
        )

    def acquire(self) -> bool:
        if self._held is not None:
            # renew: one compare-and-swap push from the record we hold; it fails only if
            # someone else wrote the ref, and then the lease is read as any candidate does
            self._sequence = (self._sequence + 1) % RECORDS
            if self._pushed(self._held, self._monotonic()):
                return True
            self._held = None
        sha, record = self._read()
        now = self._monotonic()
        if sha != self._seen:
            self._seen, self._seen_at = sha, now
        holder = record.get("holder") or None
        if sha is not None and self._ours(record):
            # our own renewal, taken by the remote though its answer was lost (a timeout):
            # the term goes on from it rather than waiting a lease for itself
            sequence = record.get("sequence")
            self._sequence = (sequence if isinstance(sequence, int) else 0) + 1
            self._sequence %= RECORDS
            return self._pushed(sha, now)
        if holder is not None and now - self._seen_at < self.lease_duration:
            return False
        # a new term: a new acquire time, so its records are objects of its own
        self._acquired_at = self._now().replace(microsecond=0)
        self._sequence = 0
        self._written = {k: v for k, v in self._written.items() if v == EMPTY_TREE}
        return self._pushed(sha, now)

    def _pushed(self, old: str | None, now: float) -> bool:
        """Push this term's record over ``old``; when it is taken, hold it as renewed at
        ``now`` (this process's monotonic clock). False when another holder won the swap."""
        new = self._push(old, self._record(), self._acquired_at)
        if new is None:
            return False
        self._held = self._seen = new
        self._renewed_at = self._seen_at = now
        return True

    def confirm(self) -> bool:
        """Renewed within the deadline and the remote ref is still a record of this term: the
        one held, or a renewal the keeper pushed whose answer it has not taken in yet."""
        if self._held is None or self._monotonic() - self._renewed_at >= self.renew_deadline:
            return False
        sha, record = self._read()
        return sha is not None and (sha == self._held or self._ours(record))

    def holder(self) -> str | None:
        _, record = self._read()
        holder = record.get("holder")
        if not holder:
            return None
        return f"{holder} (since {record.get('acquireTime')})"

    def release(self) -> None:
        """Write an empty holder so a standby takes over at once, not a lease later."""
        held, self._held = self._held, None
        if held is None:
            return
        self._push(
            held,
            {
                "holder": "",
                "releasedBy": self.me,
                "acquireTime": self._acquired_at.isoformat() if self._acquired_at else None,
                "leaseDurationSeconds": 1,
            },
        )
