"""The CPU samples ``run`` keeps, in ``<state dir>/<cluster>/load-samples.json``.

Replaced atomically at every sample (``atomic.write_atomically``), so a restart of ``run``,
or a crash mid-write, keeps the window; ``plan``, ``apply`` and ``impact`` read the same file.
A file that cannot be read as samples (torn before this, edited by hand) is a warning and
treated as absent: the window starts again.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pydantic import ValidationError

from reconciler.adapters.files.atomic import write_atomically, write_hint
from reconciler.adapters.files.status import default_state_dir
from reconciler.errors import TerminalError
from reconciler.model.load import LoadSamples

log = logging.getLogger(__name__)

FILE_NAME = "load-samples.json"


class FileLoadSamples:
    """The samples of one cluster in its state directory."""

    def __init__(self, cluster: str, state_dir: Path | None = None) -> None:
        self.path = (state_dir or default_state_dir()) / cluster / FILE_NAME

    def load(self) -> LoadSamples | None:
        """The samples kept; None when there are none or they cannot be read (a warning)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as err:
            raise TerminalError(
                f"cannot read the load samples {self.path}: {err.strerror or err}",
                hint="give the reconciler's user read access to its state directory",
            ) from err
        except UnicodeDecodeError:
            problem = "not UTF-8 text"
        else:
            try:
                return LoadSamples.model_validate(json.loads(text))
            except json.JSONDecodeError as err:
                problem = f"not JSON ({err.msg} at line {err.lineno})"
            except ValidationError as err:
                problem = f"not load samples ({err.error_count()} problem(s))"
        log.warning(
            "load samples file %s is %s; treated as absent: the window starts again",
            self.path,
            problem,
        )
        return None

    def save(self, samples: LoadSamples) -> None:
        """Replace the file, atomically; its folder is made when missing."""
        data = samples.model_dump_json(by_alias=True).encode("utf-8")
        try:
            write_atomically(self.path, data, mode=0o644, make_parents=True)
        except OSError as err:
            raise TerminalError(
                f"cannot write the load samples in {self.path.parent}: {err.strerror or err}",
                hint=write_hint(err),
            ) from err
