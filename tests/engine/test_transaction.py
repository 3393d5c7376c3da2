"""One git transaction (``commit_on_branch``) on the fake repository: every lost race is
tried again on the new head after a jittered, growing wait, decided here by a seeded random
source and a recorded sleep; anything else is raised at once."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.engine.transaction import Change, RetryPolicy, commit_on_branch
from reconciler.errors import GitError, PushRejected, RemoteUnreachable
from tests.engine.test_propose import FakeRepo


class Racing(FakeRepo):
    """Another writer commits on main between our read and our push, ``races`` times."""

    races: int = 0

    def push(self, branch: str, commit: str | None, *, expected: str | None) -> None:
        if self.races > 0:
            self.races -= 1
            self.person_commits(branch)
        super().push(branch, commit, expected=expected)


class Ticks:
    """A clock each attempt of which takes ``step`` seconds, and a sleep that notes waits."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step
        self.slept: list[float] = []

    def clock(self) -> float:
        self.now += self.step  # read at an attempt's start and at its lost push
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def policy(ticks: Ticks, attempts: int = 12, seed: int = 7) -> RetryPolicy:
    return RetryPolicy(
        attempts=attempts, rng=random.Random(seed), sleep=ticks.sleep, clock=ticks.clock
    )


class Adding:
    """An edit that writes ``path``, noting each head it was asked about."""

    def __init__(self, path: str = "f") -> None:
        self.path = path
        self.seen: list[str] = []

    def __call__(self, head: str) -> Change[str]:
        self.seen.append(head)
        return Change({self.path: f"on {head}\n"}, "m", {"Reconciler-Trigger": "x"}, head)


def test_each_lost_race_is_made_again_on_the_new_head_after_a_growing_jittered_wait() -> None:
    repo = Racing()
    repo.races = 4
    ticks = Ticks(step=0.01)
    edit = Adding()
    done = commit_on_branch(repo, "main", edit, retry=policy(ticks))
    assert done is not None
    assert done.attempts == 5
    assert repo.branches["main"] == done.commit
    assert len(set(edit.seen)) == 5, "each attempt edits the head it read"
    assert done.value == done.parent == edit.seen[-1]
    # one wait per lost race, each below its ceiling: 50 ms (longer than an attempt), doubling
    assert len(ticks.slept) == 4
    for n, waited in enumerate(ticks.slept):
        assert 0 <= waited < 0.05 * 2**n
    # the same seed, the same waits: a test decides them all
    again = Ticks(step=0.01)
    repo2 = Racing()
    repo2.races = 4
    commit_on_branch(repo2, "main", Adding(), retry=policy(again))
    assert again.slept == ticks.slept


def test_a_slow_attempt_widens_the_slot_to_its_own_length() -> None:
    """Writers whose attempts take 0.4 s cannot be parted by 50 ms of jitter: the first wait
    is drawn below the attempt's own length."""
    repo = Racing()
    repo.races = 1
    ticks = Ticks(step=0.4)
    rng = random.Random(1)
    expected = random.Random(1).uniform(0.0, 0.4)
    retry = RetryPolicy(rng=rng, sleep=ticks.sleep, clock=ticks.clock)
    commit_on_branch(repo, "main", Adding(), retry=retry)
    assert ticks.slept == [pytest.approx(expected)]


@given(st.integers(1, 20), st.floats(0, 3), st.integers(0, 2**32))
def test_every_wait_is_within_its_ceiling_and_all_within_the_policys(
    lost: int, took: float, seed: int
) -> None:
    retry = RetryPolicy(rng=random.Random(seed))
    assert 0 <= retry.delay(lost, took) <= min(retry.cap, max(retry.base, took) * 2 ** (lost - 1))
    assert sum(min(retry.cap, 0.05 * 2**n) for n in range(11)) == pytest.approx(retry.ceiling())


def test_a_branch_that_keeps_moving_gives_up_after_the_policys_attempts() -> None:
    repo = Racing()
    repo.races = 100
    ticks = Ticks(step=0.01)
    with pytest.raises(PushRejected, match=r"could not write X on main: .*kept moving \(6 tries\)"):
        commit_on_branch(repo, "main", Adding(), retry=policy(ticks, attempts=6), what="write X")
    assert len(ticks.slept) == 5
    assert repo.races == 100 - 6


def test_anything_but_a_lost_race_is_raised_at_once() -> None:
    class Unreachable(FakeRepo):
        def push(self, branch: str, commit: str | None, *, expected: str | None) -> None:
            raise RemoteUnreachable("the remote does not answer")

    ticks = Ticks(step=0.01)
    with pytest.raises(RemoteUnreachable):
        commit_on_branch(Unreachable(), "main", Adding(), retry=policy(ticks))
    assert ticks.slept == []


def test_nothing_to_do_commits_nothing_and_a_missing_branch_says_so() -> None:
    repo = Racing()
    assert commit_on_branch(repo, "main", lambda head: None) is None
    assert repo.pushes == 0
    with pytest.raises(GitError, match="no branch 'gone'"):
        commit_on_branch(repo, "gone", Adding())


def test_a_change_may_go_to_another_branch_made_on_the_head_read() -> None:
    repo = Racing()
    repo.branches["proposal"] = "c0"

    def edit(head: str) -> Change[None]:
        return Change({"f": "x\n"}, "m", {}, None, push_to="proposal")

    done = commit_on_branch(repo, "main", edit)
    assert done is not None
    assert done.branch == "proposal"
    assert repo.branches["proposal"] == done.commit
    assert repo.commits_[done.commit][0] == repo.branches["main"]
