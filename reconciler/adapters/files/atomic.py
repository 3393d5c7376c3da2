"""One way to replace a file so that a crash or a second writer never leaves it torn.

A temporary file of its own (unique, in the same directory), written and flushed to disk, given
its mode, renamed over the old one, and the rename flushed to disk with the directory. Used for
every file the reconciler keeps in its state directory and for the cluster files it edits.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

WRITE_HINTS = {
    errno.EROFS: "the file system is read-only; give a writable --state-dir",
    errno.EACCES: "give the reconciler's user write access to it, or a writable --state-dir",
    errno.EPERM: "give the reconciler's user write access to it, or a writable --state-dir",
    errno.ENOSPC: "free space on that file system, or give another --state-dir",
    errno.EDQUOT: "the disk quota is used up; free space or give another --state-dir",
}


def write_hint(err: OSError) -> str:
    """How to fix a failed write into the state directory."""
    return WRITE_HINTS.get(err.errno or 0, "check that the state directory exists and is writable")


def write_atomically(path: Path, data: bytes, *, mode: int, make_parents: bool = False) -> None:
    """Replace ``path`` with ``data`` (file mode ``mode``) in one rename; OSError on failure,
    with the old file untouched and no temporary file left."""
    folder = path.parent
    if make_parents:
        folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _sync_directory(folder)


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
