"""The recovery state of one cluster in ``<state dir>/<cluster>/recovery.json``.

The definitions of the VMs last seen, the hosts being recovered and the restart intents.
Written atomically (a temporary file, flushed, renamed over the old one) before and after
every restart, so a reconciler killed mid-recovery finds its intents.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path

from pydantic import ValidationError

from reconciler.adapters.files.status import default_state_dir
from reconciler.errors import TerminalError
from reconciler.model.recovery import RecoveryState

FILE_NAME = "recovery.json"
log = logging.getLogger(__name__)


class FileRecoveryStore:
    def __init__(self, cluster: str, state_dir: Path | None = None) -> None:
        self.path = (state_dir or default_state_dir()) / cluster / FILE_NAME

    def load(self) -> RecoveryState | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as err:
            raise TerminalError(f"cannot read {self.path}: {err.strerror}") from err
        try:
            return RecoveryState.model_validate(json.loads(text))
        except (json.JSONDecodeError, ValidationError, UnicodeDecodeError) as err:
            log.warning("recovery state %s is unreadable (%s); starting afresh", self.path, err)
            return None

    def save(self, state: RecoveryState) -> None:
        folder = self.path.parent
        tmp: str | None = None
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{FILE_NAME}.", suffix=".tmp", dir=folder)
            with os.fdopen(fd, "wb") as handle:
                handle.write(state.model_dump_json(indent=2, by_alias=True).encode())
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
            tmp = None
        except OSError as err:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise TerminalError(
                f"cannot write the recovery state in {folder}: {err.strerror or err}"
            ) from err
