"""The git lease over HTTP with a remote that stops answering mid-round: no migration starts
after the renew deadline, whatever the hung renewal is doing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from reconciler.adapters.git.lease import GitLease
from reconciler.engine.leadership import LeaseKeeper
from reconciler.engine.round import RoundOptions, RoundPorts, run_round
from reconciler.engine.triggers import Wakeup
from reconciler.model.plan import Move
from reconciler.model.status import MoveOutcome
from tests.core.builders import desired, host
from tests.fakes import GIB, FakeCluster, FakeHost, FakeVm, MemoryStatusStore
from tests.githttp import git_http
from tests.gitrepos import state_remote

RENEW_DEADLINE = 2.0


def test_no_migration_starts_after_the_renew_deadline_while_the_remote_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RECONCILER_GIT_TOKEN", raising=False)
    state_remote(tmp_path)
    fake = FakeCluster(
        "test",
        [FakeHost(f"h{i}") for i in range(3)],
        [FakeVm(f"vm{i}", "h0", cpu_used=2.0, memory=4 * GIB) for i in range(8)],
        migration_seconds=0.8,
    )
    d = desired(
        [host("h0"), host("h1"), host("h2")], threshold=10, batch=8, parallel={"cluster": 1}
    )
    with git_http(tmp_path) as server:
        lease = GitLease(
            server.url("remote.git"),
            "test",
            tmp_path / "lease.git",
            lease_duration=4.0,
            renew_deadline=RENEW_DEADLINE,
            git_timeout=6.0,  # a hung renewal outlives the deadline
        )
        keeper = LeaseKeeper(
            lease, Wakeup(), threading.Event(), retry_period=0.3, renew_deadline=RENEW_DEADLINE
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
    assert hung_at
    # The last renewal that could have succeeded began before the hang, so the hold may answer
    # "valid" only before the deadline counted from the hang; every migration started on such
    # an answer. Each answer is stamped before the call, so no slack is needed for a busy
    # machine (how long a start takes after its check is not what the deadline bounds).
    deadline = hung_at[0] + RENEW_DEADLINE
    assert all(at < deadline for at, valid in answers.seen if valid), (answers.seen, hung_at)
    for t in started:
        before = [valid for at, valid in answers.seen if at < t]
        assert before, f"a migration started at {t} before the hold was asked"
        assert before[-1], f"a migration started at {t} on an invalid hold"
    skipped = [r for r in report.results if r.outcome is MoveOutcome.SKIPPED]
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
