"""Where a cluster's rollout records live is chosen in one place (``cli/desired.py``), from the
desired state's source, for ``run`` that writes them and ``rollout status`` that reads them:
the state directory for a folder, the recording branch of the state repository (a bare remote
over file:// here) for ``--repo``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from reconciler.adapters.files.rollout_progress import FileRolloutProgress
from reconciler.cli.desired import open_source, rollout_records
from reconciler.cli.requests import FolderRequest, RepoRequest
from reconciler.engine.rollout_audit import RepoRolloutRecords
from reconciler.model.rollout_progress import StepOutcome, StepRecord
from tests.gitrepos import ROOT, git, state_remote

RECORD = StepRecord(
    host="kvm-02",
    step="drain",
    outcome=StepOutcome.STARTED,
    at=datetime(2026, 12, 1, 22, 0, tzinfo=UTC),
    by="run@a",
)


def test_with_a_folder_the_records_are_in_the_state_directory(tmp_path: Path) -> None:
    source = open_source(FolderRequest(ROOT / "cluster-state"))
    written = rollout_records(source, "lab", tmp_path)
    assert isinstance(written, FileRolloutProgress)
    written.append(written.load("kernel"), RECORD)
    assert (tmp_path / "lab" / "rollouts" / "kernel.json").is_file()
    assert rollout_records(source, "lab", tmp_path).load("kernel").records == [RECORD]


def test_with_the_state_repository_the_records_are_on_its_recording_branch(
    tmp_path: Path,
) -> None:
    url, person = state_remote(tmp_path)
    for audit, branch in ((None, "main"), ("audit", "audit")):
        request = RepoRequest(
            url=url, cache_dir=tmp_path / "cache", actor="run@a", audit_branch=audit
        )
        chosen = rollout_records(open_source(request), "lab", tmp_path / "state")
        assert isinstance(chosen, RepoRolloutRecords)
        assert (chosen.branch, chosen.folder, chosen.actor) == (branch, "cluster-state", "run@a")
    request = RepoRequest(url=url, cache_dir=tmp_path / "cache", actor="run@a")
    written = rollout_records(open_source(request), "lab", tmp_path / "state")
    written.append(written.load("kernel"), RECORD)
    git(person, "pull", "--quiet", "origin", "main")
    assert (person / "cluster-state" / "rollouts" / "kernel.progress.json").is_file()
    assert not (tmp_path / "state").exists()
    read = rollout_records(open_source(request), "lab", None)
    assert read.load("kernel").records == [RECORD]


def test_no_other_command_chooses_where_rollout_records_live() -> None:
    for path in sorted((ROOT / "reconciler" / "cli").glob("*.py")):
        if path.name == "desired.py":
            continue
        text = path.read_text()
        for store in ("RepoRolloutRecords", "FileRolloutProgress"):
            assert store not in text, f"{path.name} builds {store}: use rollout_records"
