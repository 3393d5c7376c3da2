"""Text files the reconciler edits in place: placement.yaml and cluster.yaml of a folder.

Replaced atomically: a temporary file in the same folder, fsynced, renamed over the original,
its mode kept. The edits themselves are pure text functions (``reconciler.config.yaml_edit``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from reconciler.errors import ConfigError


def rewrite_file(path: Path, edit: Callable[[str], str]) -> bool:
    """Apply ``edit`` to the text of ``path`` and replace it atomically; True if it changed."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror}") from None
    new = edit(text)
    if new == text:
        return False
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(new)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


class TextFile:
    """The ``TextFile`` port over one file of a folder."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def describe(self) -> str:
        return str(self.path)

    def read(self) -> str | None:
        """The text, None when the file does not exist."""
        if not self.path.is_file():
            return None
        try:
            return self.path.read_text(encoding="utf-8")
        except OSError as err:
            raise ConfigError(f"cannot read {self.path}: {err.strerror}") from err

    def replace(self, edit: Callable[[str], str]) -> bool:
        """Apply ``edit`` to the text and replace the file atomically; True if it changed."""
        return rewrite_file(self.path, edit)

    def modified_at(self) -> datetime | None:
        """When the file was last written (every edit replaces it), None when it does not exist."""
        try:
            return datetime.fromtimestamp(self.path.stat().st_mtime, tz=UTC)
        except FileNotFoundError:
            return None
