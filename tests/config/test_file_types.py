"""A kind's file that is not a regular file with documents (a FIFO, a directory, an empty
file) is an error or a warning, never silently "no rules"; a FIFO is never opened."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.config import format_finding, load_desired, validate_folder, validate_paths
from reconciler.config.findings import Severity
from reconciler.errors import ValidationFailed
from tests.config.clusters import cluster_yaml, policy_yaml, write_folder

KIND_FILES = ["rules.yaml", "policy.yaml", "placement.yaml", "cluster.yaml"]


def _folder(tmp_path: Path) -> Path:
    return write_folder(
        tmp_path, {"cluster.yaml": cluster_yaml(), "policy.yaml": policy_yaml("batch: 2")}
    )


@pytest.mark.parametrize("name", KIND_FILES)
def test_a_fifo_named_like_a_kind_file_is_an_error_and_is_never_opened(
    tmp_path: Path, name: str
) -> None:
    folder = _folder(tmp_path)
    (folder / name).unlink(missing_ok=True)
    os.mkfifo(folder / name)
    # in a child process with a deadline: opening a FIFO with no writer blocks for ever
    code = (
        "import sys; from pathlib import Path; from reconciler.config import validate_folder, "
        "format_finding; r, _ = validate_folder(Path(sys.argv[1])); "
        "print('\\n'.join(format_finding(f) for f in r.findings))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(folder)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"{folder / name}:1:1: error: a FIFO (named pipe), not a regular file" in done.stdout


@pytest.mark.parametrize("name", KIND_FILES)
def test_a_directory_named_like_a_kind_file_is_an_error(tmp_path: Path, name: str) -> None:
    folder = _folder(tmp_path)
    (folder / name).unlink(missing_ok=True)
    (folder / name).mkdir()
    report, desired = validate_folder(folder)
    assert desired is None
    errors = [f for f in report.findings if f.severity is Severity.ERROR]
    assert [f.file for f in errors] == [str(folder / name)], report.findings
    assert "a directory, not a regular file" in errors[0].message


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("rules.yaml", "no PlacementRules: the cluster has no rules"),
        ("policy.yaml", "no BalancePolicy: the defaults apply"),
        ("placement.yaml", "no Placement: no VM has a desired host"),
        ("extra.yaml", "the file holds no documents"),
    ],
)
@pytest.mark.parametrize("content", ["", "\n\n", "# only a comment\n", "---\n"])
def test_an_empty_kind_file_is_a_warning_that_says_what_is_missing(
    tmp_path: Path, name: str, says: str, content: str
) -> None:
    folder = _folder(tmp_path)
    (folder / name).write_text(content)
    report, desired = validate_folder(folder)
    assert desired is not None, "a warning: the folder is still valid"
    (finding,) = (f for f in report.findings if f.file == str(folder / name))
    assert finding.severity is Severity.WARNING
    assert finding.line == 1
    assert says in finding.message
    assert finding.hint


def test_an_empty_cluster_file_is_an_error(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    (folder / "cluster.yaml").write_text("")
    with pytest.raises(ValidationFailed) as caught:
        load_desired(folder)
    assert "no Cluster document" in str(caught.value)
    assert f"{folder / 'cluster.yaml'}:1:1: warning: " in "\n".join(
        format_finding(f) for f in validate_folder(folder)[0].findings
    )


def test_a_fifo_given_as_a_path_is_an_error(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    os.mkfifo(folder / "rules.yaml")
    (report,) = validate_paths([folder / "rules.yaml"])
    assert [f.message for f in report.findings] == ["a FIFO (named pipe), not a regular file"]
