"""The migrator's other paths without the lab: which way a move goes by its class, the
connections it opens when it has none of its own, the watch of a move that copies disks,
what the progress and the result say, and how it looks at a host whose connection broke.

The fake hosts and the scripted job are those of ``test_migrator_watch``; the disk copy and
the cold move themselves are tested on the lab (``test_disk_moves``), here only what reaches
them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import libvirt
import pytest

from reconciler.adapters.libvirt import cold_move, copy_move, live_move
from reconciler.adapters.libvirt import migrator as migrator_module
from reconciler.adapters.libvirt.calls import GIB
from reconciler.adapters.libvirt.connection import ConnectionSettings
from reconciler.adapters.libvirt.leftovers import Leftovers
from reconciler.adapters.libvirt.live_move import LiveMove, Watch
from reconciler.adapters.libvirt.migrator import LibvirtMigrator
from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.errors import HostUnreachable
from reconciler.model.desired import DesiredState
from reconciler.model.migration import MigrationProgress, MigrationResult
from reconciler.model.plan import Move
from reconciler.model.snapshot import MigrationClass
from tests.adapters.test_migrator_watch import (
    DONE,
    MOVE,
    UUID,
    Clock,
    Connection,
    Domain,
    Pool,
    error,
    fake_hosts,
    falling,
    migrate,
    stuck,
    tuned,
)
from tests.core.builders import desired as build_desired
from tests.core.builders import host

RESULT = MigrationResult(
    vm=MOVE.vm, source=MOVE.source, target=MOVE.target, succeeded=True, running_on=[MOVE.target]
)


class SweptLeftovers(Leftovers):
    def __init__(self) -> None:
        super().__init__()
        self.swept: list[ConnectionPool] = []

    def sweep(self, pool: ConnectionPool) -> None:
        self.swept.append(pool)


class OwnPool(ConnectionPool):
    """Stands for the pool a migrator without one opens: remembers what it was given."""

    made: list[OwnPool] = []

    def __init__(self, uris: dict[str, str], settings: ConnectionSettings | None = None) -> None:
        super().__init__(uris, settings)
        self.given = (dict(uris), settings)
        self.closed = False
        OwnPool.made.append(self)

    def close(self) -> None:
        self.closed = True
        super().close()


@pytest.fixture
def own_pools(monkeypatch: pytest.MonkeyPatch) -> list[OwnPool]:
    OwnPool.made = []
    monkeypatch.setattr(migrator_module, "ConnectionPool", OwnPool)
    return OwnPool.made


def _handed(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[tuple[Any, ...]]:
    """Replace ``module``'s ``name`` (live_copy, cold_move, discard_copy) by a recorder."""
    calls: list[tuple[Any, ...]] = []

    def record(*args: Any, **kwargs: Any) -> MigrationResult:
        calls.append((*args, kwargs))
        return RESULT

    monkeypatch.setattr(module, name, record)
    return calls


def test_a_live_copy_goes_to_its_mover_with_the_pool_the_leftovers_and_a_live_mover(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _handed(monkeypatch, copy_move, "live_copy")
    leftovers = SweptLeftovers()
    pool = Pool({})
    desired = tuned()
    migrator = LibvirtMigrator(desired, pool=pool, leftovers=leftovers)
    move = MOVE.model_copy(update={"migration_class": MigrationClass.COPY, "disks": ["vdb"]})
    stop = threading.Event()
    seen: list[MigrationProgress] = []
    result = migrator.migrate(move, on_progress=seen.append, abort=stop, uuid=UUID)
    assert result is RESULT
    assert leftovers.swept == [pool]  # volumes an earlier failure left are deleted first
    ((through, noted, live, what, target, kwargs),) = calls
    assert (through, noted, what, target) == (pool, leftovers, move, desired.cluster.spec.hosts[1])
    assert isinstance(live, LiveMove)
    assert (live.pool, live.desired, live.watch) == (pool, desired, migrator.watch)
    assert kwargs == {"on_progress": seen.append, "abort": stop, "uuid": UUID}


def test_a_cold_move_goes_to_its_mover_with_its_time_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _handed(monkeypatch, cold_move, "cold_move")
    leftovers = SweptLeftovers()
    pool = Pool({})
    desired = build_desired(
        [host("kvm-01"), host("kvm-02")], migration={"copy": {"timeoutPerGiB": "7s"}}
    )
    migrator = LibvirtMigrator(desired, pool=pool, leftovers=leftovers)
    move = MOVE.model_copy(
        update={"migration_class": MigrationClass.COLD, "disks": ["vdb"], "disk_bytes": 2 * GIB}
    )
    stop = threading.Event()
    seen: list[MigrationProgress] = []
    result = migrator.migrate(move, on_progress=seen.append, abort=stop, uuid=UUID)
    assert result is RESULT
    assert leftovers.swept == [pool]
    ((through, noted, what, kwargs),) = calls
    assert (through, noted, what) == (pool, leftovers, move)
    # copy.timeoutPerGiB 7s x 2 GiB of disks (a cold move sends no memory)
    assert kwargs == {"limit": 14.0, "on_progress": seen.append, "abort": stop, "uuid": UUID}


def test_a_migrator_without_connections_opens_both_hosts_with_its_settings_and_closes_them(
    monkeypatch: pytest.MonkeyPatch, own_pools: list[OwnPool]
) -> None:
    calls = _handed(monkeypatch, cold_move, "cold_move")
    settings = ConnectionSettings(connect_timeout=7)
    desired = tuned()
    migrator = LibvirtMigrator(desired, connection=settings, leftovers=SweptLeftovers())
    move = MOVE.model_copy(update={"migration_class": MigrationClass.COLD})
    migrator.migrate(move, on_progress=lambda p: None, abort=threading.Event())
    (opened,) = own_pools
    uris = {h.name: h.uri for h in desired.cluster.spec.hosts}
    assert opened.given == ({"kvm-01": uris["kvm-01"], "kvm-02": uris["kvm-02"]}, settings)
    assert calls[0][0] is opened
    assert opened.closed


def test_discarding_a_stopped_cold_copy_goes_through_the_commands_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _handed(monkeypatch, cold_move, "discard_copy")
    pool = Pool({})
    closed: list[bool] = []
    pool.close = lambda: closed.append(True)  # type: ignore[method-assign]
    migrator = LibvirtMigrator(tuned(), pool=pool)
    migrator.discard_copy("kvm-02", "web-1", uuid=UUID)
    assert calls == [(pool, migrator.leftovers, "kvm-02", UUID, {})]
    assert closed == []  # the command's connections are the command's to close


def test_discarding_without_connections_opens_the_one_host_and_closes_it(
    monkeypatch: pytest.MonkeyPatch, own_pools: list[OwnPool]
) -> None:
    calls = _handed(monkeypatch, cold_move, "discard_copy")
    settings = ConnectionSettings(connect_timeout=5)
    desired = tuned()
    migrator = LibvirtMigrator(desired, connection=settings)
    migrator.discard_copy("kvm-02", "web-1", uuid=UUID)
    (opened,) = own_pools
    assert opened.given == ({"kvm-02": desired.cluster.spec.hosts[1].uri}, settings)
    assert calls == [(opened, migrator.leftovers, "kvm-02", UUID, {})]
    assert opened.closed


def test_host_of_names_the_clusters_host() -> None:
    desired = tuned()
    assert LibvirtMigrator(desired).host_of("kvm-02") == desired.cluster.spec.hosts[1]


# --- a live move that copies its disks ---------------------------------------------------


def copy_desired(**copy: object) -> DesiredState:
    return build_desired(
        [host("kvm-01"), host("kvm-02")],
        migration={"timeoutPerGiB": "10s", "progressTimeout": "100s", "copy": copy},
    )


def migrate_copy(
    script: Sequence[dict[str, Any] | str],
    release: list[Domain],
    desired: DesiredState,
    *,
    disk_bytes: int = 0,
) -> tuple[MigrationResult, Domain]:
    """``LiveMove.migrate`` of a class-copy move (as ``live_copy`` calls it, volumes made)."""
    world, source, pool = fake_hosts(script, release)
    live = LiveMove(desired, pool, Watch(poll_interval=0.001, clock=Clock()))
    move = MOVE.model_copy(
        update={
            "migration_class": MigrationClass.COPY,
            "disks": ["vdb"],
            "disk_bytes": disk_bytes,
        }
    )
    target = desired.cluster.spec.hosts[1]
    result = live.migrate(
        move, target, on_progress=lambda p: None, abort=threading.Event(), uuid=UUID
    )
    return result, source


def test_a_copy_move_copies_the_named_disks(release: list[Domain]) -> None:
    result, source = migrate_copy([*falling(2), DONE], release, copy_desired(bandwidth=50))
    assert result.succeeded, result.error
    ((_, params, flags),) = source.called
    assert params[libvirt.VIR_MIGRATE_PARAM_MIGRATE_DISKS] == ["vdb"]
    assert params[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH] == 50
    assert flags & libvirt.VIR_MIGRATE_NON_SHARED_DISK


def test_a_copy_move_is_timed_by_its_memory_and_disks(release: list[Domain]) -> None:
    # copy.timeoutPerGiB 5s x (1 GiB of memory + 2 GiB of disk) = 15s
    result, source = migrate_copy(
        falling(60), release, copy_desired(timeoutPerGiB="5s"), disk_bytes=2 * GIB
    )
    assert source.aborts == [16]
    assert result.error is not None
    assert result.error.startswith(
        "aborted: ran past its limit of 15s (timeoutPerGiB 5s x 3 GiB of memory and disks)"
    )


def test_a_copy_move_stalls_by_its_own_progress_timeout(release: list[Domain]) -> None:
    result, source = migrate_copy(
        [*falling(2), *stuck(40)], release, copy_desired(progressTimeout="3s")
    )
    assert source.aborts == [6]
    assert result.error is not None
    assert result.error.startswith("aborted: no progress for 3s (progressTimeout)")


def test_without_its_own_progress_timeout_a_copy_move_stalls_by_the_general_one(
    release: list[Domain],
) -> None:
    desired = build_desired(
        [host("kvm-01"), host("kvm-02")],
        migration={"timeoutPerGiB": "100s", "progressTimeout": "4s"},
    )
    result, source = migrate_copy([*falling(2), *stuck(40)], release, desired)
    assert source.aborts == [7]
    assert result.error is not None
    assert result.error.startswith("aborted: no progress for 4s (progressTimeout)")


# --- what the watcher reports -----------------------------------------------------------


def test_progress_is_in_the_disk_phase_while_disk_data_remains(release: list[Domain]) -> None:
    readings: list[dict[str, Any] | str] = [
        {"disk_total": 8, "disk_remaining": 2, "disk_processed": 6, "memory_remaining": GIB},
        {"disk_total": 8, "disk_remaining": 1, "disk_processed": 7, "memory_remaining": GIB - 1},
        {"disk_total": 8, "disk_remaining": 0, "disk_processed": 8, "memory_remaining": GIB - 2},
        {"memory_remaining": GIB - 3},
        DONE,
    ]
    run = migrate(readings, release)
    assert [p.phase for p in run.progress] == ["disk", "disk", "memory", "memory"]
    assert [p.disk_total for p in run.progress] == [8, 8, 8, 0]
    assert [p.disk_processed for p in run.progress] == [6, 7, 8, 0]


def test_figures_a_reading_lacks_are_reported_as_zero(release: list[Domain]) -> None:
    run = migrate([{"memory_remaining": GIB}, DONE], release)
    (p,) = run.progress
    assert (p.data_total, p.data_processed, p.data_remaining, p.bytes_per_second) == (0, 0, 0, 0)
    assert (p.disk_total, p.disk_processed, p.phase) == (0, 0, "memory")


def test_figures_a_reading_has_are_reported_as_read(release: list[Domain]) -> None:
    reading = {
        "memory_remaining": GIB,
        "data_total": 30,
        "data_processed": 20,
        "data_remaining": 10,
        "memory_bps": 5,
    }
    run = migrate([reading, DONE], release)
    (p,) = run.progress
    assert (p.data_total, p.data_processed, p.data_remaining, p.bytes_per_second) == (
        30,
        20,
        10,
        5.0,
    )
    assert p.vm == "web-1"
    assert p.elapsed == 1.0  # one tick of the fake clock after the start


def test_a_stall_at_zero_remaining_memory_is_still_a_stall(release: list[Domain]) -> None:
    # the remaining memory reaches 0 and stays there: no new low, so no progress
    run = migrate(
        [*falling(1), *stuck(30, remaining=0)], release, desired=tuned(per_gib="1000s", stall="5s")
    )
    assert run.result.error is not None
    assert run.result.error.startswith("aborted: no progress for 5s (progressTimeout)")


def test_a_failed_migration_has_no_downtime_even_when_its_last_reading_had_one(
    release: list[Domain],
) -> None:
    run = migrate(
        [{"memory_remaining": GIB, "downtime": 9, "data_processed": 3}, "claimed"], release
    )
    assert not run.result.succeeded
    assert run.result.downtime_ms is None
    assert run.result.data_bytes == 3  # what was sent before it failed


def test_a_completed_job_without_a_type_is_not_taken_for_the_figures(
    release: list[Domain],
) -> None:
    def arrange(pool: Pool) -> None:
        target = pool.conns["kvm-02"]
        assert isinstance(target, Connection)
        target.dom.jobStats = lambda flags=0: {"downtime": 99}  # type: ignore[method-assign]

    run = migrate(
        [{"memory_remaining": GIB, "downtime": 4, "data_processed": 2}, DONE],
        release,
        arrange=arrange,
    )
    assert run.result.succeeded
    assert run.result.downtime_ms == 4  # the last reading's, not the untyped one's


@pytest.mark.parametrize(
    "failure",
    [
        error(libvirt.VIR_ERR_OPERATION_INVALID, "domain is not running"),
        HostUnreachable("kvm-02 stopped answering"),
    ],
)
def test_figures_that_cannot_be_read_after_a_success_leave_it_a_success(
    release: list[Domain], failure: Exception
) -> None:
    def arrange(pool: Pool) -> None:
        target = pool.conns["kvm-02"]
        assert isinstance(target, Connection)

        def completed(flags: int = 0) -> dict[str, Any]:
            raise failure

        target.dom.jobStats = completed  # type: ignore[method-assign]

    run = migrate([{"memory_remaining": GIB, "downtime": 4}, DONE], release, arrange=arrange)
    assert run.result.succeeded
    assert run.result.downtime_ms == 4


def test_the_guest_memory_is_read_from_libvirt_when_the_move_does_not_say(
    release: list[Domain],
) -> None:
    class Big(Domain):
        def maxMemory(self) -> int:  # noqa: N802 (libvirt's name; KiB)
            return 3 * GIB // 1024

    world, source, pool = fake_hosts(falling(60), release, source_type=Big)
    migrator = LibvirtMigrator(
        tuned(per_gib="10s", stall="100s"), pool=pool, poll_interval=0.001, clock=Clock()
    )
    result = migrator.migrate(
        MOVE.model_copy(update={"memory": 0}),
        on_progress=lambda p: None,
        abort=threading.Event(),
        uuid=UUID,
    )
    assert result.error is not None
    assert "limit of 30s (timeoutPerGiB 10s x 3 GiB)" in result.error


def test_a_domain_is_found_by_its_uuid_when_given_not_by_its_name(release: list[Domain]) -> None:
    # the VM's name is not known to the host (renamed since): its UUID still finds it
    world, source, pool = fake_hosts([DONE], release)
    migrator = LibvirtMigrator(tuned(), pool=pool, poll_interval=0.001, clock=Clock())
    move: Move = MOVE.model_copy(update={"vm": "web-1-renamed"})
    result = migrator.migrate(move, on_progress=lambda p: None, abort=threading.Event(), uuid=UUID)
    assert result.succeeded, result.error
    assert result.running_on == ["kvm-02"]


def test_the_migration_runs_in_a_daemon_thread_named_for_its_vm(release: list[Domain]) -> None:
    seen: list[tuple[str, bool]] = []

    class Watched(Domain):
        def migrateToURI3(self, uri: str, params: dict[str, Any], flags: int) -> int:  # noqa: N802
            me = threading.current_thread()
            seen.append((me.name, me.daemon))
            return super().migrateToURI3(uri, params, flags)

    world, source, pool = fake_hosts([DONE], release, source_type=Watched)
    migrator = LibvirtMigrator(tuned(), pool=pool, poll_interval=0.001, clock=Clock())
    migrator.migrate(MOVE, on_progress=lambda p: None, abort=threading.Event(), uuid=UUID)
    # daemon: a libvirt call that never returns does not keep the process from exiting
    assert seen == [("migrate web-1", True)]


def test_the_result_log_carries_how_long_libvirts_call_took(
    release: list[Domain], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=live_move.log.name)
    run = migrate([*falling(2), DONE], release)
    (record,) = (r for r in caplog.records if hasattr(r, "libvirt_seconds"))
    seconds = record.libvirt_seconds
    assert isinstance(seconds, float)
    assert 0 <= seconds < 30
    assert getattr(record, "migration", None) == run.result


def test_the_switch_to_post_copy_is_logged_for_its_vm(
    release: list[Domain], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=live_move.log.name)
    migrate([*falling(2), *stuck(8), DONE], release, desired=tuned(stall="3s", post_copy=True))
    assert "web-1: no progress in pre-copy, switching to post-copy" in caplog.messages


def test_the_result_takes_the_time_the_move_took(release: list[Domain]) -> None:
    run = migrate([DONE], release)
    assert 0 <= run.result.seconds < 2.5  # real time of a fake migration: milliseconds


# --- looking at the hosts afterwards ----------------------------------------------------


def test_a_target_that_cannot_be_reached_is_named_in_the_refusal(release: list[Domain]) -> None:
    def arrange(pool: Pool) -> None:
        pool.conns["kvm-02"] = HostUnreachable("kvm-02: connection refused")

    run = migrate([DONE], release, arrange=arrange)
    assert run.result.error == (
        "not started, target kvm-02 unreachable: kvm-02: connection refused; "
        "could not look at target kvm-02: not connected"
    )
    assert run.source.called == []


def test_a_broken_connection_is_replaced_once_and_the_look_repeated(
    release: list[Domain],
) -> None:
    pools: list[Pool] = []

    def arrange(pool: Pool) -> None:
        pools.append(pool)
        target = pool.conns["kvm-02"]
        assert isinstance(target, Connection)
        target.alive = False
        target.fail = error(libvirt.VIR_ERR_SYSTEM_ERROR, "end of file while reading data")

    run = migrate([DONE], release, arrange=arrange)
    assert run.result.succeeded, run.result.error
    assert pools[0].replaced == ["kvm-02"]
    assert run.result.running_on == ["kvm-02"]


class DeadPool(Pool):
    """A host whose every new connection is as dead as the last."""

    def broken(self, host: str, conn: Any) -> None:
        self.replaced.append(host)
        conn.fail = error(libvirt.VIR_ERR_SYSTEM_ERROR, f"{host}: end of file")


def test_a_host_whose_connection_stays_broken_is_tried_twice_and_reported(
    release: list[Domain],
) -> None:
    world, source, pool = fake_hosts([DONE], release, pool_type=DeadPool)
    target = pool.conns["kvm-02"]
    assert isinstance(target, Connection)
    migrator = LibvirtMigrator(tuned(), pool=pool, poll_interval=0.001, clock=Clock())
    target.alive = False
    target.fail = error(libvirt.VIR_ERR_SYSTEM_ERROR, "kvm-02: end of file")
    result = migrator.migrate(MOVE, on_progress=lambda p: None, abort=threading.Event(), uuid=UUID)
    assert not result.succeeded
    assert pool.replaced == ["kvm-02", "kvm-02"]
    assert result.error is not None
    assert "could not look at target kvm-02: kvm-02: end of file" in result.error


def test_after_resuming_a_vm_left_paused_the_result_says_it_runs_on_the_source(
    release: list[Domain],
) -> None:
    run = migrate(["failed-paused"], release)
    assert not run.result.succeeded
    assert run.result.running_on == ["kvm-01"]
    assert run.result.paused_on == []


def test_a_source_that_cannot_be_reached_afterwards_is_named_and_the_move_not_called_done(
    release: list[Domain],
) -> None:
    pools: list[Pool] = []

    class Vanishing(Domain):
        """Migrates, then its host stops answering before the migrator looks."""

        def migrateToURI3(self, uri: str, params: dict[str, Any], flags: int) -> int:  # noqa: N802
            try:
                return super().migrateToURI3(uri, params, flags)
            finally:
                pools[0].conns["kvm-01"] = HostUnreachable("kvm-01: no route to host")

    world, source, pool = fake_hosts([DONE], release, source_type=Vanishing)
    pools.append(pool)
    migrator = LibvirtMigrator(tuned(), pool=pool, poll_interval=0.001, clock=Clock())
    result = migrator.migrate(MOVE, on_progress=lambda p: None, abort=threading.Event(), uuid=UUID)
    # it may still be defined there: not a success, though it runs on the target
    assert not result.succeeded
    assert result.running_on == ["kvm-02"]
    assert result.error == (
        "the migration ended without the VM running on the target only; "
        "could not look at source kvm-01: kvm-01: no route to host"
    )


def test_a_reading_with_disks_but_no_remaining_figure_is_in_the_memory_phase(
    release: list[Domain],
) -> None:
    run = migrate([{"disk_total": 8, "memory_remaining": GIB}, DONE], release)
    assert [p.phase for p in run.progress] == ["memory"]


def test_a_leftover_definition_that_cannot_be_removed_keeps_the_move_from_being_done(
    release: list[Domain],
) -> None:
    class Stubborn(Domain):
        def undefine(self) -> int:
            self.world.calls.append(f"undefine@{self.host}")
            raise error(libvirt.VIR_ERR_OPERATION_INVALID, "cannot undefine: in use")

    world, source, pool = fake_hosts(["leftover"], release, source_type=Stubborn)
    migrator = LibvirtMigrator(tuned(), pool=pool, poll_interval=0.001, clock=Clock())
    result = migrator.migrate(MOVE, on_progress=lambda p: None, abort=threading.Event(), uuid=UUID)
    assert world.calls == ["undefine@kvm-01"]
    assert not result.succeeded  # defined on both hosts: not where it should be only
    assert result.running_on == ["kvm-02"]
    assert result.error == (
        "the migration ended without the VM running on the target only; its old definition "
        "on kvm-01 could not be removed: cannot undefine: in use"
    )


# --- a move that cannot start is a result, never an exception ---------------------------


@pytest.mark.parametrize("klass", [MigrationClass.SHARED, MigrationClass.COPY, MigrationClass.COLD])
def test_a_source_that_does_not_answer_is_a_move_not_started_for_every_class(
    release: list[Domain], klass: MigrationClass
) -> None:
    world, source, pool = fake_hosts([DONE], release)
    pool.conns["kvm-01"] = HostUnreachable("kvm-01: connection refused")
    migrator = LibvirtMigrator(tuned(), pool=pool, poll_interval=0.001, clock=Clock())
    move = MOVE.model_copy(update={"migration_class": klass, "disks": ["vdb"]})
    result = migrator.migrate(move, on_progress=lambda p: None, abort=threading.Event(), uuid=UUID)
    assert not result.succeeded
    assert not result.aborted
    assert result.error is not None
    assert result.error.startswith("not started")
    assert "kvm-01: connection refused" in result.error
    assert (result.running_on, result.paused_on) == ([], [])
    assert source.called == []
    assert world.calls == []


def test_a_dedicated_connection_that_cannot_be_opened_is_a_move_not_started(
    release: list[Domain],
) -> None:
    class Unopenable(Pool):
        @contextlib.contextmanager
        def dedicated(self, host: str) -> Iterator[Any]:
            raise HostUnreachable(f"{host}: no route to host")
            yield

    world, source, pool = fake_hosts([DONE], release, pool_type=Unopenable)
    migrator = LibvirtMigrator(tuned(), pool=pool, poll_interval=0.001, clock=Clock())
    result = migrator.migrate(MOVE, on_progress=lambda p: None, abort=threading.Event(), uuid=UUID)
    assert result.error == "not started, source kvm-01 unreachable: kvm-01: no route to host"
    assert source.called == []
