"""The watcher on a busy guest, without the lab: the pass counter of libvirt's job statistics,
auto-converge's throttle, post-copy chosen by the plan, and a post-copy that fails.

Scripts and fakes are ``test_migrator_watch``'s: one poll of the watcher is one step of the
script and one second of the fake clock. The lab tests (``test_busy_guests_lab.py``) are the
truth for what libvirt does; these pin down what the migrator decides from what it reads.
"""

from __future__ import annotations

import threading
from typing import Any

import libvirt

from reconciler.adapters.libvirt.calls import GIB
from reconciler.adapters.libvirt.headway import Headway
from reconciler.adapters.libvirt.migrator import LibvirtMigrator
from reconciler.model.migration import MigrationProgress, MigrationResult
from reconciler.model.plan import Assist, Convergence, Move
from tests.adapters.test_migrator_watch import (
    DONE,
    ENDINGS,
    MOVE,
    Clock,
    Domain,
    World,
    error,
    fake_hosts,
    falling,
    tuned,
)

MIB = 1 << 20


def passes(count: int, *, start: int = 48 * MIB, first: int = 2) -> list[dict[str, Any]]:
    """Passes after the first that go nowhere: each starts with ``start`` left and falls in
    four readings to a bottom one byte lower than the pass before (a new low every pass)."""
    out: list[dict[str, Any]] = []
    for k in range(count):
        bottom = MIB - k
        for step in range(4):
            left = start - step * (start - bottom) // 3
            out.append({"memory_iteration": first + k, "memory_remaining": left})
    return out


def first_pass(steps: int = 4) -> list[dict[str, Any]]:
    return [{"memory_iteration": 1, "memory_remaining": GIB - i * (GIB // 8)} for i in range(steps)]


def run(
    script: list[dict[str, Any] | str],
    release: list[Domain],
    *,
    move: Move = MOVE,
    stall: str = "5s",
    post_copy: bool = False,
    per_gib: str = "100s",
    settle: float = 3.0,
) -> tuple[MigrationResult, Domain, list[MigrationProgress]]:
    world, source, pool = fake_hosts(script, release)
    migrator = LibvirtMigrator(
        tuned(stall=stall, post_copy=post_copy, per_gib=per_gib),
        pool=pool,
        poll_interval=0.001,
        settle_timeout=settle,
        clock=Clock(),
    )
    seen: list[MigrationProgress] = []
    result = migrator.migrate(move, on_progress=seen.append, abort=threading.Event(), uuid=None)
    return result, source, seen


def test_passes_that_go_nowhere_are_a_stall_though_each_ends_lower(release: list[Domain]) -> None:
    # the first pass ends at the 4th poll (3s); the next pass starts at the 5th with less left
    # (headway, at 4s); every later pass starts where it did, however low it ends: 5s without
    # headway, the first poll after 9s aborts, at the 11th
    result, source, _ = run([*first_pass(), *passes(20)], release)
    assert source.aborts == [11]
    assert result.aborted
    assert result.error is not None
    assert result.error.startswith("aborted: no progress for 5s (progressTimeout)")
    assert result.iterations is not None
    assert result.iterations >= 3


def test_passes_that_start_a_sixteenth_lower_each_time_are_headway(release: list[Domain]) -> None:
    shrinking = [
        {"memory_iteration": 2 + k, "memory_remaining": int(48 * MIB * (7 / 8) ** k) - j * 1000}
        for k in range(12)
        for j in range(3)
    ]
    result, source, _ = run([*first_pass(), *shrinking, DONE], release)
    assert source.aborts == []
    assert result.succeeded, result.error


class LateReturn(Domain):
    """libvirt's job ends (no job on the domain any more) well before its call returns."""

    returned = threading.Event()

    def migrateToURI3(self, uri: str, params: dict[str, Any], flags: int) -> int:  # noqa: N802
        self.ended.wait()
        LateReturn.returned.wait(10)  # the test lets it return once the watcher read enough
        return super().migrateToURI3(uri, params, flags)


def test_a_job_that_has_ended_is_never_aborted_as_a_stall_while_its_call_returns(
    release: list[Domain],
) -> None:
    # the call returns late (a busy machine does not run its thread at once): the watcher
    # reads no job for many fake seconds meanwhile; no job is not a job without progress
    LateReturn.returned.clear()
    world, source, pool = fake_hosts([*first_pass(), DONE], release, source_type=LateReturn)
    clock = Clock()

    def reading() -> float:
        if clock.now > 100.0 + 60:  # a minute of fake seconds without a job
            LateReturn.returned.set()
        return clock()

    migrator = LibvirtMigrator(
        tuned(stall="5s"), pool=pool, poll_interval=0.001, settle_timeout=3.0, clock=reading
    )
    result = migrator.migrate(MOVE, on_progress=lambda _: None, abort=threading.Event())
    assert source.aborts == []
    assert result.succeeded, result.error
    assert world.running == {"kvm-02"}


def test_a_rising_throttle_is_headway_and_is_kept_on_the_result(release: list[Domain]) -> None:
    # passes that go nowhere, but auto-converge raises its throttle every fourth poll
    nowhere = passes(8)
    for k, reading in enumerate(nowhere):
        reading["auto_converge_throttle"] = 20 + 10 * (k // 4)
    result, source, seen = run([*first_pass(), *nowhere, DONE], release)
    assert source.aborts == []
    assert result.succeeded, result.error
    assert result.throttle == 90
    assert max(p.throttle for p in seen) == 90


def test_without_the_pass_counter_a_new_low_is_progress(release: list[Domain]) -> None:
    lows = [{"memory_remaining": GIB - i} for i in range(20)]
    result, source, _ = run([*lows, DONE], release)
    assert source.aborts == []
    assert result.succeeded, result.error


def test_a_move_planned_with_post_copy_switches_once_the_first_pass_is_done(
    release: list[Domain],
) -> None:
    planned = MOVE.model_copy(
        update={
            "convergence": Convergence(
                dirty_rate=64 * MIB,
                bandwidth=32 * MIB,
                converges=True,
                assist=Assist.POST_COPY,
            )
        }
    )
    result, source, seen = run(
        [*first_pass(), *passes(3), DONE], release, move=planned, post_copy=True, stall="100s"
    )
    assert source.postcopy == [5], "at the first reading of the second pass"
    assert source.aborts == []
    assert result.succeeded, result.error
    assert result.post_copy
    assert seen[-1].post_copy


def test_a_move_planned_with_post_copy_does_not_switch_where_the_policy_forbids_it(
    release: list[Domain],
) -> None:
    planned = MOVE.model_copy(
        update={
            "convergence": Convergence(
                dirty_rate=64 * MIB, bandwidth=32 * MIB, converges=True, assist=Assist.POST_COPY
            )
        }
    )
    result, source, _ = run([*first_pass(), *passes(3), DONE], release, move=planned, stall="100s")
    assert source.postcopy == []
    assert not result.post_copy


# --- post-copy that fails ---------------------------------------------------------------------


def split_then(after: int, ending: str) -> str:
    """A script ending: post-copy fails (paused on the source, running on the target by
    post-copy), and after ``after`` looks at the source's state libvirt has ended it as
    ``ending`` does."""
    name = f"split-{after}-{ending}"

    def fail(world: World) -> libvirt.libvirtError | None:
        world.running = {"kvm-02"}
        world.defined = {"kvm-01", "kvm-02"}
        world.paused = {"kvm-01": libvirt.VIR_DOMAIN_PAUSED_POSTCOPY_FAILED}
        world.calls.append(f"settles-after:{after}:{ending}")
        return error(libvirt.VIR_ERR_INTERNAL_ERROR, "client socket is closed")

    ENDINGS[name] = fail
    return name


class Settling(Domain):
    """A domain whose post-copy libvirt ends on its own after some looks at its state."""

    looks = 0

    def state(self) -> tuple[int, int]:
        plan = next((c for c in self.world.calls if c.startswith("settles-after:")), None)
        if plan is not None and self.host == "kvm-01":
            _, after, ending = plan.split(":")
            Settling.looks += 1
            if Settling.looks > int(after):
                self.world.calls.remove(plan)
                self.world.paused = {}
                ENDINGS[ending](self.world)
        state, reason = super().state()
        if self.host == "kvm-02" and self.host in self.world.running and plan is not None:
            return state, libvirt.VIR_DOMAIN_RUNNING_POSTCOPY
        return state, reason


def run_settling(
    script: list[dict[str, Any] | str], release: list[Domain], *, settle: float = 20.0
) -> tuple[MigrationResult, World]:
    Settling.looks = 0
    world, source, pool = fake_hosts(script, release, source_type=Settling)
    target = Settling(world, "kvm-02")
    pool.conns["kvm-02"] = type(pool.get("kvm-01"))(world, "kvm-02", target)
    migrator = LibvirtMigrator(
        tuned(stall="5s", post_copy=True),
        pool=pool,
        poll_interval=0.001,
        settle_timeout=settle,
        clock=Clock(),
    )
    result = migrator.migrate(MOVE, on_progress=lambda _: None, abort=threading.Event())
    return result, world


def test_a_post_copy_libvirt_ends_after_its_call_failed_is_a_move(release: list[Domain]) -> None:
    # the target's daemon was killed in post-copy: the call fails, both QEMUs carry on, and
    # libvirt ends the migration a few looks later (the source's copy shut off, defined)
    ending = split_then(3, "leftover")
    result, world = run_settling([*falling(2), ending], release)
    assert result.succeeded, result.error
    assert result.running_on == ["kvm-02"]
    assert "undefine@kvm-01" in world.calls, "the source's leftover definition is removed"
    assert "resume@kvm-01" not in world.calls, "the source is never resumed"
    assert result.post_copy
    assert not result.post_copy_failed


def test_a_post_copy_failed_on_both_hosts_is_resumed_once_and_else_says_what_to_do(
    release: list[Domain],
) -> None:
    result, world, source = _failed_both(release)
    resumes = [
        flags for _, _, flags in source.called if flags & libvirt.VIR_MIGRATE_POSTCOPY_RESUME
    ]
    assert len(resumes) == 1, source.called
    assert resumes[0] & libvirt.VIR_MIGRATE_POSTCOPY
    assert not result.succeeded
    assert result.post_copy_failed
    assert result.post_copy
    assert world.calls == [], "never resumed or undefined anywhere"
    assert result.error is not None
    assert "do not resume or start it on kvm-01" in result.error
    assert "--postcopy-resume web-1 " in result.error


def _failed_both(release: list[Domain]) -> tuple[MigrationResult, World, Domain]:
    world, source, pool = fake_hosts([*falling(2), "failed-postcopy"], release)
    migrator = LibvirtMigrator(
        tuned(stall="5s", post_copy=True),
        pool=pool,
        poll_interval=0.001,
        settle_timeout=3.0,
        clock=Clock(),
    )
    result = migrator.migrate(MOVE, on_progress=lambda _: None, abort=threading.Event())
    return result, world, source


def test_a_post_copy_whose_target_lost_the_vm_says_it_must_be_restarted(
    release: list[Domain],
) -> None:
    world, source, pool = fake_hosts([*falling(2), "postcopy-target-lost"], release)
    migrator = LibvirtMigrator(
        tuned(stall="5s", post_copy=True),
        pool=pool,
        poll_interval=0.001,
        settle_timeout=3.0,
        clock=Clock(),
    )
    result = migrator.migrate(MOVE, on_progress=lambda _: None, abort=threading.Event())
    assert result.post_copy_failed
    assert result.paused_on == ["kvm-01"]
    assert world.calls == []
    assert result.error is not None
    assert "kvm-02 no longer holds web-1" in result.error
    assert "never resume it" in result.error


# --- headway, reading by reading ---------------------------------------------------------------


def test_headway_counts_the_first_pass_a_shrinking_pass_start_and_a_throttle_rise() -> None:
    h = Headway()
    total = {"memory_total": 100}
    assert not h.saw({"memory_remaining": 0}), "no figures yet"
    assert h.saw({**total, "memory_iteration": 1, "memory_remaining": 90})
    assert h.saw({**total, "memory_iteration": 1, "memory_remaining": 10})
    assert not h.saw({**total, "memory_iteration": 1, "memory_remaining": 10})
    assert h.saw({**total, "memory_iteration": 2, "memory_remaining": 48})
    assert not h.saw({**total, "memory_iteration": 2, "memory_remaining": 1}), "within a pass"
    assert not h.saw({**total, "memory_iteration": 3, "memory_remaining": 46}), "under 1/16"
    assert h.saw({**total, "memory_iteration": 4, "memory_remaining": 45})
    assert h.saw(
        {**total, "memory_iteration": 4, "memory_remaining": 30, "auto_converge_throttle": 20}
    )
    assert not h.saw(
        {**total, "memory_iteration": 4, "auto_converge_throttle": 20, "memory_remaining": 3}
    )
    h.switched()
    assert h.saw({**total, "memory_iteration": 5, "memory_remaining": 40})
    assert h.saw({**total, "memory_iteration": 5, "memory_remaining": 39})
    assert not h.saw({**total, "memory_iteration": 5, "memory_remaining": 39})
    assert (h.passes, h.throttle, h.post_copy) == (5, 20, True)


# --- the bandwidth after the switch -----------------------------------------------------------


def test_the_bandwidth_holds_after_a_switch_to_post_copy_and_only_where_it_is_allowed() -> None:
    from reconciler.adapters.libvirt.calls import copy_call, migration_call
    from reconciler.model.cluster import Migration
    from reconciler.model.snapshot import MigrationClass
    from tests.core.builders import desired, host

    target = host("kvm-02").model_copy(update={"migration": Migration(bandwidth=32)})
    after = libvirt.VIR_MIGRATE_PARAM_BANDWIDTH_POSTCOPY

    def policy(**migration: object) -> Any:
        return desired([host("kvm-01"), target], migration=migration)

    assert after not in migration_call(policy(), target).params
    assert migration_call(policy(postCopy=True), target).params[after] == 32
    copying = policy(postCopy=True, copy={"bandwidth": 8})
    move = MOVE.model_copy(update={"migration_class": MigrationClass.COPY, "disks": ["vda"]})
    call = copy_call(migration_call(copying, target), copying, move)
    assert call.params[after] == 8
    forbidden = policy(postCopy=True, copy={"postCopy": False})
    call = copy_call(migration_call(forbidden, target), forbidden, move)
    assert after not in call.params
    assert not call.flags & libvirt.VIR_MIGRATE_POSTCOPY
