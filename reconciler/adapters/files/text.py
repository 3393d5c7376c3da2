"""Text files the reconciler edits in place: placement.yaml and cluster.yaml of a folder.

Replaced atomically (``atomic.write_atomically``), their mode kept; a file that cannot be read
is a ConfigError, one that cannot be written a TerminalError (never a bare OSError). The edits
themselves are pure text functions (``reconciler.config.yaml_edit``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from reconciler.adapters.files.atomic import write_atomically
from reconciler.errors import ConfigError, TerminalError


def rewrite_file(path: Path, edit: Callable[[str], str]) -> bool:
    """Apply ``edit`` to the text of ``path`` and replace it atomically; True if it changed.

    ConfigError when it cannot be read, TerminalError when it cannot be written (the file is
    then as it was)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror}") from None
    new = edit(text)
    if new == text:
        return False
    try:
        write_atomically(path, new.encode("utf-8"), mode=path.stat().st_mode & 0o7777)
    except OSError as err:
        raise TerminalError(
            f"cannot write {path}: {err.strerror or err}",
            hint="give the reconciler's user write access to the cluster folder, "
            "on a file system with free space",
        ) from err
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
