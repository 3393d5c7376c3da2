"""The ReconcileStatus of one cluster in a JSON file that survives restarts.

Default place: ``$XDG_STATE_HOME/reconciler/<cluster>/status.json`` (``~/.local/state`` when
XDG_STATE_HOME is unset), or ``<state dir>/<cluster>/status.json`` with ``--state-dir``.
Written atomically (a temporary file renamed over the old one), so a crash mid-write leaves
the previous status.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ValidationError

from reconciler.errors import ConfigError, TerminalError
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

    def load(self) -> ReconcileStatus | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as err:
            raise TerminalError(f"cannot read status {self.path}: {err.strerror}") from err
        try:
            return ReconcileStatus.model_validate(json.loads(text))
        except (json.JSONDecodeError, ValidationError) as err:
            raise ConfigError(
                f"status file {self.path} is not a ReconcileStatus: {err}",
                hint="remove it; the next round starts a new status (imbalance streaks restart)",
            ) from err

    def save(self, status: ReconcileStatus) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(status_json(status), encoding="utf-8")
            tmp.replace(self.path)
        except OSError as err:
            raise TerminalError(f"cannot write status {self.path}: {err.strerror}") from err
