"""Writers racing on one branch of a real bare repository over file://: several clones (each
its own cache, as the clusters of a fleet or the instances on several machines) pushing at
the same moment. Every record must land; judged from the bare repository's git log."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.adapters.git.repo import GitStateRepo
from reconciler.engine.audit import record_batch
from reconciler.engine.rollout_audit import RepoRolloutRecords
from reconciler.engine.transaction import RetryPolicy
from reconciler.errors import GitError, PushRejected
from reconciler.model.rollout_progress import StepOutcome, StepRecord
from reconciler.model.status import MoveOutcome, MoveResult
from tests.gitrepos import git, state_remote

WRITERS = 6
QUICK = RetryPolicy(cap=1.0)
"""Waits no longer than a second: the tests stay quick; the attempts and slots are the
product's."""


def at_once(jobs: list[Callable[[], None]]) -> list[BaseException]:
    """Run ``jobs`` in threads released together; the errors they raised."""
    gate = threading.Barrier(len(jobs))
    errors: list[BaseException] = []

    def run(job: Callable[[], None]) -> None:
        gate.wait()
        try:
            job()
        except BaseException as err:  # reported by the test
            errors.append(err)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return errors


def clones(url: str, tmp_path: Path, n: int) -> list[GitStateRepo]:
    repos = [GitStateRepo(url, cache_dir=tmp_path / f"cache-{i}") for i in range(n)]
    for repo in repos:
        repo.fetch()
    return repos


def trailer_values(bare: Path, key: str) -> list[str]:
    out = git(bare, "log", "main", f"--format=%(trailers:key={key},valueonly)")
    return [line.strip() for line in out.splitlines() if line.strip()]


def test_every_push_that_loses_a_race_is_a_push_rejected(tmp_path: Path) -> None:
    """Pushes made from one head at once: one wins, every other is PushRejected (a lost race
    to fetch and redo), whatever form the remote's refusal takes, never a plain GitError."""
    url, _ = state_remote(tmp_path)
    repos = clones(url, tmp_path, WRITERS)
    head = repos[0].head("main")
    assert head is not None
    commits = [
        r.commit_files(parent=head, files={f"f{i}": "x\n"}, message=f"writer {i}")
        for i, r in enumerate(repos)
    ]
    won: list[int] = []

    def push(i: int) -> Callable[[], None]:
        def job() -> None:
            repos[i].push("main", commits[i], expected=head)
            won.append(i)

        return job

    errors = at_once([push(i) for i in range(WRITERS)])
    assert len(won) == 1
    assert [type(e) for e in errors] == [PushRejected] * (WRITERS - 1), [str(e) for e in errors]


def test_a_hook_that_refuses_a_push_is_not_a_lost_race(tmp_path: Path) -> None:
    """A refusal that trying again cannot change (the remote's hook) stays a GitError."""
    url, _ = state_remote(tmp_path)
    bare = Path(url.removeprefix("file://"))
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'main is protected' >&2\nexit 1\n")
    hook.chmod(0o755)
    [repo] = clones(url, tmp_path, 1)
    head = repo.head("main")
    assert head is not None
    commit = repo.commit_files(parent=head, files={"f": "x\n"}, message="m")
    with pytest.raises(GitError, match="main is protected") as raised:
        repo.push("main", commit, expected=head)
    assert not isinstance(raised.value, PushRejected)


def results(cluster: str) -> list[MoveResult]:
    return [
        MoveResult(
            vm=f"{cluster}-vm", source="kvm-01", target="kvm-02",
            outcome=MoveOutcome.SUCCEEDED, reason="Balance", detail="spread",
        )
    ]  # fmt: skip


def test_a_fleet_recording_at_once_loses_no_audit_record(tmp_path: Path) -> None:
    """Six clusters of one repository each commit their round's record at the same moment
    (each from its own clone): every record is on the branch, none dropped."""
    url, _ = state_remote(tmp_path)
    bare = Path(url.removeprefix("file://"))
    repos = clones(url, tmp_path, WRITERS)

    def record(i: int) -> Callable[[], None]:
        def job() -> None:
            head = repos[i].head("main")
            assert head is not None
            record_batch(
                repos[i], branch="main", cluster=f"c{i}", folder=f"fleet/c{i}",
                results=results(f"c{i}"), own_moves={}, status_json="{}\n",
                plan_id=f"plan-{i}", source=head, trigger="schedule", actor=f"run@m{i}",
                retry=QUICK,
            )  # fmt: skip

        return job

    errors = at_once([record(i) for i in range(WRITERS)])
    assert errors == []
    plans = trailer_values(bare, "Reconciler-Plan")
    assert sorted(plans) == [f"plan-{i}" for i in range(WRITERS)]
    for i in range(WRITERS):
        assert git(bare, "show", f"main:fleet/c{i}/reconciler-status.json") == "{}\n"


def test_rollout_steps_of_three_clusters_at_once_are_each_recorded_when_they_happen(
    tmp_path: Path,
) -> None:
    """Three clusters' rollouts record their steps (begun, ended) while the same clusters'
    rounds commit audit records: every step's record is on the branch, in its order."""
    url, _ = state_remote(tmp_path)
    bare = Path(url.removeprefix("file://"))
    repos = clones(url, tmp_path, 6)
    now = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)

    def rollout(i: int) -> Callable[[], None]:
        store = RepoRolloutRecords(
            repos[i], branch="main", folder=f"fleet/c{i}", cluster=f"c{i}",
            actor=f"run@m{i}", retry=QUICK,
        )  # fmt: skip

        def job() -> None:
            progress = store.load("kernel")
            for step in ("drain", "undrain"):
                for outcome in ("started", "succeeded"):
                    record = StepRecord(
                        host=f"kvm-{i}", step=step, outcome=StepOutcome(outcome), at=now,
                    )  # fmt: skip
                    progress = store.append(progress, record)

        return job

    def audits(i: int) -> Callable[[], None]:
        def job() -> None:
            for n in range(2):
                head = repos[i].head("main") or ""
                record_batch(
                    repos[i], branch="main", cluster=f"c{i}", folder=f"fleet/c{i}",
                    results=results(f"c{i}"), own_moves={}, status_json="{}\n",
                    plan_id=f"audit-{i}-{n}", source=head, trigger="schedule",
                    actor=f"run@m{i}", retry=QUICK,
                )  # fmt: skip

        return job

    errors = at_once([rollout(i) for i in range(3)] + [audits(i) for i in range(3, 6)])
    assert errors == []
    steps = trailer_values(bare, "Reconciler-Rollout-Step")
    assert len(steps) == 3 * 4
    assert len(trailer_values(bare, "Reconciler-Plan")) == 3 * 2
    for i in range(3):
        hosts = git(
            bare, "log", "main", "--reverse",
            "--format=%(trailers:key=Reconciler-Rollout-Host,key=Reconciler-Rollout-Step,"
            "key=Reconciler-Rollout-Outcome,valueonly,separator=%x20)",
        )  # fmt: skip
        mine = [line.split()[1:] for line in hosts.splitlines() if line.startswith(f"kvm-{i} ")]
        assert mine == [
            [step, outcome] for step in ("drain", "undrain") for outcome in ("started", "succeeded")
        ]


def test_a_drain_while_the_fleet_records_gets_its_edit_on_the_branch(tmp_path: Path) -> None:
    """``drain --repo`` at the moment four clusters commit their records (each writer from its
    own cache): the edit and every record are on the branch."""
    from reconciler.cli.drain import MaintenanceEdit, _set
    from reconciler.cli.requests import ForgeRequest, RepoRequest

    url, _ = state_remote(tmp_path)
    bare = Path(url.removeprefix("file://"))
    repos = clones(url, tmp_path, 4)
    source = RepoRequest(url, cache_dir=tmp_path / "cache-person", actor="ada@desk")

    def record(i: int) -> Callable[[], None]:
        head = repos[i].head("main") or ""

        def job() -> None:
            record_batch(
                repos[i], branch="main", cluster=f"c{i}", folder=f"fleet/c{i}",
                results=results(f"c{i}"), own_moves={}, status_json="{}\n",
                plan_id=f"plan-{i}", source=head, trigger="schedule", actor=f"run@m{i}",
                retry=QUICK,
            )  # fmt: skip

        return job

    def drain() -> None:
        _set(MaintenanceEdit("kvm-01", source, False, ForgeRequest()), True)

    errors = at_once([drain, *(record(i) for i in range(4))])
    assert errors == []
    cluster = git(bare, "show", "main:cluster-state/cluster.yaml")
    assert cluster.count("maintenance: true") == 1
    subjects = git(bare, "log", "main", "--format=%s")
    assert "Maintenance: drain kvm-01 of cluster lab" in subjects
    assert sorted(trailer_values(bare, "Reconciler-Plan")) == [f"plan-{i}" for i in range(4)]
