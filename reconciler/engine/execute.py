"""Executing a plan's moves: a streaming queue within every limit, safe under faults.

A free slot starts the next admissible move at once; waves are not run as blocks. Before a
move starts, ``admit`` judges it against a fresh look at its two hosts and the moves running:
stale moves are skipped with their reason, never forced; moves over a limit or needing room a
running or earlier move frees wait. No VM is migrated twice in one execution.

Intent before action: before a migration starts, an intent (plan, source, target, start) is
written on the domain; a move whose intent cannot be written does not start. After the
migration its outcome (last move, or last failure) replaces the intent on the domain where
the VM runs, so a restarted or second reconciler sees it, and one killed in between leaves an
intent the next round resolves from where the VM runs (``core.intents``). Domains are found
by UUID. The ``gate`` is asked before every start: a hold no longer confirmed or a window
that closed starts nothing more, even mid-queue.

Stopping (``stop`` set, e.g. on SIGTERM) starts nothing more and lets running migrations end;
``abort`` also aborts them (the VMs stay on their sources).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timedelta

from reconciler.core import backoff
from reconciler.core.admission import Admission, Verdict, judge
from reconciler.core.admission_view import AdmissionView
from reconciler.engine.ports import (
    Clock,
    DomainRecorder,
    MigrationProgress,
    MigrationResult,
    Migrator,
    Observer,
)
from reconciler.errors import ReconcilerError
from reconciler.model.base import HostName
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Move
from reconciler.model.snapshot import (
    FailedMove,
    MoveIntent,
    ReconcilerState,
    Snapshot,
    VmState,
)
from reconciler.model.status import MoveOutcome, MoveResult

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2
"""How often the queue wakes while migrations run, to notice a stop request."""
FRESH_FOR = timedelta(seconds=10)
"""An observation this recent admits the first wave without a second look at its hosts; an
older one (a person took time to confirm the plan) is looked at again like any later pass."""


Gate = Callable[[], "str | None"]
"""Asked before each migration starts: None to go on, else why nothing more may start."""


@dataclass(frozen=True)
class Event:
    """What the executor tells the one watching: ``kind`` is start, progress, done or skip."""

    kind: str
    move: Move
    progress: MigrationProgress | None = None
    result: MoveResult | None = None


@dataclass
class Ports:
    observer: Observer
    migrator: Migrator
    recorder: DomainRecorder
    clock: Clock


class Execution:
    """One execution of a list of moves; ``run()`` returns a result per move."""

    def __init__(
        self,
        desired: DesiredState,
        snapshot: Snapshot,
        moves: Sequence[Move],
        ports: Ports,
        *,
        plan_id: str,
        stop: threading.Event,
        abort: threading.Event,
        gate: Gate | None = None,
        on_event: Callable[[Event], None] = lambda e: None,
        actor: str | None = None,
        owed: bool = False,
    ) -> None:
        self.desired = desired
        self.owed = owed
        """A record of the round follows: each move is marked unrecorded until it is written."""
        self.written: dict[str, tuple[str, str, ReconcilerState]] = {}
        """VM -> (host, UUID, record) of each move that succeeded, as written on its domain."""
        self.actor = actor
        """Who moves: written on every intent and every move's record."""
        self.view = AdmissionView(desired, snapshot)
        self.pending = _first_per_vm(moves)
        self.ports = ports
        self.plan_id = plan_id
        self.stop = stop
        self.abort = abort
        self.on_event = on_event
        self.gate = gate
        self.results: dict[str, MoveResult] = {}
        self.started_at: dict[str, datetime] = {}
        self._waiting: dict[str, str] = {}
        self._first_pass = True
        self.verdicts = 0
        """Verdicts given: the work of admission, which the queue's length must not drive."""
        self._unrecorded: list[tuple[Move, MigrationResult, datetime]] = []
        """Ended migrations whose outcome is not on the domain yet (written after the starts)."""

    def run(self) -> list[MoveResult]:
        order = [m.vm for m in self.pending]
        parallel = max(1, self.desired.policy.spec.parallel.cluster)
        running: dict[Future[MigrationResult], Move] = {}
        changed = True  # limits and room change only when a migration ends
        rechecked = False
        with (
            ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="migrate") as pool,
            contextlib.ExitStack() as outcomes,
        ):
            outcomes.callback(self._record_outcomes)  # whatever ends the loop
            while self.pending or running:
                closed = self.gate() if self.gate is not None and self.pending else None
                if self.stop.is_set():
                    for m in self.pending:
                        self._skip(m, "Interrupted", "not started: the run was interrupted")
                    self.pending = []
                elif closed is not None:
                    for m in self.pending:
                        self._skip(m, "NotStarted", f"not started: {closed}")
                    self.pending = []
                elif changed:
                    admitted = self._admitted(list(running.values()))
                    for i, m in enumerate(admitted):
                        if self.stop.is_set() or (self.gate is not None and self.gate()):
                            # judged again (and skipped) above, in plan order
                            self.pending[:0] = admitted[i:]
                            break
                        self._start(pool, running, m)
                self._record_outcomes()  # after the starts: the next move does not wait for them
                if not running:
                    if self.pending and not rechecked:
                        # before giving up, one fresh look at every pending move's hosts: what
                        # held them (a migration seen in flight) may be over by now
                        rechecked = changed = True
                        self._fresh({h for m in self.pending for h in _ends(m)})
                        continue
                    if self.pending:  # nothing runs and nothing may start: it never will
                        for m, why in self._blocked():
                            self._skip(m, "Blocked", why)
                        self.pending = []
                    break
                done, _ = wait(list(running), timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
                for future in done:
                    self._finish(running.pop(future), future)
                changed = bool(done)
                rechecked = rechecked and not done
        return [self.results[vm] for vm in order if vm in self.results]

    # --- admission ------------------------------------------------------------------------

    def _fresh(self, hosts: set[HostName]) -> None:
        try:
            fresh = self.ports.observer.observe_hosts(sorted(hosts))
        except ReconcilerError as err:
            log.warning("fresh look at %s failed: %s", ", ".join(sorted(hosts)), err)
            return
        self.view.replace_hosts(fresh)

    def _admitted(self, running: list[Move]) -> list[Move]:
        """Pending moves that may start now; stale ones are skipped on the way.

        The pending moves are judged against the working snapshot first; the two hosts of
        each move that would start are then looked at afresh and every pending move judged
        again, until every move to start has had its hosts looked at in this pass. Only the
        first pass, right after the round's own observation, starts without a second look.

        A host one of this run's migrations is running on is not looked at: libvirt holds a
        migrating domain until its source QEMU has stopped, so the look would wait for that
        migration to end. Such a host is judged on the working view, which counts the
        migration running (its room on the target, its limits) and learns its outcome.
        """
        if not self.pending:
            return []
        verdicts = self._judge(running)
        if self._first_pass_fresh():
            return self._settle(verdicts)
        looked: set[HostName] = {h for m in running for h in _ends(m)}
        while True:
            hosts = {h for a in verdicts if a.verdict is Verdict.ADMIT for h in _ends(a.move)}
            if hosts <= looked:
                return self._settle(verdicts)
            self._fresh(hosts - looked)
            looked |= hosts
            verdicts = self._judge(running)

    def _first_pass_fresh(self) -> bool:
        """The first pass, on an observation taken within ``FRESH_FOR``: no second look."""
        first, self._first_pass = self._first_pass, False
        return first and self.ports.clock.now() - self.view.taken_at <= FRESH_FOR

    def _judge(self, running: list[Move]) -> list[Admission]:
        verdicts = judge(self.view, self.pending, running, until_full=True)
        self.verdicts += len(verdicts)
        return verdicts

    def _settle(self, verdicts: list[Admission]) -> list[Move]:
        """Skip the stale moves, keep the waiting ones pending (and those not judged, after
        the cluster's limit was reached); the admitted ones to start."""
        start: list[Move] = []
        keep: list[Move] = []
        for a in verdicts:
            if a.verdict is Verdict.SKIP:
                self._skip(a.move, a.code.value, a.message)
            elif a.verdict is Verdict.ADMIT:
                start.append(a.move)
            else:
                keep.append(a.move)
        self.pending = keep + self.pending[len(verdicts) :]
        self._waiting = {a.move.vm: a.message for a in verdicts if a.verdict is Verdict.WAIT}
        return start

    def _blocked(self) -> list[tuple[Move, str]]:
        # a move left without a verdict: migrations of others filled the cluster's limit
        limit = self.desired.policy.spec.parallel.cluster
        full = f"parallel.cluster {limit} migrations already run"
        return [(m, f"could not start: {self._waiting.get(m.vm, full)}") for m in self.pending]

    # --- running --------------------------------------------------------------------------

    def _start(
        self,
        pool: ThreadPoolExecutor,
        running: dict[Future[MigrationResult], Move],
        m: Move,
    ) -> None:
        log.info(
            "migrating %s from %s to %s (%s%s)",
            m.vm,
            m.source,
            m.target,
            m.reason.value,
            f", rule {m.rule}" if m.rule else "",
            extra={"vm": m.vm, "plan_id": self.plan_id},
        )
        started = self.ports.clock.now()
        seen = self._seen(m)
        if seen is None:
            self._skip(m, "VmGone", f"{m.vm} is not seen on {m.source}")
            return
        intent = MoveIntent(
            plan_id=self.plan_id,
            source=m.source,
            target=m.target,
            started_at=started,
            reason=m.reason.value,
            actor=self.actor,
        )
        try:
            self.ports.recorder.record(
                m.source,
                m.vm,
                seen.reconciler.model_copy(update={"intent": intent}),
                uuid=seen.uuid,
            )
        except ReconcilerError as err:
            self._skip(
                m, "IntentNotRecorded", f"not started: the intent could not be written: {err}"
            )
            return
        self.started_at[m.vm] = started
        self.on_event(Event("start", m))

        def progress(p: MigrationProgress) -> None:
            self.on_event(Event("progress", m, progress=p))

        future = pool.submit(
            self.ports.migrator.migrate, m, on_progress=progress, abort=self.abort, uuid=seen.uuid
        )
        running[future] = m

    def _seen(self, m: Move) -> VmState | None:
        return self.view.sighting(m.vm, m.source)

    def _finish(self, m: Move, future: Future[MigrationResult]) -> None:
        try:
            r = future.result()
        except Exception as err:  # the Migrator port never raises: a bug, the VM is unknown
            log.exception("migration of %s raised", m.vm)
            r = MigrationResult(
                vm=m.vm, source=m.source, target=m.target, succeeded=False, error=str(err)
            )
        now = self.ports.clock.now()
        outcome = (
            MoveOutcome.SUCCEEDED
            if r.succeeded
            else MoveOutcome.ABORTED
            if r.aborted
            else MoveOutcome.FAILED
        )
        detail = m.detail if r.succeeded else _failure(r)
        if r.succeeded and r.error:
            detail = f"{m.detail} (the client reported {r.error!r}, but the VM runs on {m.target})"
        if len(r.running_on) > 1 or r.paused_on:
            detail += f"; found running on {r.running_on}, paused on {r.paused_on}"
        result = MoveResult(
            vm=m.vm,
            source=m.source,
            target=m.target,
            outcome=outcome,
            reason=m.reason.value,
            detail=detail,
            started_at=self.started_at.get(m.vm),
            seconds=r.seconds or None,
            downtime_ms=r.downtime_ms,
            data_bytes=r.data_bytes,
            post_copy=r.post_copy,
            throttle=r.throttle,
            iterations=r.iterations,
        )
        self.results[m.vm] = result
        log.info(
            "%s %s: %s -> %s: %s",
            outcome.value,
            m.vm,
            m.source,
            m.target,
            detail,
            extra={"vm": m.vm, "plan_id": self.plan_id},
        )
        self._unrecorded.append((m, r, now))
        self._note_where(m, r)
        self.on_event(Event("done", m, result=result))

    def _record_outcomes(self) -> None:
        while self._unrecorded:
            self._record(*self._unrecorded.pop(0))

    def _record(self, m: Move, r: MigrationResult, now: datetime) -> None:
        """The move, or its failure, on the domain where the VM runs now."""
        seen = self._seen(m) or self.view.sighting(m.vm)
        if seen is None:
            return
        if r.post_copy_failed:
            # split between the hosts by a failed post-copy: the intent stays on the domain,
            # so every later round sees the move unsettled and says what to do about it
            log.error("%s: its post-copy did not end verified: %s", m.vm, _failure(r))
            return
        old = seen.reconciler.model_copy(update={"intent": None})
        if r.succeeded:
            host = m.target
            state = backoff.recorded(
                old,
                reason=m.reason.value,
                source=m.source,
                target=m.target,
                at=now,
                plan_id=self.plan_id,
                actor=self.actor,
            ).model_copy(update={"unrecorded": self.owed})
            self.written[m.vm] = (host, seen.uuid, state)
        else:
            host = r.running_on[0] if r.running_on else m.source
            failure = FailedMove(
                at=now,
                source=m.source,
                target=m.target,
                plan_id=self.plan_id,
                error=_failure(r),
            )
            state = old.model_copy(update={"last_failure": failure})
        try:
            self.ports.recorder.record(host, m.vm, state, uuid=seen.uuid)
        except ReconcilerError as err:
            log.warning("could not record the move of %s on %s: %s", m.vm, host, err)

    def _note_where(self, m: Move, r: MigrationResult) -> None:
        """Keep the working view of where the VM runs in step with the result."""
        if not r.running_on and not r.succeeded:
            return
        host = r.running_on[0] if r.running_on else m.target  # a cold move runs nowhere
        self.view.vm_now_on(m.vm, host)

    def _skip(self, m: Move, code: str, message: str) -> None:
        log.info(
            "skipped %s: %s -> %s: %s (%s)",
            m.vm,
            m.source,
            m.target,
            message,
            code,
            extra={"vm": m.vm, "plan_id": self.plan_id},
        )
        result = MoveResult(
            vm=m.vm,
            source=m.source,
            target=m.target,
            outcome=MoveOutcome.SKIPPED,
            reason=code,
            detail=message,
        )
        self.results[m.vm] = result
        self.on_event(Event("skip", m, result=result))


def _ends(m: Move) -> tuple[HostName, HostName]:
    return m.source, m.target


def _failure(r: MigrationResult) -> str:
    """What went wrong, as the move's result and the domain's record both say it."""
    return r.error or ("aborted" if r.aborted else "failed")


def _first_per_vm(moves: Sequence[Move]) -> list[Move]:
    """The moves in plan order (the order the planner checked them in), one per VM."""
    seen: set[str] = set()
    out = []
    for m in moves:
        if m.vm not in seen:
            seen.add(m.vm)
            out.append(m)
    return out
