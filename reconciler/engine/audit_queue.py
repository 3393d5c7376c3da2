"""Audit records that lose nothing: each is queued before it is written, and stays queued,
across restarts, until it is on the branch.

``write_in_order`` is what ``RepoSource.record`` does with the round's record:

1. it appends the record, with a new id, to the cluster's queue (``RecordQueue``: a file in
   the state directory) before the first attempt, so a reconciler killed while it pushes still
   has it;
2. it writes the queue oldest first, each record one transaction (``engine.transaction``),
   and takes each out of the queue once it is on the branch;
3. a record that still cannot be written (the remote does not answer, the branch kept moving
   through every attempt) stops the writing: it and every later one stay queued, in order,
   and the error says so; every later round that holds the cluster tries again first.

A queue that cannot be read or saved (a full or read-only state directory) is logged and
does not keep the round's record from being written at once, unqueued.

A queued record from before this call may already be on the branch (its push landed, the
reconciler was killed before it took it out of the queue): its id (trailer
``Reconciler-Record``) found on the branch, it is taken out without a second commit. The
round's own record does not repeat what a queued one says: a move a later round found
unrecorded (``RecordedLate``) that a queued record of the round that made it has just
written is left out, so each move is on the branch once, with its own round's words.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from reconciler.engine.audit import AuditCommit
from reconciler.engine.ports import RecordQueue
from reconciler.errors import ReconcilerError, TerminalError, TransientError
from reconciler.model.acting import QueuedRecord, Record
from reconciler.model.status import MoveOutcome

log = logging.getLogger(__name__)

LATE = "RecordedLate"
"""The reason of a move recorded by a later round than the one that made it."""


def new_id() -> str:
    return uuid.uuid4().hex


def write_in_order(
    record: Record,
    *,
    queue: RecordQueue | None,
    write: Callable[[Record, str], AuditCommit],
    on_branch: Callable[[QueuedRecord], bool],
    make_id: Callable[[], str] = new_id,
) -> AuditCommit | None:
    """Write the queued records, then ``record``; its commit, None when it had nothing to say
    (or what it said was written by a queued record). ``write(record, id)`` makes one commit;
    ``on_branch`` says whether a queued record is already on the branch. Without a queue,
    ``record`` alone is written (and an error loses it, as the caller is told)."""
    owed = bool(record.results or record.placement or record.power)
    if queue is None:
        return write(record, make_id()) if owed else None
    try:
        earlier = queue.load()
    except ReconcilerError as err:
        log.error("the queue of audit records cannot be read: %s", err)
        return write(record, make_id()) if owed else None
    fresh = QueuedRecord(id=make_id(), record=record) if owed else None
    waiting = [*earlier, fresh] if fresh is not None else list(earlier)
    if fresh is not None and not _kept_in(queue, waiting):
        # a queue that cannot be written does not keep the record from being written now;
        # the records queued before wait, as they are, for a round that can update it
        return write(record, fresh.id)
    written: set[tuple[str, str, str]] = set()
    mine: AuditCommit | None = None
    while waiting:
        item = waiting[0]
        try:
            if item is fresh:
                trimmed = _without_repeats(item.record, written)
                mine = write(trimmed, item.id) if trimmed is not None else None
            elif on_branch(item):
                log.info("queued record %s is on the branch already: taken out", item.id)
            else:
                done = write(item.record, item.id)
                log.info("queued record %s written: %s", item.id, done.commit)
        except ReconcilerError as err:
            raise _kept(err, waiting, queue) from err
        waiting.pop(0)
        _kept_in(queue, waiting)  # on the branch now: a queue that keeps it finds it there
        written |= {
            (r.vm, r.source, r.target)
            for r in item.record.results
            if r.outcome is MoveOutcome.SUCCEEDED
        }
    return mine


def _kept_in(queue: RecordQueue, waiting: list[QueuedRecord]) -> bool:
    """Save the queue; False (logged) when it cannot be."""
    try:
        queue.save(waiting)
    except ReconcilerError as err:
        log.error("the queue of audit records cannot be kept: %s", err)
        return False
    return True


def _without_repeats(record: Record, written: set[tuple[str, str, str]]) -> Record | None:
    """``record`` without the late moves a queued record has just written; None when nothing
    is left to say."""
    repeated = [
        r for r in record.results if r.reason == LATE and (r.vm, r.source, r.target) in written
    ]
    if not repeated:
        return record
    gone = {r.vm for r in repeated}
    results = [r for r in record.results if r not in repeated]
    placement = {vm: h for vm, h in record.placement.items() if vm not in gone}
    if not results and not placement:
        return None
    adopted = {vm: h for vm, h in record.adopted.items() if vm in placement}
    return record.model_copy(
        update={"results": results, "placement": placement, "adopted": adopted}
    )


def _kept(err: ReconcilerError, waiting: list[QueuedRecord], queue: RecordQueue) -> ReconcilerError:
    """The error of a record that could not be written, of its kind, saying it is kept."""
    n = len(waiting)
    kind = TransientError if isinstance(err, TransientError) else TerminalError
    return kind(
        f"{err.message}; {'the record is' if n == 1 else f'{n} records are'} kept queued in "
        f"{queue.describe()}",
        hint="every round that holds the cluster writes the queue first, oldest first"
        + (f" ({err.hint})" if err.hint else ""),
    )


__all__ = ["write_in_order"]
