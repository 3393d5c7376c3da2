"""One JSON document kept in a file of the state directory: read whole, replaced atomically.

The status of a cluster (``status.json``), its recovery state (``recovery.json``) and the
ledger of leftover volumes (``leftover-volumes.json``) are each one ``JsonStore``:

- written through ``atomic.write_atomically`` (a temporary file of its own, written and flushed
  to disk, given its mode, renamed over the old one, the rename flushed with the directory), so
  neither a crash mid-write nor a second writer leaves a torn file;
- a file that is absent is ``None``; one that cannot be read as its document (torn by a crash
  before this, edited by hand) is a warning naming the file and what is wrong with it, and is
  treated as absent: the next save replaces it;
- a file that cannot be read at all, or written, is a ``TerminalError`` naming the file or its
  folder, with how to fix it (``atomic.write_hint``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from reconciler.adapters.files.atomic import write_atomically, write_hint
from reconciler.errors import TerminalError

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


class JsonStore(Generic[T]):
    """``path`` holding one ``T``: ``parse`` reads it from decoded JSON (raising ValueError,
    TypeError or pydantic's ValidationError when it is not one), ``dump`` writes it as text.

    ``what`` names the document in messages ("status", "recovery state"); ``if_unreadable``
    says what follows when the file is not one ("the next round writes a new one").
    """

    def __init__(
        self,
        path: Path,
        *,
        what: str,
        parse: Callable[[Any], T],
        dump: Callable[[T], str],
        mode: int,
        if_unreadable: str,
    ) -> None:
        self.path = path
        self.what = what
        self.mode = mode
        self._parse = parse
        self._dump = dump
        self._if_unreadable = if_unreadable

    def load(self) -> T | None:
        """The document; None when the file is absent or is not one (a warning)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except UnicodeDecodeError:
            problem = "not UTF-8 text"
        except OSError as err:
            raise TerminalError(
                f"cannot read the {self.what} {self.path}: {err.strerror or err}",
                hint="give the reconciler's user read access to its state directory",
            ) from err
        else:
            try:
                return self._parse(json.loads(text))
            except json.JSONDecodeError as err:
                problem = f"not JSON ({err.msg} at line {err.lineno})"
            except ValidationError as err:
                problem = f"not a {self.what} ({err.error_count()} problem(s))"
            except (ValueError, TypeError, KeyError) as err:
                problem = f"not a {self.what} ({err})"
        import logging  # only for a damaged file: off the start-up path of every command

        logging.getLogger(__name__).warning(
            "%s file %s is %s; treated as absent: %s",
            self.what,
            self.path,
            problem,
            self._if_unreadable,
        )
        return None

    def save(self, value: T) -> None:
        """Replace the file with ``value``, atomically, its folder made when missing."""
        data = self._dump(value).encode("utf-8")
        try:
            write_atomically(self.path, data, mode=self.mode, make_parents=True)
        except OSError as err:
            raise TerminalError(
                f"cannot write the {self.what} in {self.path.parent}: {err.strerror or err}",
                hint=write_hint(err),
            ) from err


def model_store(
    path: Path,
    model: type[M],
    *,
    what: str,
    dump: Callable[[M], str],
    mode: int,
    if_unreadable: str,
) -> JsonStore[M]:
    """A ``JsonStore`` of one pydantic ``model``."""
    return JsonStore(
        path,
        what=what,
        parse=model.model_validate,
        dump=dump,
        mode=mode,
        if_unreadable=if_unreadable,
    )
