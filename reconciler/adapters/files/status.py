"""The ReconcileStatus of one cluster in a JSON file that survives restarts.

Default place: ``$XDG_STATE_HOME/reconciler/<cluster>/status.json`` (``~/.local/state`` when
XDG_STATE_HOME is unset), or ``<state dir>/<cluster>/status.json`` with ``--state-dir``.
Written atomically: a temporary file of its own (unique, in the same directory), flushed to
disk, then renamed over the old one, so neither a crash mid-write nor a second writer leaves a
torn status. A status file that cannot be read as a ReconcileStatus (torn by a crash before
this, edited by hand) is a warning and treated as absent: the next round writes a new one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import tempfile
from pathlib import Path

from pydantic import ValidationError

from reconciler.errors import TerminalError
from reconciler.model.status import ReconcileStatus, status_json

__all__ = ["FILE_NAME", "FileStatusStore", "default_state_dir", "status_json"]

log = logging.getLogger(__name__)

FILE_NAME = "status.json"
_WRITE_HINTS = {
    errno.EROFS: "the file system is read-only; give a writable --state-dir",
    errno.EACCES: "give the reconciler's user write access to it, or a writable --state-dir",
    errno.EPERM: "give the reconciler's user write access to it, or a writable --state-dir",
    errno.ENOSPC: "free space on that file system, or give another --state-dir",
    errno.EDQUOT: "the disk quota is used up; free space or give another --state-dir",
}


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/reconciler``, else ``~/.local/state/reconciler``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "reconciler"


class FileStatusStore:
    """A StatusStore in ``<state_dir>/<cluster>/status.json``."""

    def __init__(self, cluster: str, state_dir: Path | None = None) -> None:
        self.path = (state_dir or default_state_dir()) / cluster / FILE_NAME

    def load(self) -> ReconcileStatus | None:
        """The saved status; None when there is none or it cannot be read as one (a warning)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as err:
            raise TerminalError(
                f"cannot read status {self.path}: {err.strerror}",
                hint="give the reconciler's user read access to its state directory",
            ) from err
        except UnicodeDecodeError:
            problem = "not UTF-8 text"
        else:
            try:
                return ReconcileStatus.model_validate(json.loads(text))
            except json.JSONDecodeError as err:
                problem = f"not JSON ({err.msg} at line {err.lineno})"
            except ValidationError as err:
                problem = f"not a ReconcileStatus ({err.error_count()} problem(s))"
        log.warning(
            "status file %s is %s; treated as absent: the next round writes a new one "
            "(imbalance streaks restart)",
            self.path,
            problem,
        )
        return None

    def save(self, status: ReconcileStatus) -> None:
        folder = self.path.parent
        tmp: str | None = None
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{FILE_NAME}.", suffix=".tmp", dir=folder)
            with os.fdopen(fd, "wb") as handle:
                handle.write(status_json(status).encode())
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
            tmp = None
            _sync_directory(folder)
        except OSError as err:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise TerminalError(
                f"cannot write the status in {folder}: {err.strerror or err}",
                hint=_WRITE_HINTS.get(
                    err.errno or 0, "check that the state directory exists and is writable"
                ),
            ) from err


def _sync_directory(folder: Path) -> None:
    """Flush the rename to disk, where the file system allows it."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
