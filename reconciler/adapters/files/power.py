"""What power saving keeps of one cluster in ``<state dir>/<cluster>/power.json``.

The hosts the reconciler powered off (standby), the boots it asked for, the hosts it is
emptying, the power intents written before each action and what failed. One
``json_store.JsonStore``: written atomically (a temporary file of its own, flushed, renamed
over the old one), so neither a crash mid-write nor a second writer leaves a torn book. No
credential is ever in it (they stay in the reconciler's environment). A file that cannot be
read as a PowerBook (torn by a crash before this, edited by hand) is a warning naming it and
is read as absent.
"""

from __future__ import annotations

from pathlib import Path

from reconciler.adapters.files.json_store import model_store
from reconciler.adapters.files.status import default_state_dir
from reconciler.model.power import PowerBook

FILE_NAME = "power.json"


def _dump(book: PowerBook) -> str:
    return book.model_dump_json(indent=2, by_alias=True)


class FilePowerStore:
    """A PowerStore in ``<state_dir>/<cluster>/power.json``."""

    def __init__(self, cluster: str, state_dir: Path | None = None) -> None:
        self.path = (state_dir or default_state_dir()) / cluster / FILE_NAME
        self._file = model_store(
            self.path,
            PowerBook,
            what="power book",
            dump=_dump,
            mode=0o640,
            if_unreadable="the reconciler no longer knows which hosts it powered off; they "
            "stay off until a person or a power-on brings them back (observe shows them)",
        )

    def load(self) -> PowerBook | None:
        """The book saved last; None before the first or when it cannot be read as one."""
        return self._file.load()

    def save(self, book: PowerBook) -> None:
        """Replace the book, atomically."""
        self._file.save(book)
