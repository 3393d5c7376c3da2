"""Live migration through libvirt, watched while it runs and verified on both hosts afterwards.

One move is one peer-to-peer live migration (``migrateToURI3`` with ``LIVE | PEER2PEER |
PERSIST_DEST | UNDEFINE_SOURCE``): the source's libvirtd talks to the target's, the VM keeps
running, its definition moves with it. The migration URI comes from the Cluster's
``migration.uri`` template, the listen address from the target's ``address``, the bandwidth
from ``migration.bandwidth``; auto-converge and post-copy only when the policy allows them.

``migrateToURI3`` blocks, so it runs in a worker thread while the calling thread reads the
source domain's job every ``poll_interval`` seconds: it reports progress and aborts the job
(``abortJob``) when the migration runs past ``timeoutPerGiB`` x guest memory, when the memory
still to send stops falling for ``progressTimeout`` (with post-copy allowed, it first switches
to post-copy once), or when the caller sets ``abort``.

Whatever the worker's exception says, the result is what both hosts show afterwards: where the
VM is active and running, where it is paused, where it is defined. A VM left paused on the
source by a failed pre-copy migration is resumed there, but only when the target is seen not to
run it (resuming it blind could run it twice). The source host being unreachable before
anything starts raises ``HostUnreachable``/``HostTimeout`` (nothing was done and nothing can be
verified); every other failure is a result with ``succeeded=False``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import libvirt

from reconciler.adapters.libvirt.cold import cold_move, discard_copy
from reconciler.adapters.libvirt.connection import ConnectionSettings, is_no_domain
from reconciler.adapters.libvirt.disk_moves import (
    copy_call,
    copy_time_limit,
    failed_before_start,
    live_copy,
)
from reconciler.adapters.libvirt.leftovers import Leftovers
from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.errors import ConfigError, HostTimeout, HostUnreachable, ReconcilerError
from reconciler.model.cluster import Host
from reconciler.model.desired import DesiredState
from reconciler.model.migration import MigrationProgress, MigrationResult
from reconciler.model.plan import Move
from reconciler.model.snapshot import MigrationClass

log = logging.getLogger(__name__)

GIB: Final = 1024**3
FLAGS: Final = (
    libvirt.VIR_MIGRATE_LIVE
    | libvirt.VIR_MIGRATE_PEER2PEER
    | libvirt.VIR_MIGRATE_PERSIST_DEST
    | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
)
_RUNNING: Final = frozenset({libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_BLOCKED})
# Paused with the memory already on the target: resuming the source would run it twice.
_POSTCOPY_PAUSES: Final = frozenset(
    {libvirt.VIR_DOMAIN_PAUSED_POSTCOPY, libvirt.VIR_DOMAIN_PAUSED_POSTCOPY_FAILED}
)


def migration_uri(template: str | None, host: Host) -> str | None:
    """The target's migration URI from the Cluster's template, or None without a template."""
    if template is None:
        return None
    return template.replace("{address}", host.address or host.name).replace("{name}", host.name)


@dataclass(frozen=True)
class MigrationCall:
    """What ``migrateToURI3`` is called with for one move (pure; tested without libvirt)."""

    dest_uri: str
    params: dict[str, Any]
    flags: int


def migration_call(desired: DesiredState, target: Host) -> MigrationCall:
    """The destination URI, typed parameters and flags of a migration to ``target``."""
    defaults = desired.cluster.spec.defaults.migration
    template = target.migration.uri or defaults.uri
    bandwidth = target.migration.bandwidth
    if bandwidth is None:
        bandwidth = defaults.bandwidth or 0
    params: dict[str, Any] = {}
    uri = migration_uri(template, target)
    if uri is not None:
        params[libvirt.VIR_MIGRATE_PARAM_URI] = uri
    if target.address is not None:
        params[libvirt.VIR_MIGRATE_PARAM_LISTEN_ADDRESS] = target.address
    if bandwidth > 0:
        params[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH] = bandwidth
    tuning = desired.policy.spec.migration
    flags = FLAGS
    if tuning.auto_converge:
        flags |= libvirt.VIR_MIGRATE_AUTO_CONVERGE
    if tuning.post_copy:
        flags |= libvirt.VIR_MIGRATE_POSTCOPY
    return MigrationCall(dest_uri=target.uri, params=params, flags=flags)


def time_limit(desired: DesiredState, memory_bytes: int) -> float:
    """Seconds a migration of a guest this big may run: timeoutPerGiB x GiB, rounded up."""
    per_gib = desired.policy.spec.migration.timeout_per_gib.total_seconds()
    return per_gib * max(1, math.ceil(memory_bytes / GIB))


@dataclass
class _Job:
    """The migration call running in the worker thread, and what the watcher saw of it."""

    done: threading.Event = field(default_factory=threading.Event)
    error: libvirt.libvirtError | None = None
    last: dict[str, Any] = field(default_factory=dict)
    abort_reason: str | None = None
    abort_error: str | None = None
    postcopy: bool = False
    abandoned: bool = False
    call_seconds: float | None = None
    """How long ``migrateToURI3`` itself took: libvirt's share of the move."""


@dataclass(frozen=True)
class _Seen:
    """One host's view of the VM after the migration; ``error`` when it could not be asked."""

    exists: bool = False
    active: bool = False
    state: int = libvirt.VIR_DOMAIN_NOSTATE
    reason: int = 0
    persistent: bool = False
    error: str | None = None

    @property
    def running(self) -> bool:
        return self.active and self.state in _RUNNING

    @property
    def paused(self) -> bool:
        return self.active and self.state == libvirt.VIR_DOMAIN_PAUSED


def _look(conn: Any, uuid: str) -> _Seen:
    try:
        dom = conn.lookupByUUIDString(uuid)
        state, reason = dom.state()
        return _Seen(
            exists=True,
            active=bool(dom.isActive()),
            state=state,
            reason=reason,
            persistent=bool(dom.isPersistent()),
        )
    except libvirt.libvirtError as err:
        if is_no_domain(err):
            return _Seen()
        return _Seen(error=str(err))


def _look_on(pool: ConnectionPool, host: str, uuid: str) -> _Seen:
    """``_look`` over the host's pooled connection, on a new one if that one broke."""
    for _ in range(2):
        try:
            conn = pool.get(host)
        except ReconcilerError as err:
            return _Seen(error=str(err))
        seen = _look(conn, uuid)
        if seen.error is None or pool.alive(conn):
            return seen
        pool.broken(host, conn)
    return seen


class LibvirtMigrator:
    """``Migrator`` for libvirt: one verified peer-to-peer live migration per ``migrate``.

    Over the command's open connections (``pool``); built without a pool, each migration
    opens its own connections (one to each host, and one to the source for the migration and
    its watcher) and closes them afterwards.
    """

    def __init__(
        self,
        desired: DesiredState,
        *,
        connection: ConnectionSettings | None = None,
        poll_interval: float = 0.2,
        settle_timeout: float = 60.0,
        pool: ConnectionPool | None = None,
        leftovers: Leftovers | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.desired = desired
        self.leftovers = leftovers or Leftovers()
        """Target volumes of failed disk moves not yet deleted (their host did not answer)."""
        self.clock = clock
        """Seconds for the watcher's limits (timeoutPerGiB, progressTimeout, the settle wait)."""
        self.connection = connection or ConnectionSettings()
        self.pool = pool
        self.poll_interval = poll_interval
        self.settle_timeout = settle_timeout
        """After an abort, how long to wait for libvirt to end the job before looking anyway."""
        self._hosts = {h.name: h for h in desired.cluster.spec.hosts}

    def _host(self, name: str) -> Host:
        try:
            return self._hosts[name]
        except KeyError:
            raise ConfigError(
                f"host {name} is not in cluster {self.desired.cluster.metadata.name}",
                hint="plan again against the current cluster.yaml",
            ) from None

    def host_of(self, name: str) -> Host:
        """The Cluster's host ``name`` (ConfigError when the Cluster has none)."""
        return self._host(name)

    def migrate(
        self,
        move: Move,
        *,
        on_progress: Callable[[MigrationProgress], None],
        abort: threading.Event,
        uuid: str | None = None,
    ) -> MigrationResult:
        """Move ``move.vm`` by its class (live, live with its disks copied, or cold) and
        report where it runs afterwards (see the module doc).

        With ``uuid`` the domain is found by it (a name can be reused by another domain)."""
        source, target = self._host(move.source), self._host(move.target)
        pool = self.pool or ConnectionPool(
            {source.name: source.uri, target.name: target.uri}, self.connection
        )
        try:
            self.leftovers.sweep(pool)
            if move.migration_class is MigrationClass.COPY:
                return live_copy(self, pool, move, on_progress=on_progress, abort=abort, uuid=uuid)
            if move.migration_class is MigrationClass.COLD:
                return cold_move(self, pool, move, on_progress=on_progress, abort=abort, uuid=uuid)
            return self.migrate_live(pool, move, on_progress=on_progress, abort=abort, uuid=uuid)
        finally:
            if pool is not self.pool:
                pool.close()

    def discard_copy(self, host: str, vm: str, *, uuid: str) -> None:
        """Remove the shut-off copy of ``vm`` a stopped cold move left on ``host``."""
        pool = self.pool or ConnectionPool({host: self._host(host).uri}, self.connection)
        try:
            discard_copy(self, pool, host, uuid)
            log.warning("%s: removed the copy a stopped cold move left on %s", vm, host)
        finally:
            if pool is not self.pool:
                pool.close()

    def migrate_live(
        self,
        pool: ConnectionPool,
        move: Move,
        *,
        on_progress: Callable[[MigrationProgress], None],
        abort: threading.Event,
        uuid: str | None = None,
    ) -> MigrationResult:
        """One verified live migration over ``pool`` (its disks copied for class copy)."""
        began = time.monotonic()
        source, target = self._host(move.source), self._host(move.target)
        return self._migrate(move, began, pool, source, target, on_progress, abort, uuid)

    def _migrate(
        self,
        move: Move,
        began: float,
        pool: ConnectionPool,
        source: Host,
        target: Host,
        on_progress: Callable[[MigrationProgress], None],
        abort: threading.Event,
        uuid: str | None,
    ) -> MigrationResult:
        pool.get(source.name)  # raises: nothing started yet
        # The migration and its watcher on a connection of their own (see the pool's doc).
        with pool.dedicated(source.name) as conn:
            try:
                dom = conn.lookupByUUIDString(uuid) if uuid else conn.lookupByName(move.vm)
                found: str = dom.UUIDString()
                memory = move.memory or int(dom.maxMemory()) * 1024
            except libvirt.libvirtError as err:
                why = f"{move.vm} not found on {source.name}: {err}"
                return failed_before_start(move, began, why)
            try:
                pool.get(target.name)
            except (HostUnreachable, HostTimeout) as err:
                # Migrating to a host we cannot look at would leave the outcome unknowable.
                refused = f"not started, target {target.name} unreachable: {err}"
                return self._verify(move, began, pool, found, _Job(), refused, target_known=False)
            call = migration_call(self.desired, target)
            if move.migration_class is MigrationClass.COPY:
                call = copy_call(call, self.desired, move)
            job = self._run(move, dom, call, memory, on_progress, abort)
            if job.abandoned:
                pool.retire(conn)
        error: str | None = None
        if job.abort_reason is not None:
            error = f"aborted: {job.abort_reason}"
            if job.abort_error:
                error += f" (abortJob: {job.abort_error})"
        if job.error is not None:
            error = f"{error}; libvirt: {job.error}" if error else f"libvirt: {job.error}"
        if job.abandoned:
            error = f"{error}; libvirt had not ended the job after {self.settle_timeout:g}s"
        return self._verify(move, began, pool, found, job, error)

    # --- running --------------------------------------------------------------------------

    def _run(
        self,
        move: Move,
        dom: Any,
        call: MigrationCall,
        memory: int,
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

        tuning = self.desired.policy.spec.migration
        limit = time_limit(self.desired, memory)
        stall_limit = tuning.progress_timeout.total_seconds()
        reckoned: str | None = None
        if move.migration_class is MigrationClass.COPY:
            limit, reckoned = copy_time_limit(self.desired, move, memory)
            stall = tuning.copy_moves.progress_timeout
            stall_limit = stall.total_seconds() if stall is not None else stall_limit
        worker = threading.Thread(target=work, name=f"migrate {move.vm}", daemon=True)
        started = self.clock()
        worker.start()
        last_progress, least_remaining = started, -1
        aborted_at: float | None = None
        while not job.done.wait(self.poll_interval):
            now = self.clock()
            stats = self._stats(dom)
            if stats:
                job.last = stats
                remaining = int(stats.get("memory_remaining", 0))
                if stats.get("memory_total") and (
                    least_remaining < 0 or remaining < least_remaining
                ):
                    least_remaining, last_progress = remaining, now
                self._report(move.vm, stats, now - started, on_progress)
            if aborted_at is not None:
                if now - aborted_at > self.settle_timeout:
                    job.abandoned = True  # the worker ends when libvirt returns, on its own
                    break
                continue
            reason = None
            if abort.is_set():
                reason = "stopped on request"
            elif now - started > limit:
                reason = (
                    f"ran past its limit of {limit:g}s "
                    f"(timeoutPerGiB {tuning.timeout_per_gib.total_seconds():g}s "
                    f"x {max(1, math.ceil(memory / GIB))} GiB)"
                )
                if reckoned is not None:
                    reason = f"ran past its limit of {limit:g}s ({reckoned})"
            elif now - last_progress > stall_limit:
                if tuning.post_copy and not job.postcopy and stats.get("memory_total"):
                    job.postcopy, last_progress = True, now
                    self._start_postcopy(move.vm, dom)
                    continue
                reason = f"no progress for {stall_limit:g}s (progressTimeout)"
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
    ) -> None:
        disk_total = int(stats.get("disk_total", 0))
        disk_remaining = int(stats.get("disk_remaining", 0))
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
        )
        try:
            on_progress(progress)
        except Exception:  # a broken display must not leave a migration unwatched
            log.exception("progress callback failed for %s", vm)

    @staticmethod
    def _start_postcopy(vm: str, dom: Any) -> None:
        log.warning("%s: no progress in pre-copy, switching to post-copy", vm)
        try:
            dom.migrateStartPostCopy()
        except libvirt.libvirtError as err:
            log.warning("%s: post-copy could not start: %s", vm, err)

    # --- verifying ------------------------------------------------------------------------

    def _verify(
        self,
        move: Move,
        began: float,
        pool: ConnectionPool,
        uuid: str,
        job: _Job,
        error: str | None,
        *,
        target_known: bool = True,
    ) -> MigrationResult:
        notes: list[str] = []
        at_source = _look_on(pool, move.source, uuid)
        at_target = (
            _look_on(pool, move.target, uuid) if target_known else _Seen(error="not connected")
        )
        if at_target.error is not None:
            notes.append(f"could not look at target {move.target}: {at_target.error}")
        if at_source.error is not None:
            notes.append(f"could not look at source {move.source}: {at_source.error}")
        if (
            at_source.paused
            and at_source.reason not in _POSTCOPY_PAUSES
            and at_target.error is None
            and not at_target.active
        ):
            notes.append(self._resume(pool, uuid, move))
            at_source = _look_on(pool, move.source, uuid)
        if at_target.running and at_target.persistent and at_source.exists and not at_source.active:
            notes.append(self._undefine_leftover(pool, uuid, move))
            at_source = _look_on(pool, move.source, uuid)
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
            error = "; ".join([error, *notes])
        downtime, data = self._figures(pool, move.target, uuid, job, succeeded)
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
