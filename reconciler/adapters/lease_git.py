"""The lease of a cluster shared through its state repository: a ref updated by compare-and-swap.

``refs/reconciler/lease/<cluster>`` points at a parentless commit whose message is the lease
record (holder, renew time, duration). Taking, renewing and releasing it are pushes with
``--force-with-lease=<ref>:<old>``: the remote accepts one only if the ref still is what this
instance last read, so two instances can never both believe they took it.

Expiry follows client-go's leader election and does not compare clocks across machines: a
candidate takes the lease over when it has seen the record unchanged for a whole lease
duration on its own monotonic clock. The holder renews every retry period and stops acting
when it has not renewed within the renew deadline (shorter than the lease, so it stops before
anyone may take over). Defaults are client-go's: 15 s lease, 10 s renew deadline, 2 s retry.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from reconciler.errors import TerminalError, TransientError

LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0
GIT_TIMEOUT = 20.0


def lease_ref(cluster: str) -> str:
    return f"refs/reconciler/lease/{cluster}"


def default_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{int(time.time())}"


class GitLease:
    """A Lease in ``remote``'s ref for ``cluster``; ``work_dir`` holds a scratch bare repo."""

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
    ) -> None:
        if renew_deadline >= lease_duration:
            raise TerminalError(
                f"renew deadline {renew_deadline}s must be shorter than the lease {lease_duration}s"
            )
        self.remote = remote
        self.ref = lease_ref(cluster)
        self.work_dir = work_dir
        self.me = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self._monotonic = monotonic
        self._now = now
        self._seen: str | None = None
        self._seen_at = 0.0
        self._held: str | None = None
        self._renewed_at = 0.0
        self._acquired_at: str | None = None

    # -- git ---------------------------------------------------------------------------------

    def _git(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_AUTHOR_NAME": "reconciler",
            "GIT_AUTHOR_EMAIL": "reconciler@localhost",
            "GIT_COMMITTER_NAME": "reconciler",
            "GIT_COMMITTER_EMAIL": "reconciler@localhost",
        }
        try:
            return subprocess.run(
                ["git", "--git-dir", str(self.work_dir), *args],
                input=input,
                capture_output=True,
                text=True,
                env=env,
                timeout=GIT_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as err:
            raise TransientError(f"git {args[0]} on {self.remote} timed out") from err
        except OSError as err:
            raise TerminalError(f"cannot run git: {err.strerror}", hint="install git") from err

    def _ensure_repo(self) -> None:
        if not (self.work_dir / "HEAD").exists():
            self.work_dir.mkdir(parents=True, exist_ok=True)
            out = self._git("init", "--quiet", "--bare")
            if out.returncode != 0:
                raise TerminalError(f"cannot create {self.work_dir}: {out.stderr.strip()}")

    def _read(self) -> tuple[str | None, dict[str, object]]:
        """The ref's commit on the remote and its record ({} when absent or released)."""
        self._ensure_repo()
        out = self._git("ls-remote", "--refs", self.remote, self.ref)
        if out.returncode != 0:
            raise TransientError(f"cannot read the lease on {self.remote}: {out.stderr.strip()}")
        sha = out.stdout.split()[0] if out.stdout.strip() else None
        if sha is None:
            return None, {}
        if self._git("cat-file", "-e", sha).returncode != 0:
            got = self._git("fetch", "--quiet", "--no-tags", self.remote, f"+{self.ref}:{self.ref}")
            if got.returncode != 0:
                raise TransientError(f"cannot fetch the lease: {got.stderr.strip()}")
        body = self._git("log", "-1", "--format=%B", sha)
        try:
            record = json.loads(body.stdout)
        except json.JSONDecodeError:
            record = {}
        return sha, record if isinstance(record, dict) else {}

    def _push(self, old: str | None, record: dict[str, object]) -> str | None:
        """Swap the ref from ``old`` to a new record; its commit, or None when another won."""
        tree = self._git("mktree", input="").stdout.strip()
        made = self._git("commit-tree", tree, "-m", json.dumps(record, sort_keys=True))
        if made.returncode != 0:
            raise TerminalError(f"cannot write the lease record: {made.stderr.strip()}")
        new = made.stdout.strip()
        pushed = self._git(
            "push",
            "--quiet",
            "--porcelain",
            f"--force-with-lease={self.ref}:{old or ''}",
            self.remote,
            f"{new}:{self.ref}",
        )
        if pushed.returncode == 0:
            return new
        text = pushed.stdout + pushed.stderr
        if "stale info" in text or "rejected" in text or "fetch first" in text:
            return None
        raise TransientError(f"cannot push the lease to {self.remote}: {pushed.stderr.strip()}")

    # -- the Lease port -------------------------------------------------------------------------

    def acquire(self) -> bool:
        sha, record = self._read()
        now = self._monotonic()
        if sha != self._seen:
            self._seen, self._seen_at = sha, now
        holder = record.get("holder") or None
        if holder == self.me and sha == self._held:
            pass  # renew
        elif holder is not None and now - self._seen_at < self.lease_duration:
            self._held = None
            return False
        when = self._now().isoformat(timespec="milliseconds")
        if self._held is None or sha != self._held:
            self._acquired_at = when
        new = self._push(
            sha,
            {
                "holder": self.me,
                "acquireTime": self._acquired_at,
                "renewTime": when,
                "leaseDurationSeconds": self.lease_duration,
            },
        )
        if new is None:
            self._held = None
            return False
        self._held = self._seen = new
        self._renewed_at = self._seen_at = now
        return True

    def confirm(self) -> bool:
        """Renewed within the deadline and the remote ref is still our record."""
        if self._held is None or self._monotonic() - self._renewed_at >= self.renew_deadline:
            return False
        sha, _ = self._read()
        return sha == self._held

    def holder(self) -> str | None:
        _, record = self._read()
        holder = record.get("holder")
        if not holder:
            return None
        return f"{holder} (renewed {record.get('renewTime')})"

    def release(self) -> None:
        """Write an empty holder so a standby takes over at once, not a lease later."""
        held, self._held = self._held, None
        if held is None:
            return
        when = self._now().isoformat(timespec="milliseconds")
        self._push(held, {"holder": "", "renewTime": when, "leaseDurationSeconds": 1})
