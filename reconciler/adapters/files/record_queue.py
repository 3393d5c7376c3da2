"""A cluster's audit records not yet written, in ``<state dir>/<cluster>/pending-records.json``.

A round that acted writes its record to the state repository before it lets the cluster go.
When that cannot be done (the remote does not answer, the branch kept moving through every
attempt), the record stays here, oldest first, and every later round that holds the cluster
writes the queue before its own record: a move is never missing from git because its commit
failed once. The record is put here before its first attempt (a reconciler killed during the
attempt still has it) and taken out once it is on the branch.

The file is written atomically (``atomic.write_atomically``), readable by its owner only (a
recovery's record holds VM definitions). One that cannot be read as a queue (torn, edited) is
never overwritten: it is renamed to ``pending-records.json.unreadable`` for a person to look
at, with a warning, and a new queue starts.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pydantic import ValidationError

from reconciler.adapters.files.atomic import write_atomically, write_hint
from reconciler.adapters.files.status import default_state_dir
from reconciler.errors import TerminalError
from reconciler.model.acting import PendingRecords, QueuedRecord

FILE_NAME = "pending-records.json"

log = logging.getLogger(__name__)


class FileRecordQueue:
    """A ``RecordQueue`` in ``<state_dir>/<cluster>/pending-records.json``."""

    def __init__(self, cluster: str, state_dir: Path | None = None) -> None:
        self.path = (state_dir or default_state_dir()) / cluster / FILE_NAME

    def describe(self) -> str:
        return str(self.path)

    def load(self) -> list[QueuedRecord]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as err:
            raise TerminalError(
                f"cannot read the queued records {self.path}: {err.strerror or err}",
                hint="give the reconciler's user read access to its state directory",
            ) from err
        except UnicodeDecodeError:
            return self._set_aside("not UTF-8 text")
        try:
            return PendingRecords.model_validate(json.loads(text)).records
        except json.JSONDecodeError as err:
            return self._set_aside(f"not JSON ({err.msg} at line {err.lineno})")
        except ValidationError as err:
            return self._set_aside(f"not a queue of records ({err.error_count()} problem(s))")

    def _set_aside(self, problem: str) -> list[QueuedRecord]:
        aside = self.path.with_name(FILE_NAME + ".unreadable")
        try:
            self.path.replace(aside)
        except OSError as err:
            raise TerminalError(
                f"the queued records {self.path} are {problem} and cannot be moved aside: "
                f"{err.strerror or err}",
                hint=f"move the file away and read what it holds; {write_hint(err)}",
            ) from err
        log.warning(
            "queued records %s are %s: moved to %s for a person to read; a new queue starts",
            self.path,
            problem,
            aside,
        )
        return []

    def save(self, records: list[QueuedRecord]) -> None:
        if not records:
            try:
                self.path.unlink(missing_ok=True)
            except OSError as err:
                raise TerminalError(
                    f"cannot remove the queued records {self.path}: {err.strerror or err}",
                    hint=write_hint(err),
                ) from err
            return
        data = PendingRecords(records=records).model_dump_json(indent=2, by_alias=True) + "\n"
        try:
            write_atomically(self.path, data.encode("utf-8"), mode=0o600, make_parents=True)
        except OSError as err:
            raise TerminalError(
                f"cannot keep the queued records in {self.path.parent}: {err.strerror or err}",
                hint=write_hint(err),
            ) from err
