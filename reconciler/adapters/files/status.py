"""The ReconcileStatus of one cluster in a JSON file that survives restarts.

Default place: ``$XDG_STATE_HOME/reconciler/<cluster>/status.json`` (``~/.local/state`` when
XDG_STATE_HOME is unset), or ``<state dir>/<cluster>/status.json`` with ``--state-dir``.
One ``json_store.JsonStore``: written atomically, so neither a crash mid-write nor a second
writer leaves a torn status; a status file that cannot be read as a ReconcileStatus (torn by a
crash before this, edited by hand) is a warning and treated as absent: the next round writes a
new one.
"""

from __future__ import annotations

import os
from pathlib import Path

from reconciler.adapters.files.json_store import model_store
from reconciler.model.status import ReconcileStatus, status_json

__all__ = ["FILE_NAME", "FileStatusStore", "default_state_dir", "status_json"]

FILE_NAME = "status.json"


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/reconciler``, else ``~/.local/state/reconciler``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "reconciler"


class FileStatusStore:
    """A StatusStore in ``<state_dir>/<cluster>/status.json``."""

    def __init__(self, cluster: str, state_dir: Path | None = None) -> None:
        self.path = (state_dir or default_state_dir()) / cluster / FILE_NAME
        self._file = model_store(
            self.path,
            ReconcileStatus,
            what="status",
            dump=status_json,
            mode=0o644,
            if_unreadable="the next round writes a new one (imbalance streaks restart)",
        )

    def load(self) -> ReconcileStatus | None:
        """The saved status; None when there is none or it cannot be read as one (a warning)."""
        return self._file.load()

    def save(self, status: ReconcileStatus) -> None:
        self._file.save(status)
