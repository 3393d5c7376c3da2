"""The migrator without the lab: a fake domain whose job statistics follow a script and a fake
clock, so the aborts on ``timeoutPerGiB`` and on a stall, the switch to post-copy and a job
libvirt does not end are decided in milliseconds, and so is what the migrator makes of what both
hosts show afterwards. The lab tests stay the truth for what libvirt does; these pin down what
the migrator decides from what it reads.

One poll of the watcher is one step of the script and one ``TICK`` of the clock.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import libvirt

from reconciler.adapters.libvirt.calls import GIB, migration_call, migration_uri, time_limit
from reconciler.adapters.libvirt.connection import ConnectionSettings
from reconciler.adapters.libvirt.live_move import Watch
from reconciler.adapters.libvirt.migrator import LibvirtMigrator
from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.errors import HostUnreachable
from reconciler.model.base import HostName, VmName
from reconciler.model.cluster import Defaults, Migration
from reconciler.model.desired import DesiredState
from reconciler.model.migration import MigrationProgress, MigrationResult
from reconciler.model.plan import Move, Reason
from tests.core.builders import desired as build_desired
from tests.core.builders import host

TICK = 1.0
UUID = "6f1c1d5e-0000-4000-8000-000000000001"
MOVE = Move(
    vm=VmName("web-1"),
    source=HostName("kvm-01"),
    target=HostName("kvm-02"),
    memory=GIB,
    vcpus=1,
    reason=Reason.BALANCE,
    detail="test",
    wave=0,
)
DONE = "done"
"""A script step: libvirt finishes the migration (the VM now runs on the target)."""


def error(code: int, text: str) -> libvirt.libvirtError:
    # libvirtError takes its text from the thread's last libvirt error when there is one (an
    # earlier test's call on a closed connection, say), not from its argument
    libvirt.virResetLastError()
    err = libvirt.libvirtError(text)
    err.err = (code, 0, text, 2, None, None, None, 0, 0)
    return err


class Clock:
    """Fake seconds: every reading is one tick later than the last."""

    def __init__(self, tick: float = TICK) -> None:
        self.tick = tick
        self.now = 100.0 - tick  # not 0: elapsed time is a difference of two readings

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


@dataclass
class World:
    """Where the VM is defined and running: the truth both hosts report afterwards."""

    defined: set[str] = field(default_factory=lambda: {"kvm-01"})
    running: set[str] = field(default_factory=lambda: {"kvm-01"})
    paused: dict[str, int] = field(default_factory=dict)
    """Hosts where it is paused, with libvirt's reason."""
    calls: list[str] = field(default_factory=list)
    """``resume``/``undefine`` calls, as ``call@host``."""


def moved(world: World) -> libvirt.libvirtError | None:
    world.defined, world.running = {"kvm-02"}, {"kvm-02"}
    return None


def moved_leaving_definition(world: World) -> libvirt.libvirtError | None:
    """Migrated, but the source kept its (inactive) definition."""
    world.defined, world.running = {"kvm-01", "kvm-02"}, {"kvm-02"}
    return None


def failed_paused(world: World) -> libvirt.libvirtError | None:
    """Pre-copy failed at the switch-over: the VM is left paused on the source."""
    world.running = set()
    world.paused = {"kvm-01": libvirt.VIR_DOMAIN_PAUSED_MIGRATION}
    return error(libvirt.VIR_ERR_OPERATION_FAILED, "migration failed at switch-over")


def failed_in_postcopy(world: World) -> libvirt.libvirtError | None:
    """Post-copy failed: its memory is split over both hosts, paused on both."""
    world.running = set()
    world.defined = {"kvm-01", "kvm-02"}
    world.paused = {
        "kvm-01": libvirt.VIR_DOMAIN_PAUSED_POSTCOPY_FAILED,
        "kvm-02": libvirt.VIR_DOMAIN_PAUSED_POSTCOPY_FAILED,
    }
    return error(libvirt.VIR_ERR_OPERATION_FAILED, "post-copy failed")


def moved_with_an_error(world: World) -> libvirt.libvirtError | None:
    """Migrated, yet the call raised (the confirm step failed after the switch-over)."""
    moved(world)
    return error(libvirt.VIR_ERR_OPERATION_FAILED, "late error")


def claimed_but_stayed(world: World) -> libvirt.libvirtError | None:
    """The call returned without error, yet the VM still runs on the source only."""
    return None


def postcopy_failed_target_lost(world: World) -> libvirt.libvirtError | None:
    """Post-copy failed and the target lost its half: paused on the source alone."""
    world.running, world.defined = set(), {"kvm-01"}
    world.paused = {"kvm-01": libvirt.VIR_DOMAIN_PAUSED_POSTCOPY_FAILED}
    return error(libvirt.VIR_ERR_OPERATION_FAILED, "post-copy failed")


def moved_transient(world: World) -> libvirt.libvirtError | None:
    """Runs on the target, but defined nowhere (the definition did not move)."""
    world.defined, world.running = set(), {"kvm-02"}
    return None


def moved_source_still_paused(world: World) -> libvirt.libvirtError | None:
    """Runs on the target, yet a paused copy remains on the source."""
    world.defined, world.running = {"kvm-01", "kvm-02"}, {"kvm-02"}
    world.paused = {"kvm-01": libvirt.VIR_DOMAIN_PAUSED_POSTCOPY}
    return None


ENDINGS = {
    "claimed": claimed_but_stayed,
    "postcopy-target-lost": postcopy_failed_target_lost,
    "transient": moved_transient,
    "source-paused": moved_source_still_paused,
    "done": moved,
    "done-late-error": moved_with_an_error,
    "leftover": moved_leaving_definition,
    "failed-paused": failed_paused,
    "failed-postcopy": failed_in_postcopy,
}


class Domain:
    """The VM as one host's connection sees it; on the source it runs the scripted job."""

    def __init__(
        self,
        world: World,
        host: str,
        script: Sequence[dict[str, Any] | str] = (),
        *,
        abort_ends_job: bool = True,
    ) -> None:
        self.world, self.host = world, host
        self.script = list(script)
        self.abort_ends_job = abort_ends_job
        self.polls = 0
        self.aborts: list[int] = []
        """The poll at which each ``abortJob`` came."""
        self.postcopy: list[int] = []
        """The poll at which each ``migrateStartPostCopy`` came."""
        self.ended = threading.Event()
        self.outcome: libvirt.libvirtError | None = None
        self.called: list[tuple[str, dict[str, Any], int]] = []

    def UUIDString(self) -> str:  # noqa: N802 (libvirt's names)
        return UUID

    def maxMemory(self) -> int:  # noqa: N802
        return GIB // 1024

    def migrateToURI3(self, uri: str, params: dict[str, Any], flags: int) -> int:  # noqa: N802
        self.called.append((uri, params, flags))
        self.ended.wait()
        if self.outcome is not None:
            raise self.outcome
        return 0

    def jobStats(self, flags: int = 0) -> dict[str, Any]:  # noqa: N802
        if flags:  # the target's completed job, read after a success
            return {"type": libvirt.VIR_DOMAIN_JOB_COMPLETED, "downtime": 12, "data_processed": 7}
        if self.ended.is_set():
            raise error(libvirt.VIR_ERR_OPERATION_INVALID, "no job is active on the domain")
        step = self.script[min(self.polls, len(self.script) - 1)]
        self.polls += 1
        if isinstance(step, str):
            self.outcome = ENDINGS[step](self.world)
            self.ended.set()
            return {"type": libvirt.VIR_DOMAIN_JOB_NONE}
        assert isinstance(step, dict)
        stats = {"type": libvirt.VIR_DOMAIN_JOB_UNBOUNDED, "memory_total": GIB, **step}
        if stats["type"] is None:  # a reading without a type
            del stats["type"]
        return stats

    def abortJob(self) -> int:  # noqa: N802
        self.aborts.append(self.polls)
        if self.abort_ends_job:
            self.outcome = error(libvirt.VIR_ERR_OPERATION_ABORTED, "operation aborted by client")
            self.ended.set()
        return 0

    def migrateStartPostCopy(self, flags: int = 0) -> int:  # noqa: N802
        self.postcopy.append(self.polls)
        return 0

    def state(self) -> tuple[int, int]:
        if self.host in self.world.running:
            return libvirt.VIR_DOMAIN_RUNNING, 1
        if self.host in self.world.paused:
            return libvirt.VIR_DOMAIN_PAUSED, self.world.paused[self.host]
        return libvirt.VIR_DOMAIN_SHUTOFF, 0

    def isActive(self) -> int:  # noqa: N802
        return int(self.host in self.world.running or self.host in self.world.paused)

    def resume(self) -> int:
        self.world.calls.append(f"resume@{self.host}")
        del self.world.paused[self.host]
        self.world.running.add(self.host)
        return 0

    def undefine(self) -> int:
        self.world.calls.append(f"undefine@{self.host}")
        self.world.defined.discard(self.host)
        return 0

    def isPersistent(self) -> int:  # noqa: N802
        return int(self.host in self.world.defined)


class Connection:
    def __init__(self, world: World, host: str, dom: Domain) -> None:
        self.world, self.host, self.dom = world, host, dom
        self.lookups = 0
        self.alive = True
        self.fail: libvirt.libvirtError | None = None
        """Raised by the next lookup (then forgotten)."""

    def lookupByUUIDString(self, uuid: str) -> Domain:  # noqa: N802
        self.lookups += 1
        if self.fail is not None:
            err, self.fail = self.fail, None
            raise err
        if uuid != UUID or self.host not in (
            self.world.defined | self.world.running | set(self.world.paused)
        ):
            raise error(libvirt.VIR_ERR_NO_DOMAIN, f"no domain with uuid {uuid}")
        return self.dom

    def lookupByName(self, name: str) -> Domain:  # noqa: N802
        if name != MOVE.vm:
            raise error(libvirt.VIR_ERR_NO_DOMAIN, f"no domain named {name}")
        return self.lookupByUUIDString(UUID)

    def isAlive(self) -> int:  # noqa: N802
        return int(self.alive)

    def close(self) -> int:
        return 0


class Pool(ConnectionPool):
    """The command's connections, to fake hosts."""

    def __init__(self, conns: dict[str, Connection]) -> None:
        super().__init__({name: f"test:///{name}" for name in conns})
        self.conns: dict[str, Connection | Exception] = dict(conns)
        self.replaced: list[str] = []
        self.own: dict[str, Connection] = {}
        """Connections ``dedicated`` lends, by host; the host's shared one where none is set."""
        self.lent: list[str] = []
        self.retired_conns: list[Any] = []

    def get(self, host: str) -> Any:
        conn = self.conns[host]
        if isinstance(conn, Exception):
            raise conn
        return conn

    @contextlib.contextmanager
    def dedicated(self, host: str) -> Iterator[Any]:
        self.lent.append(host)
        yield self.own.get(host) or self.get(host)

    def retire(self, conn: Any) -> None:
        self.retired_conns.append(conn)

    def broken(self, host: str, conn: Any) -> None:
        """A new connection replaces one that broke."""
        self.replaced.append(host)
        conn.alive = True


@dataclass
class Run:
    result: MigrationResult
    source: Domain
    progress: list[MigrationProgress]


def tuned(*, per_gib: str = "100s", stall: str = "5s", post_copy: bool = False) -> DesiredState:
    return build_desired(
        [host("kvm-01"), host("kvm-02")],
        migration={"timeoutPerGiB": per_gib, "progressTimeout": stall, "postCopy": post_copy},
    )


def fake_hosts(
    script: Sequence[dict[str, Any] | str],
    release: list[Domain],
    *,
    source_type: type[Domain] = Domain,
    pool_type: type[Pool] = Pool,
    abort_ends_job: bool = True,
) -> tuple[World, Domain, Pool]:
    """The VM on kvm-01 running ``script`` when migrated, kvm-02 empty, the pool over both."""
    world = World()
    source = source_type(world, "kvm-01", script, abort_ends_job=abort_ends_job)
    release.append(source)
    pool = pool_type(
        {
            "kvm-01": Connection(world, "kvm-01", source),
            "kvm-02": Connection(world, "kvm-02", Domain(world, "kvm-02")),
        }
    )
    return world, source, pool


def migrate(
    script: Sequence[dict[str, Any] | str],
    release: list[Domain],
    *,
    desired: DesiredState | None = None,
    memory: int = GIB,
    abort_ends_job: bool = True,
    settle: float = 3.0,
    stop: threading.Event | None = None,
    tick: float = TICK,
    uuid: str | None = UUID,
    arrange: Callable[[Pool], None] = lambda pool: None,
) -> Run:
    world, source, pool = fake_hosts(script, release, abort_ends_job=abort_ends_job)
    arrange(pool)
    migrator = LibvirtMigrator(
        desired or tuned(),
        pool=pool,
        poll_interval=0.001,
        settle_timeout=settle,
        clock=Clock(tick),
    )
    progress: list[MigrationProgress] = []
    result = migrator.migrate(
        MOVE.model_copy(update={"memory": memory}),
        on_progress=progress.append,
        abort=stop or threading.Event(),
        uuid=uuid,
    )
    return Run(result, source, progress)


def falling(steps: int, start: int = GIB) -> list[dict[str, Any]]:
    """Job readings whose remaining memory falls at every poll."""
    return [
        {"memory_remaining": start - i * (GIB // 64), "data_processed": i, "data_total": GIB}
        for i in range(steps)
    ]


def stuck(steps: int, remaining: int = GIB) -> list[dict[str, Any]]:
    """Job readings that never reach a new low of remaining memory (after ``falling``)."""
    return [{"memory_remaining": remaining} for _ in range(steps)]


def test_a_migration_that_keeps_progressing_within_its_limit_succeeds(
    release: list[Domain],
) -> None:
    run = migrate([*falling(5), DONE], release)
    assert run.result.succeeded, run.result.error
    assert run.result.running_on == ["kvm-02"]
    assert run.source.aborts == []
    assert [p.data_processed for p in run.progress] == [0, 1, 2, 3, 4]
    assert run.result.downtime_ms == 12


def test_the_time_limit_is_timeout_per_gib_times_the_guest_memory_rounded_up() -> None:
    desired = tuned(per_gib="10s")
    assert time_limit(desired, 1) == 10
    assert time_limit(desired, GIB) == 10
    assert time_limit(desired, GIB + 1) == 20
    assert time_limit(desired, 0) == 10


def test_a_migration_past_timeout_per_gib_is_aborted_at_the_first_poll_beyond_it(
    release: list[Domain],
) -> None:
    # progressing all the time, so only the time limit can stop it: 10s for 1 GiB; at 10s it
    # is still within (the limit is inclusive), the first poll after 10s aborts it
    run = migrate(falling(60), release, desired=tuned(per_gib="10s", stall="100s"))
    assert run.source.aborts == [11]
    assert run.result.aborted
    assert not run.result.succeeded
    assert run.result.error is not None
    assert run.result.error.startswith(
        "aborted: ran past its limit of 10s (timeoutPerGiB 10s x 1 GiB)"
    )
    assert run.result.running_on == ["kvm-01"]


def test_the_time_limit_grows_with_the_guest_memory(release: list[Domain]) -> None:
    run = migrate(
        falling(60), release, desired=tuned(per_gib="10s", stall="100s"), memory=2 * GIB + 1
    )
    assert run.source.aborts == [31]
    assert run.result.error is not None
    assert "limit of 30s (timeoutPerGiB 10s x 3 GiB)" in run.result.error


def test_a_stalled_migration_is_aborted_after_progress_timeout(release: list[Domain]) -> None:
    # the remaining memory falls twice, then stays: progress was last seen at the second poll
    # (at 2s); 5s without progress is still allowed, the first poll after it aborts
    run = migrate([*falling(2), *stuck(30)], release, desired=tuned(stall="5s"))
    assert run.source.aborts == [8]
    assert run.source.postcopy == []
    assert run.result.aborted
    assert run.result.error is not None
    assert run.result.error.startswith("aborted: no progress for 5s (progressTimeout)")
    assert run.result.running_on == ["kvm-01"]


def test_remaining_memory_that_rises_again_is_no_progress(release: list[Domain]) -> None:
    # dirtied pages make the remaining memory climb back: only a new low counts as progress
    rising = [{"memory_remaining": GIB // 2 + i} for i in range(30)]
    run = migrate([{"memory_remaining": GIB // 4}, *rising], release, desired=tuned(stall="5s"))
    assert run.source.aborts == [7]


def test_a_reading_without_memory_figures_is_no_progress(release: list[Domain]) -> None:
    # a job that has not begun to copy reports no memory_total: the stall clock runs from the
    # start, and without figures there is nothing post-copy could finish
    blank = [{"memory_total": 0} for _ in range(30)]
    run = migrate(blank, release, desired=tuned(stall="5s", post_copy=True))
    assert run.source.aborts == [6]
    assert run.source.postcopy == []


def test_a_stall_switches_to_post_copy_once_when_the_policy_allows_it(
    release: list[Domain],
) -> None:
    # stalls at 2s: post-copy at the first poll past 5s of no progress; the migration then
    # finishes on the target
    run = migrate(
        [*falling(2), *stuck(6), *falling(3, start=GIB // 4), DONE],
        release,
        desired=tuned(stall="5s", post_copy=True),
    )
    assert run.source.postcopy == [8]
    assert run.source.aborts == []
    assert run.result.succeeded, run.result.error
    assert not run.result.aborted


def test_past_the_switch_to_post_copy_nothing_is_aborted(release: list[Domain]) -> None:
    # post-copy started at 7s (the 8th poll): from then on libvirt cannot abort the job (the
    # VM runs on the target with part of its memory on the source), so the watcher waits for
    # libvirt to end it, up to the time limit (10s) and the settle time (3s), then looks
    run = migrate(
        [*falling(2), *stuck(40)],
        release,
        desired=tuned(per_gib="10s", stall="5s", post_copy=True),
        settle=3.0,
    )
    assert run.source.postcopy == [8]
    assert run.source.aborts == []
    assert run.source.polls == 14
    assert run.result.post_copy
    assert not run.result.aborted
    assert run.result.error is not None
    assert "libvirt had not ended the job after 3s" in run.result.error


def test_a_job_libvirt_does_not_end_after_the_abort_is_abandoned_after_the_settle_time(
    release: list[Domain],
) -> None:
    run = migrate(stuck(40), release, desired=tuned(stall="2s"), abort_ends_job=False, settle=3.0)
    # aborted at the 4th poll (3s without progress), then 3s of waiting are allowed; the
    # first poll past them gives up and looks at both hosts
    assert run.source.aborts == [4]
    assert run.source.polls == 8
    assert not run.result.succeeded
    assert run.result.error is not None
    assert "no progress for 2s (progressTimeout)" in run.result.error
    assert run.result.error.split("; ")[1] == "libvirt had not ended the job after 3s"
    assert run.result.running_on == ["kvm-01"]


def test_the_migration_and_its_watcher_run_on_a_connection_of_their_own(
    release: list[Domain],
) -> None:
    """Calls on a connection where a job is being read wait for that reading (100-250 ms near a
    migration's end): the next move's intent and the looks must not share it."""
    lent: dict[str, Connection] = {}

    def arrange(pool: Pool) -> None:
        shared = pool.get("kvm-01")
        lent["kvm-01"] = pool.own["kvm-01"] = Connection(shared.world, "kvm-01", shared.dom)

    run = migrate([*falling(3), DONE], release, arrange=arrange)
    assert run.result.succeeded, run.result.error
    assert lent["kvm-01"].lookups == 1  # the domain migrated and watched was found there
    assert run.source.called, "migrateToURI3 was called"


def test_a_connection_with_a_migration_libvirt_did_not_end_is_not_lent_again(
    release: list[Domain],
) -> None:
    pools: list[Pool] = []
    migrate(
        stuck(40),
        release,
        desired=tuned(stall="2s"),
        abort_ends_job=False,
        settle=3.0,
        arrange=pools.append,
    )
    assert pools[0].lent == ["kvm-01"]
    assert pools[0].retired_conns == [pools[0].get("kvm-01")]


def test_a_migration_libvirt_ended_leaves_its_connection_to_the_next(
    release: list[Domain],
) -> None:
    pools: list[Pool] = []
    run = migrate([*falling(2), DONE], release, arrange=pools.append)
    assert run.result.succeeded, run.result.error
    assert pools[0].lent == ["kvm-01"]
    assert pools[0].retired_conns == []


def test_a_stop_request_aborts_the_running_migration(release: list[Domain]) -> None:
    stop = threading.Event()
    stop.set()
    run = migrate(falling(30), release, stop=stop)
    assert run.source.aborts == [1]
    assert run.result.error is not None
    assert run.result.error.startswith("aborted: stopped on request")
    assert run.result.aborted


def test_a_failing_abort_is_reported_with_the_abort_reason(release: list[Domain]) -> None:
    class Stubborn(Domain):
        def abortJob(self) -> int:  # noqa: N802
            super().abortJob()
            raise error(libvirt.VIR_ERR_OPERATION_INVALID, "no job to abort")

    world = World()
    source = Stubborn(world, "kvm-01", stuck(30), abort_ends_job=True)
    release.append(source)
    pool = Pool(
        {
            "kvm-01": Connection(world, "kvm-01", source),
            "kvm-02": Connection(world, "kvm-02", Domain(world, "kvm-02")),
        }
    )
    migrator = LibvirtMigrator(tuned(stall="2s"), pool=pool, poll_interval=0.001, clock=Clock())
    result = migrator.migrate(MOVE, on_progress=lambda _: None, abort=threading.Event())
    assert result.error is not None
    assert result.error.startswith(
        "aborted: no progress for 2s (progressTimeout) (abortJob: no job to abort)"
    )


# --- what both hosts show afterwards ---------------------------------------------------------


def test_a_vm_left_paused_on_the_source_is_resumed_there_when_the_target_does_not_run_it(
    release: list[Domain],
) -> None:
    run = migrate([*falling(2), "failed-paused"], release)
    assert run.source.world.calls == ["resume@kvm-01"]
    assert not run.result.succeeded
    assert run.result.running_on == ["kvm-01"]
    assert run.result.paused_on == []
    assert run.result.error == (
        "libvirt: migration failed at switch-over; "
        "was left paused on kvm-01 and has been resumed there"
    )


def test_a_vm_paused_by_a_failed_post_copy_is_never_resumed_on_the_source(
    release: list[Domain],
) -> None:
    # its memory is on both hosts: resuming the source would run it twice
    run = migrate([*falling(2), "failed-postcopy"], release)
    assert run.source.world.calls == []
    assert not run.result.succeeded
    assert run.result.running_on == []
    assert run.result.paused_on == ["kvm-01", "kvm-02"]
    assert run.result.downtime_ms is None


def test_a_definition_left_on_the_source_after_the_move_is_removed(
    release: list[Domain],
) -> None:
    run = migrate([*falling(2), "leftover"], release)
    assert run.source.world.calls == ["undefine@kvm-01"]
    assert run.result.succeeded, run.result.error
    assert run.result.error is None
    assert run.source.world.defined == {"kvm-02"}


def test_libvirt_reporting_an_error_after_the_vm_moved_is_a_success(
    release: list[Domain],
) -> None:
    # the job's error came after the switch-over: where the VM runs decides, not the exception
    run = migrate([*falling(2), "done-late-error"], release)
    assert run.result.succeeded
    assert run.result.error is None
    assert not run.result.aborted


def test_an_unknown_host_is_a_move_not_started_that_says_to_plan_again() -> None:
    migrator = LibvirtMigrator(tuned(), pool=Pool({}), clock=Clock())
    result = migrator.migrate(
        MOVE.model_copy(update={"target": HostName("kvm-09")}),
        on_progress=lambda _: None,
        abort=threading.Event(),
    )
    assert not result.succeeded
    assert result.error == (
        "not started: host kvm-09 is not in cluster test "
        "(plan again against the current cluster.yaml)"
    )
    assert result.running_on == []


def test_a_vm_not_on_the_source_is_refused_before_anything_starts() -> None:
    world = World(defined=set(), running=set())
    pool = Pool(
        {
            "kvm-01": Connection(world, "kvm-01", Domain(world, "kvm-01")),
            "kvm-02": Connection(world, "kvm-02", Domain(world, "kvm-02")),
        }
    )
    result = LibvirtMigrator(tuned(), pool=pool, clock=Clock()).migrate(
        MOVE, on_progress=lambda _: None, abort=threading.Event(), uuid=UUID
    )
    assert not result.succeeded
    assert result.error is not None
    assert result.error.startswith("web-1 not found on kvm-01: no domain with uuid")
    assert result.running_on == []
    assert 0 <= result.seconds < 2
    assert result.seconds == round(result.seconds, 3)


# --- the call ---------------------------------------------------------------------------------


def test_the_migration_uri_template_takes_the_address_or_else_the_name() -> None:
    with_address = host("kvm-02").model_copy(update={"address": "10.0.0.2"})
    assert migration_uri(None, with_address) is None
    assert migration_uri("tcp://{address}:49152/{name}", with_address) == (
        "tcp://10.0.0.2:49152/kvm-02"
    )
    assert migration_uri("tcp://{address}", host("kvm-02")) == "tcp://kvm-02"


def test_the_call_has_the_target_uri_listen_address_bandwidth_and_flags_of_the_policy() -> None:
    target = host("kvm-02").model_copy(
        update={
            "address": "10.0.0.2",
            "migration": Migration(uri="tcp://{address}", bandwidth=300),
        }
    )
    desired = build_desired(
        [host("kvm-01"), target], migration={"autoConverge": True, "postCopy": True}
    )
    call = migration_call(desired, target)
    assert call.dest_uri == target.uri
    assert call.params == {
        libvirt.VIR_MIGRATE_PARAM_URI: "tcp://10.0.0.2",
        libvirt.VIR_MIGRATE_PARAM_LISTEN_ADDRESS: "10.0.0.2",
        libvirt.VIR_MIGRATE_PARAM_BANDWIDTH: 300,
        # QEMU's default after a switch to post-copy is no limit at all
        libvirt.VIR_MIGRATE_PARAM_BANDWIDTH_POSTCOPY: 300,
    }
    assert call.flags == (
        libvirt.VIR_MIGRATE_LIVE
        | libvirt.VIR_MIGRATE_PEER2PEER
        | libvirt.VIR_MIGRATE_PERSIST_DEST
        | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
        | libvirt.VIR_MIGRATE_AUTO_CONVERGE
        | libvirt.VIR_MIGRATE_POSTCOPY
    )


def test_without_template_address_or_bandwidth_the_call_has_no_parameters() -> None:
    desired = tuned()
    call = migration_call(desired, host("kvm-02"))
    assert call.params == {}
    assert call.flags == (
        libvirt.VIR_MIGRATE_LIVE
        | libvirt.VIR_MIGRATE_PEER2PEER
        | libvirt.VIR_MIGRATE_PERSIST_DEST
        | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
    )


def test_a_host_without_its_own_template_or_bandwidth_takes_the_cluster_defaults() -> None:
    desired = tuned()
    spec = desired.cluster.spec.model_copy(
        update={"defaults": Defaults(migration=Migration(uri="tcp://{name}", bandwidth=100))}
    )
    desired = desired.model_copy(
        update={"cluster": desired.cluster.model_copy(update={"spec": spec})}
    )
    own = host("kvm-02").model_copy(update={"migration": Migration(bandwidth=0)})
    assert migration_call(desired, host("kvm-02")).params == {
        libvirt.VIR_MIGRATE_PARAM_URI: "tcp://kvm-02",
        libvirt.VIR_MIGRATE_PARAM_BANDWIDTH: 100,
    }
    # a host's own 0 (unlimited) wins over the default
    assert migration_call(desired, own).params == {libvirt.VIR_MIGRATE_PARAM_URI: "tcp://kvm-02"}


# --- more of what the hosts show, and the figures ---------------------------------------------


def test_every_reading_is_reported_as_progress_with_its_figures(release: list[Domain]) -> None:
    readings = [
        {
            "memory_remaining": GIB - i,
            "data_total": 1000 + i,
            "data_processed": 10 * i,
            "data_remaining": 990 - i,
            "memory_bps": 2.5 * i,
            "memory_dirty_rate": 3 * i,
            "memory_iteration": 1,
            "auto_converge_throttle": 10 * i,
        }
        for i in (1, 2)
    ]
    run = migrate([*readings, "done"], release, tick=1.2345)
    assert run.progress == [
        MigrationProgress(
            vm="web-1",
            elapsed=round(1.2345 * i, 3),
            data_total=1000 + i,
            data_processed=10 * i,
            data_remaining=990 - i,
            bytes_per_second=2.5 * i,
            memory_remaining=GIB - i,
            dirty_rate=3 * i * 4096,
            iteration=1,
            throttle=10 * i,
        )
        for i in (1, 2)
    ]
    assert run.progress[0].elapsed == 1.234 or run.progress[0].elapsed == 1.235
    assert run.result.data_bytes == 7, "the target's completed job"
    assert run.result.downtime_ms == 12
    assert 0 < run.result.seconds < 30
    assert run.result.seconds == round(run.result.seconds, 3)
    assert run.source.world.calls == [], "nothing to resume or undefine"
    call = migration_call(tuned(), host("kvm-02"))
    assert run.source.called == [(call.dest_uri, call.params, call.flags)]


def test_a_reading_without_a_job_type_is_no_job(release: list[Domain]) -> None:
    run = migrate([{"type": None}, *falling(2), "done"], release)
    assert [p.data_processed for p in run.progress] == [0, 1]


def test_a_failed_migration_reports_the_bytes_of_its_last_reading_and_no_downtime(
    release: list[Domain],
) -> None:
    run = migrate([*falling(4), "failed-paused"], release)
    assert run.result.data_bytes == 3
    assert run.result.downtime_ms is None
    assert not run.result.aborted, "it failed; nobody aborted it"


def test_a_post_copy_failure_is_never_resumed_on_the_source_even_with_the_target_empty(
    release: list[Domain],
) -> None:
    run = migrate([*falling(2), "postcopy-target-lost"], release)
    assert run.source.world.calls == []
    assert run.result.paused_on == ["kvm-01"]


def test_a_call_that_returned_while_the_vm_stayed_is_a_failure_saying_so(
    release: list[Domain],
) -> None:
    run = migrate([*falling(2), "claimed"], release)
    assert not run.result.succeeded
    assert run.result.error == "the migration ended without the VM running on the target only"
    assert run.result.running_on == ["kvm-01"]


def test_running_on_the_target_without_its_definition_there_is_no_success(
    release: list[Domain],
) -> None:
    run = migrate([*falling(2), "transient"], release)
    assert not run.result.succeeded
    assert run.result.running_on == ["kvm-02"]


def test_running_on_the_target_with_a_paused_copy_left_on_the_source_is_no_success(
    release: list[Domain],
) -> None:
    run = migrate([*falling(2), "source-paused"], release)
    assert not run.result.succeeded
    assert run.result.paused_on == ["kvm-01"]
    assert run.source.world.calls == [], "a post-copy pause is never resumed"


def test_a_source_that_cannot_be_looked_at_afterwards_makes_no_success(
    release: list[Domain],
) -> None:
    def source_fails_after_the_move(pool: Pool) -> None:
        source = pool.conns["kvm-01"]
        assert isinstance(source, Connection)
        original = source.dom.jobStats

        def stats(flags: int = 0) -> dict[str, Any]:
            out = original(flags)
            if source.dom.ended.is_set():
                source.fail = error(libvirt.VIR_ERR_INTERNAL_ERROR, "cannot read the domain")
            return out

        source.dom.jobStats = stats  # type: ignore[method-assign]

    run = migrate([*falling(2), "done"], release, arrange=source_fails_after_the_move)
    assert not run.result.succeeded
    assert run.result.error is not None
    assert run.result.error.endswith("could not look at source kvm-01: cannot read the domain")
    assert run.result.running_on == ["kvm-02"]


def test_a_look_on_a_connection_that_broke_is_repeated_on_a_new_one(
    release: list[Domain],
) -> None:
    def target_breaks(pool: Pool) -> None:
        target = pool.conns["kvm-02"]
        assert isinstance(target, Connection)
        target.fail = error(libvirt.VIR_ERR_RPC, "connection reset")
        target.alive = False

    run = migrate([*falling(2), "done"], release, arrange=target_breaks)
    assert run.result.succeeded, run.result.error
    assert run.result.running_on == ["kvm-02"]


def test_an_unreachable_target_starts_nothing_and_leaves_the_vm_running_on_the_source(
    release: list[Domain],
) -> None:
    def target_down(pool: Pool) -> None:
        pool.conns["kvm-02"] = HostUnreachable("kvm-02 does not answer")

    run = migrate(falling(5), release, arrange=target_down)
    assert run.source.polls == 0
    assert not run.result.succeeded
    assert run.result.running_on == ["kvm-01"]
    assert run.result.error == (
        "not started, target kvm-02 unreachable: kvm-02 does not answer; "
        "could not look at target kvm-02: not connected"
    )


def test_without_a_uuid_the_vm_is_found_by_its_name(release: list[Domain]) -> None:
    run = migrate([*falling(2), "done"], release, uuid=None)
    assert run.result.succeeded, run.result.error


def test_without_a_planned_size_the_guest_memory_sets_the_time_limit(
    release: list[Domain],
) -> None:
    # the fake guest has 1 GiB (maxMemory in KiB): 10s, as for a planned 1 GiB
    run = migrate(falling(60), release, desired=tuned(per_gib="10s", stall="100s"), memory=0)
    assert run.source.aborts == [11]


def test_a_bandwidth_of_one_is_passed_on() -> None:
    target = host("kvm-02").model_copy(update={"migration": Migration(bandwidth=1)})
    params = migration_call(tuned(), target).params
    assert params == {libvirt.VIR_MIGRATE_PARAM_BANDWIDTH: 1}


def test_the_migrator_polls_five_times_a_second_and_waits_a_minute_for_an_aborted_job() -> None:
    migrator = LibvirtMigrator(tuned())
    assert (migrator.watch.poll_interval, migrator.watch.settle_timeout) == (0.2, 60.0)
    assert migrator.watch == Watch()
    assert migrator.connection == ConnectionSettings()
