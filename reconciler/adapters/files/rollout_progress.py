"""The records of a rollout in a JSON file of the state directory, and where its logs go.

``<state dir>/<cluster>/rollouts/<name>.json`` holds the ``RolloutProgress``; the output of
its commands is kept beside it in ``<state dir>/<cluster>/rollouts/<name>/``. Written
atomically. Unlike a status file, records that cannot be read are an error, never taken for
absent: a rollout that forgot its records would take its hosts out again.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from reconciler.adapters.files.atomic import write_atomically, write_hint
from reconciler.adapters.files.status import default_state_dir
from reconciler.errors import TerminalError
from reconciler.model.rollout_progress import RolloutProgress, StepRecord


def progress_from_text(text: str, where: str) -> RolloutProgress:
    """The records in ``text`` (read from ``where``); TerminalError when they are not."""
    try:
        return RolloutProgress.model_validate(json.loads(text))
    except json.JSONDecodeError as err:
        problem = f"not JSON ({err.msg} at line {err.lineno})"
    except ValidationError as err:
        problem = f"not a RolloutProgress ({err.error_count()} problem(s))"
    raise TerminalError(
        f"the rollout records {where} are {problem}",
        hint="restore the file from a backup or from git; a rollout never starts over from "
        "records it cannot read",
    )


def progress_text(progress: RolloutProgress) -> str:
    return progress.model_dump_json(by_alias=True, indent=2) + "\n"


class FileRolloutProgress:
    """The records of the rollouts of one cluster in its state directory."""

    def __init__(self, cluster: str, state_dir: Path | None = None) -> None:
        self.cluster = cluster
        self.folder = (state_dir or default_state_dir()) / cluster / "rollouts"

    def path(self, rollout: str) -> Path:
        return self.folder / f"{rollout}.json"

    def logs(self, rollout: str) -> Path:
        """The folder that keeps the output of the rollout's commands."""
        return self.folder / rollout

    def load(self, rollout: str) -> RolloutProgress:
        """The records of ``rollout``; none yet when it has no file."""
        path = self.path(rollout)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return RolloutProgress(cluster=self.cluster, rollout=rollout)
        except (OSError, UnicodeDecodeError) as err:
            raise TerminalError(
                f"cannot read the rollout records {path}: {getattr(err, 'strerror', None) or err}",
                hint="give the reconciler's user read access to its state directory",
            ) from err
        return progress_from_text(text, str(path))

    def save(self, progress: RolloutProgress) -> None:
        path = self.path(progress.rollout)
        try:
            write_atomically(path, progress_text(progress).encode(), mode=0o644, make_parents=True)
        except OSError as err:
            raise TerminalError(
                f"cannot write the rollout records in {path.parent}: {err.strerror or err}",
                hint=write_hint(err),
            ) from err

    def append(
        self, progress: RolloutProgress, record: StepRecord, *, output: str = ""
    ) -> RolloutProgress:
        """``RolloutRecords.append``: the output is in the command's log already."""
        stored = self.load(progress.rollout)
        if stored != progress:
            raise TerminalError(
                f"the rollout records {self.path(progress.rollout)} changed meanwhile "
                f"({len(stored.records)} records there, {len(progress.records)} read): "
                "another process acts on the rollout",
                hint="only the process holding the cluster writes them",
            )
        new = progress.add(record)
        self.save(new)
        return new


__all__ = ["FileRolloutProgress", "progress_from_text", "progress_text"]
