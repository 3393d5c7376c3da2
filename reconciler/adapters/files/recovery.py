"""The recovery state of one cluster in ``<state dir>/<cluster>/recovery.json``.

The definitions of the VMs last seen, the hosts being recovered and the restart intents.
One ``json_store.JsonStore``, readable by its owner only (the definitions may hold secrets),
written before and after every restart, so a reconciler killed mid-recovery finds its intents.
"""

from __future__ import annotations

from pathlib import Path

from reconciler.adapters.files.json_store import model_store
from reconciler.adapters.files.status import default_state_dir
from reconciler.model.recovery import RecoveryState

FILE_NAME = "recovery.json"


def _dump(state: RecoveryState) -> str:
    return state.model_dump_json(indent=2, by_alias=True)


class FileRecoveryStore:
    """A RecoveryStore in ``<state_dir>/<cluster>/recovery.json``."""

    def __init__(self, cluster: str, state_dir: Path | None = None) -> None:
        self.path = (state_dir or default_state_dir()) / cluster / FILE_NAME
        self._file = model_store(
            self.path,
            RecoveryState,
            what="recovery state",
            dump=_dump,
            # owner only: the domain XML in it may hold secrets (console passwords)
            mode=0o600,
            if_unreadable="recovery starts afresh (definitions are remembered again as the "
            "hosts are observed)",
        )

    def load(self) -> RecoveryState | None:
        return self._file.load()

    def save(self, state: RecoveryState) -> None:
        self._file.save(state)
