"""The unattended loop around a reconcile round: when to run one, in which mode, and what to
do when it fails.

A round runs every ``spec.interval`` (with jitter, so instances and clusters do not move in
step) and at once on a trigger (desired state changed, a webhook, the lease taken). The policy
is read again before every round, so an edit takes effect without a restart. Its ``mode`` at
that moment (``core.windows.mode_now``) decides: ``observe`` runs the round without acting;
``propose`` does the same and then keeps the proposal current; ``apply`` lets the round act, but
only after a round of this process has completed an observation, only on the lease holder,
and only inside the policy's windows (outside them it proposes).

Failures: a TransientError (host, forge or remote unreachable, push rejected) retries the round
with exponential backoff and jitter (tenacity); a ConfigError or TerminalError (an invalid
policy) stalls the loop: it stops acting, keeps reporting (health 503 with the reason, metrics,
the round's status) and resumes by itself on the next round that reads a valid desired state.

``stop()`` (on SIGTERM) sets the round's stop event, so no new move starts; the round in flight
settles its running moves and returns, then the loop releases the lease and ``run`` returns.
Clock, sleep and randomness are injected, so tests drive hours of schedule in milliseconds.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential_jitter

from reconciler.core.windows import mode_now, next_window_opening, window_problems
from reconciler.engine import triggers
from reconciler.engine.health import Health
from reconciler.engine.logs import bound
from reconciler.engine.metrics import Metrics
from reconciler.engine.ports import Clock
from reconciler.errors import ConfigError, ReconcilerError, TerminalError, TransientError
from reconciler.model.policy import BalancePolicy, Mode
from reconciler.model.status import ConditionType, ReconcileStatus, RoundOutcome

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = timedelta(minutes=15)
"""Until a valid policy has been read (BalancePolicySpec's default)."""

RunRound = Callable[[str, bool], ReconcileStatus]
"""``run_round(trigger, act)``: one round; ``act`` False observes and plans only."""


class Sleep(Protocol):
    def __call__(self, seconds: float, wake: threading.Event) -> None:
        """Wait ``seconds``, or less when ``wake`` is set."""
        ...


class Leadership(Protocol):
    @property
    def held(self) -> bool: ...

    def confirm(self) -> bool: ...

    def holder(self) -> str | None: ...


class AlwaysLeader:
    """For a single instance with no lease (tests, ``--no-lease``)."""

    held = True

    def confirm(self) -> bool:
        return True

    def holder(self) -> str | None:
        return None


def real_sleep(seconds: float, wake: threading.Event) -> None:
    wake.wait(max(0.0, seconds))


def round_ready(status: ReconcileStatus) -> bool:
    """Whether a round's status allows decisions: observed, finished, not stalled."""
    stalled = status.condition(ConditionType.STALLED)
    result = status.last_result
    return (
        status.observed_since is not None
        and status.last_observed_at is not None
        and result is not None
        and result.outcome is not RoundOutcome.FAILED
        and not (stalled is not None and stalled.status)
    )


@dataclass
class LoopSettings:
    jitter: float = 0.1
    """Each interval is stretched or shrunk by up to this fraction."""
    backoff_initial: float = 1.0
    backoff_max: float = 300.0
    backoff_jitter: float = 1.0
    """Seconds of random jitter added to each backoff wait."""
    unhealthy_after: int = 3
    """Consecutive failed attempts before /healthz answers 503."""
    standby_poll: float = 2.0
    """How often a standby looks whether it became the leader (the keeper wakes it anyway)."""
    unconfirmed_retry: float = 5.0
    """Seconds before the round after one that could not confirm the lease (a push race, a
    remote that did not answer); doubled after each such round in a row, up to backoff_max."""


@dataclass
class Loop:
    cluster: str
    run_round: RunRound
    load_policy: Callable[[], BalancePolicy]
    """Reads the policy of the desired state now; raises ConfigError when it is invalid."""
    clock: Clock
    metrics: Metrics
    health: Health = field(default_factory=Health)
    wakeup: triggers.Wakeup = field(default_factory=triggers.Wakeup)
    round_stop: threading.Event = field(default_factory=threading.Event)
    """Shared with the round: set, it starts no new move (SIGTERM, lease lost)."""
    propose: Callable[[], None] | None = None
    refresh: Callable[[], None] | None = None
    """Brings the desired state up to date before a round (a repository fetch)."""
    leadership: Leadership = field(default_factory=AlwaysLeader)
    release: Callable[[], None] | None = None
    """Releases the lease at shutdown."""
    turn: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext
    """Entered around each round, before its clock starts: a fleet's bound on the rounds
    running at once (a round waits for its turn outside its duration)."""
    sleep: Sleep = real_sleep
    rng: random.Random = field(default_factory=random.Random)
    settings: LoopSettings = field(default_factory=LoopSettings)
    rounds: int = 0
    next_due: datetime | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)
    _observed: bool = False
    _failures: int = 0
    _policy: BalancePolicy | None = None
    _mode: Mode | None = None
    _due_reason: str = "start"
    _rollout_due: datetime | None = None
    """When a rollout in progress asked to be looked at again, from the last round's status."""
    _unconfirmed: int = 0
    """Rounds in a row that should have acted but could not confirm the lease."""

    # -- control -------------------------------------------------------------------------

    def stop(self) -> None:
        """Start no new move, let the round in flight settle, then leave ``run``."""
        if not self._stopping.is_set():
            log.info("stopping: no new moves; waiting for moves in flight")
        self._stopping.set()
        self.round_stop.set()
        self.wakeup.event.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def run(self) -> None:
        """Run rounds until ``stop()``; releases the lease on the way out."""
        with bound(cluster=self.cluster):
            try:
                while not self.stopping:
                    self.step()
            finally:
                if self.release is not None:
                    self.release()
                self.metrics.set_leader(False)
                log.info("stopped")

    def step(self) -> None:
        """One pass: wait for the next round or trigger, or stand by without the lease."""
        if not self.leadership.held:
            self.metrics.set_leader(False)
            self.health.standby(self.leadership.holder())
            self.sleep(self.settings.standby_poll, self.wakeup.event)
            self.wakeup.take()  # triggers seen as a standby are stale once leading
            self.next_due = None  # a new leader reconciles at once
            return
        self.metrics.set_leader(True)
        self.health.leading()
        now = self.clock.now()
        if self.next_due is not None and now < self.next_due and not self.wakeup.event.is_set():
            self.sleep((self.next_due - now).total_seconds(), self.wakeup.event)
            if not self.wakeup.event.is_set() and self.clock.now() < self.next_due:
                return  # woken early by nothing: the stop event or a spurious wake
        if self.stopping:
            return
        reasons = self.wakeup.take()
        self.attempt("+".join(reasons) or self._due_reason)

    # -- one round with retries ------------------------------------------------------------

    def attempt(self, trigger: str) -> None:
        """One round, retried on transient errors; schedules the next one."""
        retrying = Retrying(
            retry=retry_if_exception_type(TransientError),
            wait=wait_exponential_jitter(
                initial=self.settings.backoff_initial,
                max=self.settings.backoff_max,
                jitter=self.settings.backoff_jitter,
            ),
            stop=lambda _state: self.stopping,
            sleep=lambda seconds: self.sleep(seconds, self._stopping),
            before_sleep=self._before_retry,
            reraise=True,
        )
        try:
            retrying(self._round, trigger)
        except TransientError:
            pass  # stopping during backoff; already counted and logged
        except (ConfigError, TerminalError) as err:
            self._stall(err)
        self._schedule()

    def _before_retry(self, state: RetryCallState) -> None:
        wait = state.next_action.sleep if state.next_action else 0.0
        log.info("retrying in %.1f s (attempt %d)", wait, state.attempt_number + 1)

    def _round(self, trigger: str) -> None:
        with self.turn():
            self._counted_round(trigger)

    def _counted_round(self, trigger: str) -> None:
        self.rounds += 1
        with bound(round=self.rounds, trigger=trigger):
            started = self.clock.now()
            try:
                self._round_body(trigger, started)
            except TransientError as err:
                self._failed(err, started)
                raise
            except (ConfigError, TerminalError):
                self.metrics.record_error(self._seconds_since(started))
                raise
            except Exception as err:  # a bug must not end the daemon; count it and retry later
                log.exception("round failed unexpectedly")
                self._failed(err, started)
                raise TransientError(f"unexpected {type(err).__name__}: {err}") from err

    def _round_body(self, trigger: str, started: datetime) -> None:
        if self.refresh is not None:
            self.refresh()
        try:
            policy = self.load_policy()
            problems = window_problems(policy.spec.windows)
            if problems:
                raise ConfigError(f"policy windows: {'; '.join(problems)}")
        except (ConfigError, TerminalError) as err:
            self._report_only(trigger, err)
            raise
        self._policy = policy
        mode = mode_now(policy, started)
        self._mode = mode
        with bound(mode=mode.value):
            act = mode is Mode.APPLY and self._observed and self._may_act()
            status = self.run_round(trigger, act)
            self._rollout_due = rollout_due(status)
            self.metrics.record_round(status, self._seconds_since(started))
            ready = round_ready(status)
            self._after(status, ready)
            if not ready:
                log.info("round %s: not ready for decisions, nothing acted on", _outcome(status))
                return
            if not self._observed:
                self._observed = True
                if mode is Mode.APPLY:  # now that it has seen the cluster, act without waiting
                    self.wakeup.trigger(triggers.OBSERVED)
            if mode is Mode.PROPOSE and self.propose is not None and not self.stopping:
                self.propose()
            log.info("round %s", _outcome(status))

    def _may_act(self) -> bool:
        if self.stopping or self.round_stop.is_set():
            return False
        if not self.leadership.confirm():
            self._unconfirmed += 1
            log.warning("lease not confirmed: this round only observes")
            return False
        self._unconfirmed = 0
        return True

    def _report_only(self, trigger: str, err: ReconcilerError) -> None:
        """Invalid desired state: the round still runs without acting, to record and observe."""
        log.error("desired state invalid, acting stopped: %s", err)
        self.health.stalled(type(err).__name__, str(err))
        try:
            status = self.run_round(trigger, False)
        except ReconcilerError as round_err:
            log.info("report-only round: %s", round_err)
            return
        self.metrics.record_round(status, 0.0)

    def _after(self, status: ReconcileStatus, ready: bool) -> None:
        stalled = status.condition(ConditionType.STALLED)
        failed = (
            status.last_result is not None and status.last_result.outcome is RoundOutcome.FAILED
        )
        if stalled is not None and stalled.status:
            self._failures = 0
            self.health.stalled(stalled.reason, stalled.message)
        elif failed:
            self._failures += 1
            message = status.last_result.message if status.last_result else ""
            if self._failures >= self.settings.unhealthy_after:
                self.health.failing(self._failures, message)
        else:
            self._failures = 0
            self.health.ok(status, waiting=not ready)
        duplicated = status.condition(ConditionType.DUPLICATED)
        if duplicated is not None and duplicated.status:  # whatever else the round says
            self.health.duplicated(duplicated.message)

    def _failed(self, err: Exception, started: datetime) -> None:
        self._failures += 1
        self.metrics.record_error(self._seconds_since(started))
        log.warning("round failed (%d in a row): %s", self._failures, err)
        if self._failures >= self.settings.unhealthy_after:
            self.health.failing(self._failures, str(err))

    def _stall(self, err: ReconcilerError) -> None:
        self._failures = 0
        self.health.stalled(type(err).__name__, str(err))
        log.error("stalled until the desired state is fixed: %s", err)

    # -- schedule ----------------------------------------------------------------------------

    def _schedule(self) -> None:
        now = self.clock.now()
        spread = self.settings.jitter
        factor = 1.0 + self.rng.uniform(-spread, spread) if spread > 0 else 1.0
        interval = self._policy.spec.interval if self._policy else DEFAULT_INTERVAL
        due, self._due_reason = now + interval * factor, triggers.SCHEDULE
        if self._policy is not None and self._mode is not Mode.APPLY:
            opening = next_window_opening(self._policy, now)
            if opening is not None and opening < due:  # act as soon as a window opens
                due, self._due_reason = opening, triggers.WINDOW
        rollout = self._rollout_due
        if rollout is not None and rollout < due:  # a rollout's step is due before that
            due, self._due_reason = max(rollout, now + ROLLOUT_PAUSE), triggers.ROLLOUT
        if self._unconfirmed and self._mode is Mode.APPLY:  # act again soon, not an interval on
            wait = self.settings.unconfirmed_retry * 2 ** (self._unconfirmed - 1)
            retry = now + timedelta(seconds=min(wait, self.settings.backoff_max))
            if retry < due:
                due, self._due_reason = retry, triggers.LEASE_RETRY
        self.next_due = due
        self.health.next_round(due)

    def _seconds_since(self, started: datetime) -> float:
        return max(0.0, (self.clock.now() - started).total_seconds())


ROLLOUT_PAUSE = timedelta(seconds=1)
"""The least time between two rounds a rollout asks for."""


def rollout_due(status: ReconcileStatus) -> datetime | None:
    """The earliest time a rollout in progress asked to be looked at again, if any."""
    times = [
        r.next_look
        for r in status.rollouts
        if r.next_look is not None and r.phase not in ("Done", "Stopped")
    ]
    return min(times, default=None)


def _outcome(status: ReconcileStatus) -> str:
    result = status.last_result
    if result is None:
        return "recorded no result"
    moves = f", {len(result.moves)} moves" if result.moves else ""
    plan = f", plan {result.plan_id}" if result.plan_id else ""
    return f"{result.outcome.value}{moves}{plan}"
