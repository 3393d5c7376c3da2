"""One acting reconciler per cluster on a machine: a lock file other processes see.

``fcntl.flock`` on ``<state dir>/<cluster>/lock``: the kernel releases it the moment its holder
dies, so a killed ``apply`` never blocks the next one. The holder writes who it is (host, pid,
start time, command) into the file, so the one refused can say who holds it.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from reconciler.errors import TerminalError


class ClusterLocked(TerminalError):
    """Another reconciler acts on this cluster now."""


class ClusterLock:
    def __init__(self, path: Path, what: str = "apply") -> None:
        self.path = path
        self.what = what
        self._file: IO[str] | None = None

    def acquire(self) -> bool:
        """Take the lock; False (and ``holder()`` says who) when another process has it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = self.path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            return False
        f.seek(0)
        f.truncate()
        holder = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": self.what,
        }
        f.write(json.dumps(holder) + "\n")
        f.flush()
        self._file = f
        return True

    def holder(self) -> str | None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError):
            return None
        if not data:
            return None
        return (
            f"{data.get('command', '?')} (pid {data.get('pid', '?')} on {data.get('host', '?')}, "
            f"since {data.get('since', '?')})"
        )

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def __enter__(self) -> ClusterLock:
        if not self.acquire():
            raise ClusterLocked(
                f"another reconciler acts on this cluster: {self.holder() or 'unknown holder'}",
                hint=f"wait for it to finish; the lock is {self.path}",
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
