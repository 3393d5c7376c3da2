"""The recovery state of one cluster in ``<state dir>/<cluster>/recovery.json``.

The definitions of the VMs last seen, the hosts being recovered and the restart intents.
Written atomically (``atomic.write_atomically``), readable by its owner only (the definitions
may hold secrets), before and after every restart, so a reconciler killed mid-recovery finds
its intents.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pydantic import ValidationError

from reconciler.adapters.files.atomic import write_atomically, write_hint
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
        data = state.model_dump_json(indent=2, by_alias=True).encode()
        try:
            # owner only: the domain XML in it may hold secrets (console passwords)
            write_atomically(self.path, data, mode=0o600, make_parents=True)
        except OSError as err:
            raise TerminalError(
                f"cannot write the recovery state in {self.path.parent}: {err.strerror or err}",
                hint=write_hint(err),
            ) from err
