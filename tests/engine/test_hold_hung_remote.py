"""The git lease over HTTP with a remote that stops answering mid-round: no migration starts
after the renew deadline, whatever the hung renewal is doing."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from reconciler.adapters.git.lease import GitLease
from reconciler.engine.leadership import LeaseKeeper
from reconciler.engine.round import RoundOptions, RoundPorts, RoundReport, run_round
from reconciler.engine.triggers import Wakeup
from reconciler.model.plan import Move
from reconciler.model.status import MoveOutcome
from tests.core.builders import desired, host
from tests.fakes import GIB, FakeCluster, FakeHost, FakeVm, MemoryStatusStore
from tests.githttp import git_http
from tests.gitrepos import state_remote


def _renewal_seconds(url: str, work: Path) -> float:
    """How long the slowest of three renewals of a lease over ``url`` takes on this machine now."""
    probe = GitLease(url, "probe", work, lease_duration=60.0, renew_deadline=30.0)
    took = []
    for _ in range(3):
        began = time.monotonic()
        assert probe.acquire()
        took.append(time.monotonic() - began)
    probe.release()
    return max(took)


@dataclass
class _Try:
    """One round with the remote hung during its first migration, as the world saw it."""

    renew_deadline: float
    answers: _Answers
    started: list[float]
    hung_at: list[float]
    report: RoundReport


def _round_with_a_remote_that_hangs(root: Path) -> _Try:
    root.mkdir()
    state_remote(root)
    d = desired(
        [host("h0"), host("h1"), host("h2")], threshold=10, batch=8, parallel={"cluster": 1}
    )
    with git_http(root) as server:
        # The deadline must leave room for renewals as slow as this machine makes them now
        # (a busy machine takes seconds for one), or the hold lapses before any migration;
        # the migrations are as long against it as on a quiet machine (2 s, 0.8 s each).
        renew_deadline = max(2.0, 4 * _renewal_seconds(server.url("remote.git"), root / "p"))
        fake = FakeCluster(
            "test",
            [FakeHost(f"h{i}") for i in range(3)],
            [FakeVm(f"vm{i}", "h0", cpu_used=2.0, memory=4 * GIB) for i in range(8)],
            migration_seconds=0.4 * renew_deadline,
        )
        lease = GitLease(
            server.url("remote.git"),
            "test",
            root / "lease.git",
            lease_duration=2 * renew_deadline,
            renew_deadline=renew_deadline,
            git_timeout=3 * renew_deadline,  # a hung renewal outlives the deadline
        )
        keeper = LeaseKeeper(
            lease, Wakeup(), threading.Event(), retry_period=0.3, renew_deadline=renew_deadline
        )
        assert keeper.acquire(0)
        answers = _Answers(keeper)
        started: list[float] = []
        hung_at: list[float] = []

        def on_migrate(m: Move) -> None:
            started.append(time.monotonic())
            if not hung_at:
                server.hang.set()  # the remote stops answering during the first migration
                hung_at.append(time.monotonic())

        fake.on_migrate = on_migrate
        ports = RoundPorts(
            observer=fake,
            migrator=fake,
            recorder=fake,
            status=MemoryStatusStore(),
            clock=fake.clock,
            hold=answers,
        )
        report = run_round(d, ports, RoundOptions(act=True))
        keeper._stop.set()  # the keeper thread is stuck in the hung push: do not wait for it
    return _Try(renew_deadline, answers, started, hung_at, report)


def test_no_migration_starts_after_the_renew_deadline_while_the_remote_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RECONCILER_GIT_TOKEN", raising=False)
    # A machine busy enough can let the hold lapse before the first migration (then nothing
    # starts, which is right, but the hang is never met): up to three rounds, each checked.
    for attempt in range(3):
        got = _round_with_a_remote_that_hangs(tmp_path / f"try-{attempt}")
        for t in got.started:
            before = [valid for at, valid in got.answers.seen if at < t]
            assert before, f"a migration started at {t} before the hold was asked"
            assert before[-1], f"a migration started at {t} on an invalid hold"
        if got.hung_at:
            break
    assert got.hung_at, "the hold lapsed before the first migration in every round"
    # The last renewal that could have succeeded began before the hang, so the hold may answer
    # "valid" only before the deadline counted from the hang; every migration started on such
    # an answer. Each answer is stamped before the call, so no slack is needed for a busy
    # machine (how long a start takes after its check is not what the deadline bounds).
    deadline = got.hung_at[0] + got.renew_deadline
    seen = got.answers.seen
    assert all(at < deadline for at, valid in seen if valid), (seen, got.hung_at)
    skipped = [r for r in got.report.results if r.outcome is MoveOutcome.SKIPPED]
    assert skipped, "the queue was cut short"
    assert {r.reason for r in skipped} == {"NotStarted"}
    assert all("no longer confirmed" in r.detail for r in skipped)


class _Answers:
    """The keeper as the round sees it, with every answer of ``valid()`` stamped before the
    call was made."""

    def __init__(self, keeper: LeaseKeeper) -> None:
        self.keeper = keeper
        self.seen: list[tuple[float, bool]] = []

    def valid(self) -> bool:
        at = time.monotonic()
        answer = self.keeper.valid()
        self.seen.append((at, answer))
        return answer

    def holder(self) -> str | None:
        return self.keeper.holder()
