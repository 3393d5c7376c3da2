"""``LeaseKeeper`` one renewal at a time, on a fake clock: when it holds, when it has lost, what
it tells the round, and what stopping releases. No thread runs unless a test starts one."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from reconciler.engine.leadership import LeaseKeeper
from reconciler.engine.triggers import LEADER, Wakeup
from reconciler.errors import ReconcilerError

DEADLINE = 10.0


class Lease:
    """A lease whose answers a test sets: ``answers`` for acquire (an exception is raised)."""

    def __init__(self, *answers: bool | Exception) -> None:
        self.answers = list(answers)
        self.confirmed: bool | Exception = True
        self.owner: str | None | Exception = "other-instance"
        self.released = 0
        self.release_error: Exception | None = None
        self.acquired = 0
        self.confirms = 0

    def acquire(self) -> bool:
        self.acquired += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def confirm(self) -> bool:
        self.confirms += 1
        if isinstance(self.confirmed, Exception):
            raise self.confirmed
        return self.confirmed

    def holder(self) -> str | None:
        if isinstance(self.owner, Exception):
            raise self.owner
        return self.owner

    def release(self) -> None:
        self.released += 1
        if self.release_error is not None:
            raise self.release_error


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Keeper:
    """A keeper with its lease, clock, wakeup, round stop and the changes it reported."""

    def __init__(self, lease: Lease) -> None:
        self.lease, self.clock, self.wakeup = lease, Clock(), Wakeup()
        self.stop = threading.Event()
        self.changes: list[bool] = []
        self.keeper = LeaseKeeper(
            lease,
            self.wakeup,
            self.stop,
            retry_period=0.01,
            renew_deadline=DEADLINE,
            on_change=self.changes.append,
            monotonic=self.clock,
        )


@pytest.fixture
def stopped() -> Iterator[list[LeaseKeeper]]:
    keepers: list[LeaseKeeper] = []
    yield keepers
    for k in keepers:
        k._stop.set()


def test_taking_the_lease_wakes_the_loop_and_lets_rounds_act() -> None:
    k = Keeper(Lease(True))
    k.stop.set()  # left set by an earlier loss
    assert k.keeper.tick()
    assert k.keeper.held
    assert k.wakeup.take() == [LEADER]
    assert not k.stop.is_set()
    assert k.changes == [True]
    assert k.keeper.tick()
    assert k.changes == [True], "a renewal is no change"
    assert k.wakeup.take() == []


def test_the_hold_is_valid_until_the_renew_deadline_counted_from_when_the_renewal_began() -> None:
    k = Keeper(Lease(True))

    def slow_renewal() -> bool:
        k.clock.now += 4.0  # the call itself takes 4s: the renewal counts from its start
        return True

    k.lease.acquire = slow_renewal  # type: ignore[method-assign]
    assert k.keeper.tick()
    began = k.clock.now - 4.0
    k.clock.now = began + DEADLINE - 0.001
    assert k.keeper.valid()
    k.clock.now = began + DEADLINE
    assert not k.keeper.valid(), "at the deadline no migration may start"
    assert not k.keeper.held


def test_a_failed_renewal_within_the_deadline_keeps_the_lease() -> None:
    k = Keeper(Lease(True, False))
    assert k.keeper.tick()
    k.clock.now += DEADLINE - 0.001
    assert k.keeper.tick(), "one failed renewal before the deadline is not a loss"
    assert not k.stop.is_set()
    assert k.changes == [True]


def test_failed_renewals_until_the_deadline_lose_the_lease_and_stop_the_round() -> None:
    k = Keeper(Lease(True, False))
    assert k.keeper.tick()
    k.clock.now += DEADLINE
    assert not k.keeper.tick()
    assert k.stop.is_set(), "no new move starts"
    assert k.changes == [True, False]
    assert not k.keeper.held


def test_a_renewal_that_raises_is_a_failed_renewal() -> None:
    k = Keeper(Lease(True, ReconcilerError("the remote did not answer")))
    assert k.keeper.tick()
    assert k.keeper.tick()
    k.clock.now += DEADLINE
    assert not k.keeper.tick()
    assert k.stop.is_set()


def test_a_lease_held_by_another_is_not_taken_and_nothing_is_reported() -> None:
    k = Keeper(Lease(False))
    assert not k.keeper.tick()
    assert k.changes == []
    assert k.wakeup.take() == []
    assert not k.stop.is_set()


def test_confirm_rereads_the_lease_only_while_it_is_held() -> None:
    k = Keeper(Lease(True))
    assert not k.keeper.confirm()
    assert k.lease.confirms == 0, "not held: nothing to re-read"
    k.keeper.tick()
    assert k.keeper.confirm()
    k.lease.confirmed = False
    assert not k.keeper.confirm()
    k.lease.confirmed = ReconcilerError("unreadable")
    assert not k.keeper.confirm()
    assert k.lease.confirms == 3


def test_the_holder_is_none_when_it_cannot_be_read() -> None:
    k = Keeper(Lease(True))
    assert k.keeper.holder() == "other-instance"
    k.lease.owner = ReconcilerError("unreadable")
    assert k.keeper.holder() is None


def test_stop_releases_the_lease_and_reports_the_loss() -> None:
    k = Keeper(Lease(True))
    k.keeper.tick()
    k.keeper.stop()
    assert k.lease.released == 1
    assert k.changes == [True, False]
    assert not k.keeper.held


def test_stop_without_the_lease_releases_but_reports_no_change() -> None:
    k = Keeper(Lease(False))
    k.keeper.tick()
    k.keeper.stop()
    assert k.lease.released == 1
    assert k.changes == []


def test_a_release_that_fails_still_stops() -> None:
    k = Keeper(Lease(True))
    k.keeper.tick()
    k.lease.release_error = ReconcilerError("the remote did not answer")
    k.keeper.stop()
    assert k.changes == [True, False]
    assert not k.keeper.held


def test_stop_ends_the_renewing_thread(stopped: list[LeaseKeeper]) -> None:
    k = Keeper(Lease(True))
    stopped.append(k.keeper)
    k.keeper.start()
    k.keeper.stop()
    assert not k.keeper._thread.is_alive()
    renewals = k.lease.acquired
    threading.Event().wait(0.05)
    assert k.lease.acquired == renewals, "no renewal after stop"


def test_acquire_waits_up_to_its_timeout_in_retry_periods() -> None:
    k = Keeper(Lease(False))
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        k.clock.now += seconds

    k.keeper.retry_period = 2.0
    assert not k.keeper.acquire(timeout=5.0, sleep=sleep)
    assert slept == [2.0, 2.0, 1.0]
    assert k.lease.acquired == 4


def test_acquire_returns_once_the_lease_is_taken_and_keeps_it_renewed(
    stopped: list[LeaseKeeper],
) -> None:
    k = Keeper(Lease(False, True))
    stopped.append(k.keeper)
    assert k.keeper.acquire(timeout=5.0, sleep=lambda s: None)
    assert k.keeper._thread.is_alive()
    k.keeper.stop()


def test_by_default_it_renews_every_two_seconds_with_a_ten_second_deadline() -> None:
    keeper = LeaseKeeper(Lease(True), Wakeup(), threading.Event())
    assert (keeper.retry_period, keeper.renew_deadline) == (2.0, 10.0)
    # a daemon thread: a keeper never keeps a stopping process alive; named for thread dumps
    assert keeper._thread.daemon
    assert keeper._thread.name == "lease-keeper"


def test_acquire_without_a_timeout_tries_once() -> None:
    k = Keeper(Lease(False))
    slept: list[float] = []
    assert not k.keeper.acquire(sleep=slept.append)
    assert slept == []
    assert k.lease.acquired == 1


def test_a_keeper_thread_that_dies_while_holding_reports_the_loss(
    stopped: list[LeaseKeeper],
) -> None:
    k = Keeper(Lease(True, KeyError("bug")))
    stopped.append(k.keeper)
    k.keeper.start()
    assert k.stop.wait(5), "the round is told to stop"
    k.keeper._thread.join(5)
    assert k.changes == [True, False]
    assert not k.keeper.valid()


def test_stopping_a_keeper_whose_thread_died_reports_the_loss_once(
    stopped: list[LeaseKeeper],
) -> None:
    k = Keeper(Lease(True, KeyError("bug")))
    stopped.append(k.keeper)
    k.keeper.start()
    assert k.stop.wait(5)
    k.keeper._thread.join(5)
    k.keeper.stop()
    assert k.changes == [True, False], "the death reported the loss; stopping adds none"
    assert k.lease.released == 1


class HungLease(Lease):
    """Taken at once; every renewal after that hangs until the test lets it go."""

    def __init__(self) -> None:
        super().__init__(True)
        self.hung = threading.Event()
        self.go = threading.Event()

    def acquire(self) -> bool:
        if self.acquired:
            self.hung.set()
            self.go.wait(30)
        return super().acquire()


def test_stop_does_not_wait_for_a_renewal_that_hangs_beyond_its_bound() -> None:
    # the bound is retry_period + 5 seconds: a stopping process waits no longer than that
    lease = HungLease()
    k = Keeper(lease)
    stopped = threading.Event()

    def stop() -> None:
        k.keeper.stop()
        stopped.set()

    try:
        k.keeper.start()
        assert lease.hung.wait(5), "a renewal is under way"
        threading.Thread(target=stop, daemon=True).start()
        assert stopped.wait(10), "stop() returned while the renewal still hung"
        assert k.lease.released == 1
        assert k.changes == [True, False]
    finally:
        lease.go.set()


def test_holding_a_cluster_does_not_load_the_folder_watcher() -> None:
    """apply and drain hold the cluster through these modules at every start; only run watches."""
    code = (
        "import sys\n"
        "import reconciler.cli.apply, reconciler.engine.leadership, reconciler.engine.triggers\n"
        "assert 'watchfiles' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
