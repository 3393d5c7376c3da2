"""A rollout's records as commits in a real state repository (a bare remote over file://):
what git itself shows (trailers, files, messages), a person's commit in between, another
instance's records, records git cannot read."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.adapters.git.repo import GitStateRepo
from reconciler.engine.rollout_audit import RepoRolloutRecords, step_message
from reconciler.errors import TerminalError
from reconciler.model.rollout_progress import RolloutProgress, StepOutcome, StepRecord
from tests.gitrepos import git, state_remote

T = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)


def rec(step: str, outcome: str, detail: str = "", log: str | None = None) -> StepRecord:
    return StepRecord(
        host="kvm-02",
        step=step,
        outcome=StepOutcome(outcome),
        at=T,
        by="run@a",
        detail=detail,
        log=log,
    )


def records(tmp_path: Path) -> tuple[RepoRolloutRecords, Path, GitStateRepo]:
    url, person = state_remote(tmp_path)
    repo = GitStateRepo(url, cache_dir=tmp_path / "cache")
    store = RepoRolloutRecords(
        repo, branch="main", folder="cluster-state", cluster="lab", actor="run@a"
    )
    return store, person, repo


def test_each_record_is_a_commit_with_trailers_git_reads(tmp_path: Path) -> None:
    store, person, _ = records(tmp_path)
    empty = store.load("kernel-2026-12")
    assert empty.records == []
    one = store.append(empty, rec("command/upgrade", "started"))
    two = store.append(
        one,
        rec("command/upgrade", "failed", detail="exit 100", log="/var/lib/r/x.log"),
        output="Reading package lists...\nE: Sub-process /usr/bin/dpkg returned an error (1)\n",
    )
    git(person, "pull", "--quiet", "origin", "main")
    trailers = git(
        person,
        "log",
        "-2",
        "--format=%(trailers:key=Reconciler-Rollout,key=Reconciler-Rollout-Host,"
        "key=Reconciler-Rollout-Step,key=Reconciler-Rollout-Outcome,key=Reconciler-Trigger,"
        "valueonly,separator=%x2C)",
    ).split()
    assert trailers == [
        "kernel-2026-12,kvm-02,command/upgrade,failed,rollout",
        "kernel-2026-12,kvm-02,command/upgrade,started,rollout",
    ]
    subject = git(person, "log", "-1", "--format=%s").strip()
    assert subject == "Rollout kernel-2026-12 of cluster lab: kvm-02 command/upgrade failed"
    body = git(person, "log", "-1", "--format=%b")
    assert "exit 100" in body
    assert "Log: /var/lib/r/x.log on run@a" in body
    assert "    E: Sub-process /usr/bin/dpkg returned an error (1)" in body
    saved = json.loads(
        (person / "cluster-state" / "rollouts" / "kernel-2026-12.progress.json").read_text()
    )
    assert RolloutProgress.model_validate(saved) == two
    assert store.load("kernel-2026-12") == two


def test_a_persons_commit_in_between_is_built_upon(tmp_path: Path) -> None:
    store, person, _ = records(tmp_path)
    progress = store.load("r")
    (person / "notes.txt").write_text("hello\n")
    git(person, "add", ".")
    git(person, "commit", "--quiet", "-m", "A note")
    git(person, "push", "--quiet", "origin", "main")
    store.append(progress, rec("drain", "started"))
    git(person, "pull", "--quiet", "origin", "main")
    assert (person / "notes.txt").read_text() == "hello\n"
    assert git(person, "log", "-2", "--format=%s").splitlines()[1] == "A note"


def test_records_written_by_another_instance_are_not_overwritten(tmp_path: Path) -> None:
    store, _, repo = records(tmp_path)
    mine = store.load("r")
    other = RepoRolloutRecords(
        repo, branch="main", folder="cluster-state", cluster="lab", actor="run@b"
    )
    other.append(other.load("r"), rec("drain", "started"))
    with pytest.raises(TerminalError, match="changed meanwhile"):
        store.append(mine, rec("drain", "started"))


def test_records_that_cannot_be_read_are_an_error(tmp_path: Path) -> None:
    store, person, _ = records(tmp_path)
    (person / "cluster-state" / "rollouts" / "r.progress.json").write_text("{torn")
    git(person, "add", ".")
    git(person, "commit", "--quiet", "-m", "torn")
    git(person, "push", "--quiet", "origin", "main")
    with pytest.raises(TerminalError, match="never starts over"):
        store.load("r")


def test_the_message_keeps_the_end_of_the_output_and_no_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RECONCILER_GIT_TOKEN", "tok-3f9a81c2")
    output = "\n".join(f"line {i}" for i in range(100)) + "\nuser tok-3f9a81c2 done\n"
    text = step_message("lab", "r", rec("command/upgrade", "succeeded"), output)
    assert "line 99" in text
    assert "line 10\n" not in text
    assert "tok-3f9a81c2" not in text
    assert "user *** done" in text
