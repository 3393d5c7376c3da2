"""The lease of a cluster on one machine: an ``fcntl.flock`` lock on a file.

Every process on the machine sees the lock; the kernel drops it the moment its holder exits or
is killed, so a standby takes over at once. The holder writes who it is (host, pid, start
time) into the file, so ``apply`` and a standby can say who holds it. ``apply`` and ``run``
take the same lock (``lock_path``): one of them acts on a cluster at a time.

The file is never deleted: removing a locked file would let a second process lock a new file
of the same name while the first still holds the old one. ``confirm`` checks for exactly that.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from reconciler.errors import TerminalError

FILE_NAME = "lock"
"""``apply`` and ``run`` lock the same file: one acting process per cluster."""


def lock_path(state_dir: Path, cluster: str) -> Path:
    """``<state dir>/<cluster>/lock``, next to the cluster's status."""
    return state_dir / cluster / FILE_NAME


def identity(started: datetime | None = None, command: str = "run") -> dict[str, object]:
    """Who holds the lock: ``apply`` and ``run`` write the same record, so each names the other."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "since": (started or datetime.now(UTC)).isoformat(timespec="seconds"),
        "command": command,
    }


def describe(record: dict[str, object]) -> str:
    return (
        f"{record.get('command', '?')} (pid {record.get('pid', '?')} on "
        f"{record.get('host', '?')}, since {record.get('since', '?')})"
    )


class FileLease:
    """A Lease held while this object keeps its locked file open."""

    def __init__(
        self, path: Path, *, started: datetime | None = None, command: str = "run"
    ) -> None:
        self.path = path
        self.me = identity(started, command)
        self._fd: int | None = None

    def acquire(self) -> bool:
        if self._fd is not None:
            return True
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            if os.fstat(fd).st_uid == os.getuid():
                os.fchmod(fd, 0o666)  # another user's command must be able to lock it too
        except OSError as err:
            raise TerminalError(
                f"cannot open lease file {self.path}: {err.strerror}",
                hint="give the reconciler's user write access to its state directory",
            ) from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError as err:
            os.close(fd)
            raise TerminalError(f"cannot lock {self.path}: {err.strerror}") from err
        data = (json.dumps(self.me) + "\n").encode()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            os.fsync(fd)
        except OSError as err:
            os.close(fd)  # the lock goes with it
            raise TerminalError(
                f"cannot write who holds {self.path}: {err.strerror}",
                hint="free space on that file system, or set $RECONCILER_LOCK_DIR to another "
                "directory",
            ) from err
        self._fd = fd
        return True

    def confirm(self) -> bool:
        """Still locked by us, and the file at the path is still the one we locked."""
        if self._fd is None:
            return False
        try:
            return os.fstat(self._fd).st_ino == os.stat(self.path).st_ino
        except OSError:
            return False

    def holder(self) -> str | None:
        """Who holds the lock now, or None when nobody does."""
        if self._fd is not None:
            return describe(self.me)
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise TerminalError(f"cannot read lease file {self.path}: {err.strerror}") from err
        try:
            try:  # a shared lock succeeds only when nobody holds the exclusive one
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                pass
            else:
                return None
            text = os.read(fd, 4096).decode(errors="replace")
        finally:
            os.close(fd)
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            return "another process (it has not written its name yet)"
        return describe(record) if isinstance(record, dict) else "another process"

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing drops the lock


LOCK_DIR_ENV = "RECONCILER_LOCK_DIR"


def lock_dir() -> Path:
    """Where cluster locks live: ``$RECONCILER_LOCK_DIR``, else /run/lock, else the temp dir.

    The same for every state directory and user on the machine, so two commands acting on one
    cluster with different ``--state-dir`` still find each other's lock.
    """
    configured = os.environ.get(LOCK_DIR_ENV)
    if configured:
        return Path(configured)
    run_lock = Path("/run/lock")
    if run_lock.is_dir() and os.access(run_lock, os.W_OK):
        return run_lock / "reconciler"
    import tempfile

    return Path(tempfile.gettempdir()) / "reconciler-locks"


def cluster_lock_path(cluster: str, hosts: Sequence[tuple[str, str]]) -> Path:
    """The lock of a cluster, keyed by its name and its hosts' (name, URI), not by a folder."""
    key = json.dumps([cluster, sorted(hosts)])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in cluster)[:64]
    return lock_dir() / f"{safe}-{digest}.lock"
