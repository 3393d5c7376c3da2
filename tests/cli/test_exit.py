"""The ``reconciler`` command ends its process without tearing the interpreter down
(``main_then_exit``): what it wrote must still all be out, and its exit code kept."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

from reconciler.cli import main
from tests.cli.test_imports import EXAMPLE, ROOT, example_snapshot


def command(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


def test_a_piped_plan_is_written_whole_with_the_code_main_returns(tmp_path: Path) -> None:
    snapshot = example_snapshot(tmp_path)
    args = [str(a) for a in ("plan", EXAMPLE, "--snapshot", snapshot, "--format", "json")]
    args += ["--state-dir", str(tmp_path / "state")]
    done = command(*args)
    with redirect_stdout(io.StringIO()) as out:
        code = main(args)
    # a pipe is block-buffered: without the flush before the exit the JSON would be cut off
    written, returned = json.loads(done.stdout), json.loads(out.getvalue())
    assert written.pop("createdAt")
    assert returned.pop("createdAt")
    assert written == returned
    assert done.returncode == code
    assert code in (0, 2)


def test_a_usage_error_keeps_its_code_and_message() -> None:
    done = command("validate", "--no-such-flag")
    assert done.returncode == 2
    assert "--no-such-flag" in done.stderr
