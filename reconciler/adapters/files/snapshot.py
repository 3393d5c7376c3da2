"""Snapshots as JSON files, so ``plan --snapshot FILE`` can run without reaching any host.

The file is the ``Snapshot`` model by alias in JSON mode, as ``observe --format json`` prints.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from reconciler.errors import SnapshotError
from reconciler.model.base import API_VERSION
from reconciler.model.snapshot import Snapshot

MAX_BYTES = 256 * 1024**2
"""Larger files are refused rather than read into memory."""


def snapshot_json(snapshot: Snapshot) -> str:
    """The snapshot as indented JSON text ending with a newline."""
    return snapshot.model_dump_json(by_alias=True, indent=2) + "\n"


def save_snapshot(snapshot: Snapshot, path: Path) -> None:
    """Write ``snapshot`` to ``path`` (replacing it atomically)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(snapshot_json(snapshot))
        tmp.replace(path)
    except OSError as err:
        raise SnapshotError(f"cannot write snapshot {path}: {err.strerror or err}") from err


def load_snapshot(path: Path) -> Snapshot:
    """The snapshot saved in ``path``; ``SnapshotError`` says why a file cannot be used."""
    hint = "write one with `reconciler observe --format json > FILE`"
    try:
        if path.stat().st_size > MAX_BYTES:
            raise SnapshotError(f"{path} is larger than {MAX_BYTES} bytes", hint=hint)
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SnapshotError(
            f"cannot read snapshot {path}: {err.strerror or err}", hint=hint
        ) from err
    except UnicodeDecodeError as err:
        raise SnapshotError(f"{path} is not UTF-8 text: {err}", hint=hint) from err
    try:  # one pass in the common case: pydantic parses and validates the JSON text at once
        return Snapshot.model_validate_json(text)
    except ValidationError as err:
        first_error = err
    # Not a valid snapshot: read it as plain JSON to say precisely why.
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise SnapshotError(
            f"{path} is not JSON: {err.msg} at line {err.lineno} column {err.colno}", hint=hint
        ) from err
    if not isinstance(data, dict):
        raise SnapshotError(f"{path} is not a snapshot (a JSON object)", hint=hint)
    if "schemaVersion" in data:
        old = data.get("schemaVersion")
        raise SnapshotError(
            f"{path} is a snapshot in an older format (schemaVersion {old!r}, snake_case "
            f"fields); this reconciler reads apiVersion {API_VERSION}, kind Snapshot",
            hint="observe again: reconciler observe --format json > FILE",
        )
    if data.get("kind") != "Snapshot" or data.get("apiVersion") != API_VERSION:
        raise SnapshotError(
            f"{path} is not a snapshot: expected apiVersion {API_VERSION} and kind Snapshot, "
            f"found apiVersion {data.get('apiVersion')!r} and kind {data.get('kind')!r}",
            hint=hint,
        )
    first = first_error.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    raise SnapshotError(
        f"{path} is not a valid snapshot: {where}: {first['msg']} "
        f"({first_error.error_count()} problem(s))",
        hint=hint,
    ) from first_error
