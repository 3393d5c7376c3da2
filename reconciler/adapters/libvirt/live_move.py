"""One peer-to-peer live migration, watched while it runs and verified on both hosts after.

``migrateToURI3`` (the call of ``calls.migration_call``, or ``calls.copy_call`` for a move
that copies its local disks) blocks, so it runs in a worker thread while the calling thread
reads the source domain's job every ``Watch.poll_interval`` seconds: it reports progress and
aborts the job (``abortJob``) when the migration runs past its limit (``calls.watch_limits``:
``timeoutPerGiB`` x guest memory, or memory and disks for a copy), when the memory still to send
stops falling for ``progressTimeout`` (with post-copy allowed, it first switches to post-copy
once), or when the caller sets ``abort``.

Whatever the worker's exception says, the result is what both hosts show afterwards: where the
VM is active and running, where it is paused, where it is defined. A VM left paused on the
source by a failed pre-copy migration is resumed there, but only when the target is seen not to
run it (resuming it blind could run it twice).

It never raises for the move: a source that does not answer, a VM not found there and a target
that cannot be reached are results with ``succeeded=False`` before anything started (the VM is
where it was).

With disks under ``spec.sharedStorage`` (or ``--shared-path``), the domain's disks are read
before the call, each volume by the file behind it, and ``VIR_MIGRATE_UNSAFE`` is passed when
``calls.declared_shared`` says the declaration answers libvirt's safety check.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import libvirt

from reconciler.adapters.libvirt.calls import (
    Limits,
    MigrationCall,
    copy_call,
    declared_shared,
    migration_call,
    watch_limits,
)
from reconciler.adapters.libvirt.domain_disks import DiskRef, disk_refs
from reconciler.adapters.libvirt.headway import Headway
from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.adapters.libvirt.postcopy import PAUSES, Seen, look_on, resume, split, what_to_do
from reconciler.adapters.libvirt.results import failed_before_start
from reconciler.errors import HostTimeout, HostUnreachable, ReconcilerError
from reconciler.model.cluster import Host
from reconciler.model.desired import DesiredState
from reconciler.model.migration import MigrationProgress, MigrationResult
from reconciler.model.plan import Assist, Move
from reconciler.model.snapshot import MigrationClass

log = logging.getLogger(__name__)

PAGE: Final = 4096
"""Bytes of a memory page where the job statistics do not say (``memory_page_size``)."""


@dataclass(frozen=True)
class Watch:
    """How a live migration is watched."""

    poll_interval: float = 0.2
    """Seconds between two readings of the job."""
    settle_timeout: float = 60.0
    """After an abort, how long to wait for libvirt to end the job before looking anyway."""
    clock: Callable[[], float] = time.monotonic
    """Seconds for the limits (timeoutPerGiB, progressTimeout, the settle wait)."""


@dataclass
class _Job:
    """The migration call running in the worker thread, and what the watcher saw of it."""

    done: threading.Event = field(default_factory=threading.Event)
    error: libvirt.libvirtError | None = None
    last: dict[str, Any] = field(default_factory=dict)
    abort_reason: str | None = None
    abort_error: str | None = None
    postcopy: bool = False
    """Switched to post-copy."""
    switch_tried: bool = False
    headway: Headway = field(default_factory=Headway)
    call: MigrationCall | None = None
    deadline: float = 0.0
    """When the migration's time limit passes (``Watch.clock``)."""
    abandoned: bool = False
    call_seconds: float | None = None
    """How long ``migrateToURI3`` itself took: libvirt's share of the move."""


@dataclass(frozen=True)
class _Ran:
    """A migration that was tried (or refused for its target), to verify on both hosts."""

    uuid: str
    job: _Job
    error: str | None
    known: bool = True
    """The target could be connected to, so it can be looked at."""


class LiveMove:
    """Live migrations over ``pool``, by ``desired``'s policy and Cluster, watched by ``watch``.

    ``shared_paths``: the prefixes declared shared (``spec.sharedStorage`` and any given on the
    command line), for ``VIR_MIGRATE_UNSAFE``.
    """

    def __init__(
        self,
        desired: DesiredState,
        pool: ConnectionPool,
        watch: Watch,
        *,
        shared_paths: Sequence[str] = (),
    ) -> None:
        self.desired = desired
        self.pool = pool
        self.watch = watch
        self.shared_paths = tuple(shared_paths)

    def migrate(
        self,
        move: Move,
        target: Host,
        *,
        on_progress: Callable[[MigrationProgress], None],
        abort: threading.Event,
        uuid: str | None = None,
    ) -> MigrationResult:
        """Migrate ``move.vm`` live to ``target`` (its disks copied for class copy) and report
        where it runs afterwards. With ``uuid`` the domain is found by it, else by name."""
        began = time.monotonic()
        with contextlib.ExitStack() as lent:
            try:
                self.pool.get(move.source)
                # The migration and its watcher on a connection of their own (pool's doc).
                conn = lent.enter_context(self.pool.dedicated(move.source))
            except (HostUnreachable, HostTimeout) as err:
                why = f"not started, source {move.source} unreachable: {err}"
                return failed_before_start(move, began, why)
            ran = self._run_on(conn, move, began, target, on_progress, abort, uuid)
        if isinstance(ran, MigrationResult):
            return ran
        return self._verify(move, began, ran.uuid, ran.job, ran.error, target_known=ran.known)

    def _run_on(
        self,
        conn: Any,
        move: Move,
        began: float,
        target: Host,
        on_progress: Callable[[MigrationProgress], None],
        abort: threading.Event,
        uuid: str | None,
    ) -> MigrationResult | _Ran:
        """The migration on the source's connection ``conn``: a result when it could not
        start (the VM not found), else what to verify."""
        try:
            dom = conn.lookupByUUIDString(uuid) if uuid else conn.lookupByName(move.vm)
            found: str = dom.UUIDString()
            memory = move.memory or int(dom.maxMemory()) * 1024
        except libvirt.libvirtError as err:
            return failed_before_start(move, began, f"{move.vm} not found on {move.source}: {err}")
        try:
            self.pool.get(target.name)
        except (HostUnreachable, HostTimeout) as err:
            # Migrating to a host we cannot look at would leave the outcome unknowable.
            refused = f"not started, target {target.name} unreachable: {err}"
            return _Ran(found, _Job(), refused, known=False)
        call = self._call(conn, dom, move, target)
        limits = watch_limits(self.desired, move, memory)
        job = self._run(move, dom, call, limits, on_progress, abort)
        job.call = call
        if job.abandoned:
            self.pool.retire(conn)
        error: str | None = None
        if job.abort_reason is not None:
            error = f"aborted: {job.abort_reason}"
            if job.abort_error:
                error += f" (abortJob: {job.abort_error})"
        if job.error is not None:
            error = f"{error}; libvirt: {job.error}" if error else f"libvirt: {job.error}"
        if job.abandoned:
            error = f"{error}; libvirt had not ended the job after {self.watch.settle_timeout:g}s"
        return _Ran(found, job, error)

    def _call(self, conn: Any, dom: Any, move: Move, target: Host) -> MigrationCall:
        """The call for ``move``: ``VIR_MIGRATE_UNSAFE`` when the declaration answers
        libvirt's safety check (only looked at when some path is declared shared)."""
        copied = list(move.disks) if move.migration_class is MigrationClass.COPY else []
        unsafe = bool(self.shared_paths) and declared_shared(
            _disks(conn, dom), copied, self.shared_paths
        )
        if unsafe:
            log.info(
                "%s: its disks libvirt would refuse as unshared are under spec.sharedStorage: "
                "migrating with VIR_MIGRATE_UNSAFE",
                move.vm,
            )
        call = migration_call(self.desired, target, unsafe=unsafe)
        if move.migration_class is MigrationClass.COPY:
            call = copy_call(call, self.desired, move)
        return call

    # --- running --------------------------------------------------------------------------

    def _run(
        self,
        move: Move,
        dom: Any,
        call: MigrationCall,
        limits: Limits,
        on_progress: Callable[[MigrationProgress], None],
        abort: threading.Event,
    ) -> _Job:
        job = _Job()

        def work() -> None:
            called = time.monotonic()
            try:
                dom.migrateToURI3(call.dest_uri, call.params, call.flags)
            except libvirt.libvirtError as err:
                job.error = err
            finally:
                job.call_seconds = time.monotonic() - called
                job.done.set()

        may_switch = bool(call.flags & libvirt.VIR_MIGRATE_POSTCOPY)
        planned = move.convergence is not None and move.convergence.assist is Assist.POST_COPY
        watch = self.watch
        worker = threading.Thread(target=work, name=f"migrate {move.vm}", daemon=True)
        started = watch.clock()
        job.deadline = started + limits.seconds
        worker.start()
        headway = job.headway
        last_progress = started
        aborted_at: float | None = None
        while not job.done.wait(watch.poll_interval):
            now = watch.clock()
            stats = self._stats(dom)
            if stats:
                job.last = stats
                if headway.saw(stats):
                    last_progress = now
                self._report(move.vm, stats, now - started, on_progress, headway)
            if job.postcopy:
                # past the switch nothing can be aborted: libvirt ends the job, done or failed
                if now - started > limits.seconds + watch.settle_timeout:
                    job.abandoned = True
                    break
                continue
            if aborted_at is not None:
                if now - aborted_at > watch.settle_timeout:
                    job.abandoned = True  # the worker ends when libvirt returns, on its own
                    break
                continue
            reason = None
            if abort.is_set():
                reason = "stopped on request"
            elif now - started > limits.seconds:
                reason = f"ran past its limit of {limits.seconds:g}s ({limits.why})"
            elif planned and may_switch and not job.switch_tried and headway.passes >= 2:
                # the plan chose post-copy for a guest pre-copy would not converge for
                self._start_postcopy(move.vm, dom, job, "its first pass over memory is done")
                last_progress = now
                continue
            elif stats and now - last_progress > limits.stall:
                # only a job libvirt still runs can stall: with none (ended, or not begun)
                # the call is returning, or the limit above ends the wait
                if may_switch and not job.switch_tried and stats.get("memory_total"):
                    self._start_postcopy(move.vm, dom, job, "no progress in pre-copy")
                    last_progress = now
                    continue
                reason = f"no progress for {limits.stall:g}s (progressTimeout)"
            if reason is not None:
                job.abort_reason, aborted_at = reason, now
                log.warning("%s %s -> %s: aborting, %s", move.vm, move.source, move.target, reason)
                try:
                    dom.abortJob()
                except libvirt.libvirtError as err:
                    job.abort_error = str(err)
        return job

    @staticmethod
    def _stats(dom: Any) -> dict[str, Any]:
        try:
            stats: dict[str, Any] = dom.jobStats()
        except libvirt.libvirtError:
            return {}  # the job ended between two readings, or the domain left the source
        if stats.get("type", libvirt.VIR_DOMAIN_JOB_NONE) == libvirt.VIR_DOMAIN_JOB_NONE:
            return {}
        return stats

    @staticmethod
    def _report(
        vm: str,
        stats: dict[str, Any],
        elapsed: float,
        on_progress: Callable[[MigrationProgress], None],
        headway: Headway | None = None,
    ) -> None:
        disk_total = int(stats.get("disk_total", 0))
        disk_remaining = int(stats.get("disk_remaining", 0))
        page = int(stats.get("memory_page_size", 0)) or PAGE
        progress = MigrationProgress(
            vm=vm,
            # NBD copies the disks first; memory follows once they are in step
            phase="disk" if disk_total and disk_remaining > 0 else "memory",
            disk_total=disk_total,
            disk_processed=int(stats.get("disk_processed", 0)),
            elapsed=round(elapsed, 3),
            data_total=int(stats.get("data_total", 0)),
            data_processed=int(stats.get("data_processed", 0)),
            data_remaining=int(stats.get("data_remaining", 0)),
            bytes_per_second=float(stats.get("memory_bps", 0)),
            memory_remaining=int(stats.get("memory_remaining", 0)),
            dirty_rate=int(stats.get("memory_dirty_rate", 0)) * page,
            iteration=int(stats.get("memory_iteration", 0)),
            throttle=int(stats.get("auto_converge_throttle", 0)),
            post_copy=headway is not None and headway.post_copy,
        )
        try:
            on_progress(progress)
        except Exception:  # a broken display must not leave a migration unwatched
            log.exception("progress callback failed for %s", vm)

    @staticmethod
    def _start_postcopy(vm: str, dom: Any, job: _Job, why: str) -> None:
        """Switch to post-copy (tried once): from then on the job cannot be aborted."""
        log.warning("%s: %s, switching to post-copy", vm, why)
        job.switch_tried = True
        try:
            dom.migrateStartPostCopy()
        except libvirt.libvirtError as err:
            log.warning("%s: post-copy could not start: %s", vm, err)
            return
        job.postcopy = True
        job.headway.switched()

    # --- verifying ------------------------------------------------------------------------

    def _verify(
        self,
        move: Move,
        began: float,
        uuid: str,
        job: _Job,
        error: str | None,
        *,
        target_known: bool = True,
    ) -> MigrationResult:
        notes: list[str] = []
        pool = self.pool
        at_source = look_on(pool, move.source, uuid)
        at_target = (
            look_on(pool, move.target, uuid) if target_known else Seen(error="not connected")
        )
        left_split = False
        in_post_copy = target_known and (job.postcopy or split(at_source, at_target))
        if in_post_copy:
            at_source, at_target, left_split = self._settle(move, uuid, job, notes)
        if at_target.error is not None:
            notes.append(f"could not look at target {move.target}: {at_target.error}")
        if at_source.error is not None:
            notes.append(f"could not look at source {move.source}: {at_source.error}")
        if (
            at_source.paused
            and at_source.reason not in PAUSES
            and at_target.error is None
            and not at_target.active
        ):
            notes.append(self._resume(pool, uuid, move))
            at_source = look_on(pool, move.source, uuid)
        if at_target.running and at_target.persistent and at_source.exists and not at_source.active:
            notes.append(self._undefine_leftover(pool, uuid, move))
            at_source = look_on(pool, move.source, uuid)
        running_on = [
            h for h, s in ((move.source, at_source), (move.target, at_target)) if s.running
        ]
        paused_on = [h for h, s in ((move.source, at_source), (move.target, at_target)) if s.paused]
        succeeded = (
            running_on == [move.target]
            and not paused_on
            and at_target.persistent
            and at_source.error is None
            and not at_source.exists
        )
        if succeeded:
            if error:
                log.warning(
                    "%s: libvirt reported %s, yet it runs on %s only", move.vm, error, move.target
                )
            error = None
        else:
            if not error:
                error = "the migration ended without the VM running on the target only"
            if in_post_copy and not left_split:
                notes.append(
                    "it had switched to post-copy and its end could not be seen on both hosts: "
                    "its intent stays, and the next round records where it runs"
                )
            error = "; ".join([error, *notes])
        downtime, data = self._figures(pool, move.target, uuid, job, succeeded)
        headway = job.headway
        result = MigrationResult(
            vm=move.vm,
            source=move.source,
            target=move.target,
            succeeded=succeeded,
            # an abort that came after the VM had switched over did not happen
            aborted=job.abort_reason is not None and not succeeded,
            error=error,
            running_on=running_on,
            paused_on=paused_on,
            seconds=round(time.monotonic() - began, 3),
            downtime_ms=downtime,
            data_bytes=data,
            post_copy=in_post_copy,
            throttle=headway.throttle or None,
            iterations=headway.passes or None,
            post_copy_failed=in_post_copy and not succeeded,
        )
        log.info(
            "%s %s -> %s: %s in %.3fs, running on %s",
            move.vm,
            move.source,
            move.target,
            "moved" if succeeded else f"failed ({error})",
            result.seconds,
            ", ".join(running_on) or "no host seen",
            extra={"migration": result, "libvirt_seconds": job.call_seconds},
        )
        return result

    def _settle(
        self, move: Move, uuid: str, job: _Job, notes: list[str]
    ) -> tuple[Seen, Seen, bool]:
        """Wait for a migration that reached post-copy to end on its own (libvirt carries on
        while both QEMUs live, a daemon killed or not), resuming it once where libvirt reports
        it failed on both hosts; at most until its time limit, and ``settle_timeout`` at least.
        Both hosts' views, and whether the VM is still split between them (``notes`` then says
        what a person must do)."""
        pool, watch = self.pool, self.watch
        deadline = max(watch.clock() + watch.settle_timeout, job.deadline)
        resumed = False
        while True:
            at_source = look_on(pool, move.source, uuid)
            at_target = look_on(pool, move.target, uuid)
            if not split(at_source, at_target):
                return at_source, at_target, False
            call = job.call
            if at_source.failed and at_target.failed and not resumed and call is not None:
                resumed = True
                log.warning("%s: post-copy failed on both hosts; resuming it", move.vm)
                notes.append(
                    resume(
                        pool,
                        move.source,
                        uuid,
                        call.dest_uri,
                        call.params,
                        call.flags,
                        watch.settle_timeout,
                    )
                )
                continue
            if watch.clock() > deadline:
                break
            time.sleep(watch.poll_interval)
        uris = {h.name: h.uri for h in self.desired.cluster.spec.hosts}
        has_it = at_target.exists or at_target.error is not None
        todo = what_to_do(
            move.vm,
            move.source,
            move.target,
            uris.get(move.source, move.source),
            uris.get(move.target, move.target),
            has_it,
        )
        log.error("%s", todo)
        notes.append(todo)
        return at_source, at_target, True

    @staticmethod
    def _resume(pool: ConnectionPool, uuid: str, move: Move) -> str:
        try:
            pool.call(move.source, lambda c: c.lookupByUUIDString(uuid).resume())
        except (libvirt.libvirtError, ReconcilerError) as err:
            log.error(
                "%s: left paused on %s and could not be resumed: %s", move.vm, move.source, err
            )
            return f"left paused on {move.source}, resuming failed: {err}"
        log.warning("%s: was left paused on %s; resumed it", move.vm, move.source)
        return f"was left paused on {move.source} and has been resumed there"

    @staticmethod
    def _undefine_leftover(pool: ConnectionPool, uuid: str, move: Move) -> str:
        try:
            pool.call(move.source, lambda c: c.lookupByUUIDString(uuid).undefine())
        except (libvirt.libvirtError, ReconcilerError) as err:
            return f"its old definition on {move.source} could not be removed: {err}"
        log.warning("%s: removed its leftover definition on %s", move.vm, move.source)
        return f"removed its leftover definition on {move.source}"

    @staticmethod
    def _figures(
        pool: ConnectionPool, target: str, uuid: str, job: _Job, succeeded: bool
    ) -> tuple[float | None, int | None]:
        """Downtime and bytes sent: the target's completed job, else the last reading."""
        stats = job.last
        if succeeded:
            with contextlib.suppress(libvirt.libvirtError, ReconcilerError):
                done = (
                    pool.get(target)
                    .lookupByUUIDString(uuid)
                    .jobStats(
                        # KEEP: reading them would otherwise discard them for everyone else
                        libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED
                        | libvirt.VIR_DOMAIN_JOB_STATS_KEEP_COMPLETED
                    )
                )
                if done.get("type", libvirt.VIR_DOMAIN_JOB_NONE) != libvirt.VIR_DOMAIN_JOB_NONE:
                    stats = done
        downtime = stats.get("downtime") if succeeded else None
        data = stats.get("data_processed")
        return (
            float(downtime) if downtime is not None else None,
            int(data) if data is not None else None,
        )


def _disks(conn: Any, dom: Any) -> list[DiskRef]:
    """The domain's disks as libvirt's safety check sees them: a volume as the file behind it
    (a volume not found stays a volume: never taken for a declared one); none when its XML
    cannot be read."""
    try:
        refs = disk_refs(ET.fromstring(dom.XMLDesc(0)))
    except (libvirt.libvirtError, ET.ParseError) as err:
        log.warning("could not read the disks of the domain to migrate: %s", err)
        return []
    return [_file_of(conn, ref) if ref.kind == "volume" else ref for ref in refs]


def _file_of(conn: Any, ref: DiskRef) -> DiskRef:
    try:
        vol = conn.storagePoolLookupByName(ref.pool).storageVolLookupByName(ref.volume)
        kind, path = vol.info()[0], vol.path()
    except libvirt.libvirtError:
        return ref
    if kind == libvirt.VIR_STORAGE_VOL_FILE:
        return replace(ref, kind="file", path=path)
    return replace(ref, kind="block" if kind == libvirt.VIR_STORAGE_VOL_BLOCK else "dir", path=path)
