"""A rollout's per-host command for the tests of edits merged while a rollout runs.

``rollout_edit_command.py MARKS STEP HOST EDIT`` appends ``HOST STEP start`` to MARKS; then, if
the JSON file EDIT exists and names HOST, it takes the file (renamed, so the edit is made once),
clones the state repository it names, replaces ``old`` by ``new`` in ``path``, commits and
pushes as a person would; then appends ``HOST STEP end``. The marks are the commands' own word
on what ran, and in which order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PERSON = ["-c", "user.name=Ada Person", "-c", "user.email=ada@example.net"]


def mark(marks: Path, line: str) -> None:
    with marks.open("a") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *PERSON, *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def edit(spec: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        git(Path(tmp), "clone", "--quiet", "--branch", "main", spec["url"], str(clone))
        path = clone / spec["path"]
        text = path.read_text()
        assert spec["old"] in text, f"{spec['old']!r} is not in {path}"
        path.write_text(text.replace(spec["old"], spec["new"]))
        git(clone, "commit", "--quiet", "-am", spec["message"])
        git(clone, "push", "--quiet", "origin", "main")


def main() -> int:
    marks, step, host, edit_file = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
    mark(marks, f"{host} {step} start")
    taken = edit_file.with_suffix(".taken")
    try:
        spec = json.loads(edit_file.read_text())
    except OSError:
        spec = None
    if spec is not None and spec["host"] == host:
        edit_file.rename(taken)
        edit(spec)
    mark(marks, f"{host} {step} end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
