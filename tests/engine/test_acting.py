"""The acting path on the fake cluster: intent before action, a look writes nothing, the hold
and the window kept mid-queue, errors as failed rounds, records three-way."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from reconciler.engine.leadership import LeaseKeeper
from reconciler.engine.round import RoundOptions, RoundPorts, run_round
from reconciler.engine.triggers import Wakeup
from reconciler.errors import HostUnreachable, TransientError
from reconciler.model.plan import Move
from reconciler.model.snapshot import FailedMove, MoveIntent, ReconcilerState, VmRunState
from reconciler.model.status import (
    ConditionType,
    MoveOutcome,
    ReconcileStatus,
    RoundOutcome,
    RoundResult,
)
from tests.core.builders import desired, host
from tests.fakes import GIB, FakeCluster, FakeHost, FakeVm, MemorySource, MemoryStatusStore

HOSTS = [host("h0"), host("h1"), host("h2")]


def unbalanced(n: int = 6) -> FakeCluster:
    return FakeCluster(
        "test",
        [FakeHost(f"h{i}") for i in range(3)],
        [FakeVm(f"vm{i}", "h0", cpu_used=2.0, memory=4 * GIB) for i in range(n)],
    )


def ports(fake: FakeCluster, store: MemoryStatusStore | None = None, **kw: object) -> RoundPorts:
    return RoundPorts(
        observer=fake,
        migrator=fake,
        recorder=fake,
        status=store or MemoryStatusStore(),
        clock=fake.clock,
        **kw,  # type: ignore[arg-type]
    )


# --- intent before action ---------------------------------------------------------------------


def test_an_intent_is_on_the_domain_before_its_migration_starts_and_gone_after() -> None:
    fake = unbalanced()
    d = desired(HOSTS, threshold=10)
    seen: dict[str, MoveIntent | None] = {}

    def at_start(m: Move) -> None:
        seen[m.vm] = fake.vms[m.vm].record.intent

    fake.on_migrate = at_start
    report = run_round(d, ports(fake), RoundOptions(act=True))
    assert report.plan is not None
    assert seen, "something moved"
    for m in report.plan.moves:
        intent = seen[m.vm]
        assert intent is not None, f"{m.vm} started without an intent"
        assert (intent.source, intent.target, intent.plan_id) == (
            m.source,
            m.target,
            report.plan.plan_id,
        )
        assert fake.vms[m.vm].record.intent is None, "the outcome replaced the intent"


def test_a_move_whose_intent_cannot_be_written_does_not_start() -> None:
    fake = unbalanced()
    d = desired(HOSTS, threshold=10, batch=1)
    original = fake.record

    def refuse(host: str, vm: str, state: ReconcilerState, *, uuid: str | None = None) -> None:
        if state.intent is not None:
            raise HostUnreachable(f"{host} does not answer")
        original(host, vm, state, uuid=uuid)

    fake.record = refuse  # type: ignore[method-assign]
    report = run_round(d, ports(fake), RoundOptions(act=True))
    assert fake.migrations == []
    assert [r.reason for r in report.results] == ["IntentNotRecorded"]


@pytest.mark.parametrize(
    ("runs_on", "expect_move"), [("h1", True), ("h0", False)], ids=["on-target", "on-source"]
)
def test_an_intent_left_by_a_crash_is_resolved_from_where_the_vm_runs(
    runs_on: str, expect_move: bool
) -> None:
    fake = unbalanced(n=2)
    vm = fake.vms["vm0"]
    vm.host = runs_on
    started = fake.clock.now() - timedelta(minutes=1)
    vm.record = ReconcilerState(
        first_seen=started - timedelta(days=1),
        intent=MoveIntent(plan_id="p0", source="h0", target="h1", started_at=started),
    )
    d = desired(HOSTS, threshold=10, cooldown="6h")
    report = run_round(d, ports(fake), RoundOptions(act=True))
    record = fake.vms["vm0"].record
    assert record.intent is None
    if expect_move:
        assert (record.last_moved_from, record.last_moved_to, record.moves) == ("h0", "h1", 1)
        assert report.plan is not None
        assert "vm0" not in {m.vm for m in report.plan.moves}, "the recovered move has cooldown"
    else:
        assert isinstance(record.last_failure, FailedMove)
        assert record.last_failure.target == "h1"
        assert record.moves == 0


@pytest.mark.parametrize("state", [VmRunState.SHUTOFF, VmRunState.RUNNING])
def test_a_cold_move_stopped_with_the_vm_defined_on_both_hosts_is_undone(
    state: VmRunState,
) -> None:
    """Both definitions shut off with the same intent: the target copy goes, the VM stays on
    the source with the move recorded as failed. One of them running is left alone."""
    fake = unbalanced(n=2)
    vm = fake.vms["vm0"]
    vm.state = state
    started = fake.clock.now() - timedelta(minutes=1)
    vm.record = ReconcilerState(
        intent=MoveIntent(plan_id="p0", source="h0", target="h1", started_at=started)
    )
    fake.copies["vm0"] = ("h1", vm.record)
    d = desired(HOSTS, threshold=10)
    run_round(d, ports(fake), RoundOptions(act=True))
    if state is VmRunState.RUNNING:
        assert fake.discarded == []
        assert fake.vms["vm0"].record.intent is not None
        return
    assert fake.discarded == [("h1", "vm0")]
    record = fake.vms["vm0"].record
    assert (fake.vms["vm0"].host, record.intent) == ("h0", None)
    assert record.last_failure is not None
    assert record.last_failure.target == "h1"


def test_a_stopped_cold_move_whose_copy_cannot_be_removed_keeps_its_intent() -> None:
    fake = unbalanced(n=2)
    vm = fake.vms["vm0"]
    vm.state = VmRunState.SHUTOFF
    started = fake.clock.now() - timedelta(minutes=1)
    vm.record = ReconcilerState(
        intent=MoveIntent(plan_id="p0", source="h0", target="h1", started_at=started)
    )
    fake.copies["vm0"] = ("h1", vm.record)

    def refuse(host: str, vm: str, *, uuid: str) -> None:
        raise HostUnreachable(f"{host} does not answer")

    fake.discard_copy = refuse  # type: ignore[method-assign]
    run_round(desired(HOSTS, threshold=10), ports(fake), RoundOptions(act=True))
    assert fake.vms["vm0"].record.intent is not None, "tried again next round"


def test_an_intent_is_not_resolved_by_a_look() -> None:
    fake = unbalanced(n=2)
    started = fake.clock.now() - timedelta(minutes=1)
    fake.vms["vm0"].host = "h1"
    fake.vms["vm0"].record = ReconcilerState(
        intent=MoveIntent(plan_id="p0", source="h0", target="h1", started_at=started)
    )
    d = desired(HOSTS, threshold=10)
    run_round(d, ports(fake), RoundOptions(act=True, holds=False, confirm=lambda p: False))
    run_round(d, ports(fake), RoundOptions(act=False, holds=False))
    assert fake.vms["vm0"].record.intent is not None
    assert fake.records == []


# --- a look writes nothing --------------------------------------------------------------------


def test_a_dry_run_or_a_no_writes_no_status_no_streak_and_no_first_sighting() -> None:
    fake = unbalanced()
    store = MemoryStatusStore()
    d = desired(HOSTS, threshold=10, holdRounds=2)
    for _ in range(3):
        run_round(
            d, ports(fake, store), RoundOptions(act=True, holds=False, confirm=lambda p: False)
        )
        run_round(d, ports(fake, store), RoundOptions(act=False, holds=False))
    assert store.saves == 0
    assert fake.records == []
    first = run_round(d, ports(fake, store), RoundOptions(act=True))
    assert first.plan is not None
    assert first.plan.moves == [], "the streak starts at the first round that counts"
    assert store.status is not None
    assert store.status.imbalance_rounds == {"x86_64": 1}


def test_a_status_dated_in_the_future_is_ignored() -> None:
    fake = unbalanced()
    store = MemoryStatusStore()
    future = fake.clock.now() + timedelta(days=30)
    store.status = ReconcileStatus(
        cluster="test",
        observed_since=future,
        last_observed_at=future,
        imbalance_rounds={"x86_64": 5},
        last_result=RoundResult(
            started_at=future,
            finished_at=future,
            trigger="manual",
            outcome=RoundOutcome.APPLIED,
            message="",
        ),
    )
    d = desired(HOSTS, threshold=10, holdRounds=3)
    report = run_round(d, ports(fake, store), RoundOptions(act=True))
    assert report.plan is not None
    assert report.plan.moves == [], "a streak of 5 from the future must not count"
    assert store.status is not None
    assert store.status.imbalance_rounds == {"x86_64": 1}


def test_a_record_dated_in_the_future_is_never_copied_into_a_vms_record() -> None:
    fake = unbalanced()
    future = fake.clock.now() + timedelta(days=30)
    for v in fake.vms.values():
        v.record = ReconcilerState(first_seen=future, last_moved_at=future, last_moved_to="h0")
    d = desired(HOSTS, threshold=10, cooldown="6h")
    report = run_round(d, ports(fake), RoundOptions(act=True))
    assert report.results, "a move dated in the future does not hold VMs in cooldown"
    for v in fake.vms.values():
        assert v.record.first_seen is None or v.record.first_seen <= fake.clock.now()
        assert v.record.last_moved_at is None or v.record.last_moved_at <= fake.clock.now()


# --- the hold and the window, mid-queue ---------------------------------------------------------


class Hold:
    def __init__(self) -> None:
        self.ok = True

    def valid(self) -> bool:
        return self.ok

    def holder(self) -> str | None:
        return None if self.ok else "standby-2"


def test_no_migration_starts_once_the_hold_is_no_longer_valid() -> None:
    fake = unbalanced()
    hold = Hold()
    d = desired(HOSTS, threshold=10, batch=4, parallel={"cluster": 1})
    fake.on_migrate = lambda m: setattr(hold, "ok", False)
    report = run_round(d, ports(fake, hold=hold), RoundOptions(act=True))
    assert len(fake.migrations) == 1
    assert report.results[0].outcome is MoveOutcome.SUCCEEDED
    rest = report.results[1:]
    assert rest
    assert {r.reason for r in rest} == {"NotStarted"}
    assert all("standby-2" in r.detail for r in rest)


def test_no_migration_starts_after_the_window_closes_even_mid_queue() -> None:
    fake = unbalanced()
    d = desired(HOSTS, threshold=10, batch=4, parallel={"cluster": 1})
    open_ = [True]
    fake.on_migrate = lambda m: open_.__setitem__(0, False)
    report = run_round(
        d,
        ports(fake),
        RoundOptions(
            act=True, gate=lambda: None if open_[0] else "the policy's apply window closed"
        ),
    )
    assert len(fake.migrations) == 1
    assert {r.detail for r in report.results[1:]} == {
        "not started: the policy's apply window closed"
    }


def test_the_keepers_hold_turns_invalid_at_the_deadline_while_a_renewal_hangs() -> None:
    now = [0.0]
    release, checked = threading.Event(), threading.Event()

    class HangingLease:
        calls = 0

        def acquire(self) -> bool:
            self.calls += 1
            if self.calls > 1:
                checked.wait(5)  # not before the test saw the hold valid, however loaded
                now[0] += 30.0  # the renewal call does not return before the deadline
                release.wait(5)
            return True

        def confirm(self) -> bool:
            return True

        def holder(self) -> str | None:
            return "me"

        def release(self) -> None: ...

    keeper = LeaseKeeper(
        HangingLease(),
        Wakeup(),
        threading.Event(),
        retry_period=0.01,
        renew_deadline=10.0,
        monotonic=lambda: now[0],
    )
    assert keeper.acquire(0)
    assert keeper.valid()
    checked.set()
    waited = 0
    while keeper.valid() and waited < 500:
        threading.Event().wait(0.01)
        waited += 1
    assert not keeper.valid(), "the deadline passed while the renewal hung"
    release.set()
    keeper.stop()


def test_a_keeper_thread_that_dies_stops_acting_and_says_why() -> None:
    stop = threading.Event()

    class Broken:
        calls = 0

        def acquire(self) -> bool:
            self.calls += 1
            if self.calls > 1:
                raise KeyError("bug")
            return True

        def confirm(self) -> bool:
            return True

        def holder(self) -> str | None:
            return None

        def release(self) -> None: ...

    keeper = LeaseKeeper(Broken(), Wakeup(), stop, retry_period=0.01, renew_deadline=10.0)
    assert keeper.acquire(0)
    assert stop.wait(30), "the round is told to stop"
    assert not keeper.valid()
    assert keeper.failure is not None
    assert "KeyError" in keeper.failure
    keeper.stop()


# --- errors are the truth ---------------------------------------------------------------------


def test_an_unexpected_exception_is_a_failed_stalled_round_never_applied() -> None:
    fake = unbalanced()
    store = MemoryStatusStore()
    d = desired(HOSTS, threshold=10, batch=1)

    def boom(host: str, vm: str, state: ReconcilerState, *, uuid: str | None = None) -> None:
        raise ZeroDivisionError("bug in a recorder")

    fake.record = boom  # type: ignore[method-assign]
    with pytest.raises(ZeroDivisionError):
        run_round(d, ports(fake, store), RoundOptions(act=True))
    status = store.status
    assert status is not None
    assert status.last_result is not None
    assert status.last_result.outcome is RoundOutcome.FAILED
    assert "ZeroDivisionError" in status.last_result.message
    stalled = status.condition(ConditionType.STALLED)
    assert stalled is not None
    assert stalled.status


def test_a_transient_error_is_not_a_stall() -> None:
    fake = unbalanced()
    store = MemoryStatusStore()

    def down() -> object:
        raise TransientError("remote not answering")

    fake.observe = down  # type: ignore[method-assign,assignment]
    with pytest.raises(TransientError):
        run_round(desired(HOSTS), ports(fake, store), RoundOptions(act=True))
    assert store.status is not None
    stalled = store.status.condition(ConditionType.STALLED)
    assert stalled is not None
    assert not stalled.status


def test_an_apply_that_could_not_observe_every_host_says_so() -> None:
    fake = unbalanced()
    fake.unreachable("h2")
    report = run_round(desired(HOSTS, threshold=10), ports(fake), RoundOptions(act=True))
    assert report.results == []
    assert report.not_acting is not None
    assert "h2" in report.not_acting


# --- the record, three-way --------------------------------------------------------------------


def test_a_persons_change_to_the_same_entry_is_kept_and_reported() -> None:
    fake = unbalanced()
    listed = {f"vm{i}": "h0" for i in range(6)}
    d = desired(HOSTS, threshold=10, placement=listed, drift="adopt")
    source = MemorySource(d, listed)
    source.load()
    plan = run_round(d, ports(fake), RoundOptions(act=False)).plan
    assert plan is not None
    victim = plan.moves[0].vm
    fake.on_migrate = lambda m: source.person_sets(victim, "h2") if m.vm == victim else None
    store = MemoryStatusStore()
    report = run_round(d, ports(fake, store, source=source), RoundOptions(act=True))
    assert source.placement[victim] == "h2", "the person's entry is kept"
    assert any(victim in line for line in report.conflicts)
    assert store.status is not None
    ready = store.status.condition(ConditionType.READY)
    assert ready is not None
    assert ready.reason == "PlacementConflict"
    others = {r.vm: r.target for r in report.results if r.outcome is MoveOutcome.SUCCEEDED}
    others.pop(victim, None)
    assert all(source.placement[vm] == t for vm, t in others.items())


# --- another actor's live intent --------------------------------------------------------------


def foreign(fake: FakeCluster, *, actor: str | None, age: timedelta) -> None:
    """vm0 carries an intent of ``actor``, written ``age`` ago, of a move h0 -> h2 that has
    not shown on h2 yet."""
    vm = fake.vms["vm0"]
    vm.record = ReconcilerState(
        intent=MoveIntent(
            plan_id="p9",
            source="h0",
            target="h2",
            started_at=fake.clock.now() - age,
            actor=actor,
        )
    )


def test_another_actors_live_intent_keeps_the_round_from_acting_and_is_left_alone() -> None:
    fake = unbalanced()
    foreign(fake, actor="apply@ops-laptop", age=timedelta(seconds=20))
    d = desired(HOSTS, threshold=10)
    report = run_round(d, ports(fake), RoundOptions(act=True, actor="run@kvm-admin-1"))
    assert fake.migrations == []
    assert report.not_acting == (
        "another actor is moving VMs of this cluster: apply@ops-laptop is moving vm0 h0 -> h2 "
        "(since 2025-03-01T11:59:40+00:00)"
    )
    assert fake.vms["vm0"].record.intent is not None, "not resolved: its actor may still act"


@pytest.mark.parametrize(
    ("actor", "age"),
    [
        ("run@kvm-admin-1", timedelta(seconds=20)),  # its own, from before a restart
        (None, timedelta(seconds=20)),  # written before intents named their actor
        ("apply@ops-laptop", timedelta(minutes=11)),  # left behind by an actor long gone
    ],
    ids=["own", "unnamed", "stale"],
)
def test_an_own_unnamed_or_stale_intent_is_resolved_and_the_round_acts(
    actor: str | None, age: timedelta
) -> None:
    fake = unbalanced()
    foreign(fake, actor=actor, age=age)
    d = desired(HOSTS, threshold=10)
    report = run_round(d, ports(fake), RoundOptions(act=True, actor="run@kvm-admin-1"))
    assert report.not_acting is None
    assert fake.migrations, "it acted"
    assert fake.vms["vm0"].record.intent is None or fake.vms["vm0"].record.intent.actor == (
        "run@kvm-admin-1"
    )


def test_intents_and_moves_name_their_actor() -> None:
    fake = unbalanced()
    d = desired(HOSTS, threshold=10)
    seen: dict[str, MoveIntent | None] = {}
    fake.on_migrate = lambda m: seen.update({m.vm: fake.vms[m.vm].record.intent})
    report = run_round(d, ports(fake), RoundOptions(act=True, actor="drain@kvm-admin-2"))
    moved = [r.vm for r in report.results if r.outcome is MoveOutcome.SUCCEEDED]
    assert moved
    for vm in moved:
        intent = seen[vm]
        assert intent is not None
        assert intent.actor == "drain@kvm-admin-2"
        assert fake.vms[vm].record.last_moved_by == "drain@kvm-admin-2"
