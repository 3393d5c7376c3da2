"""A VM on two hosts, found by the round whatever its cause: a condition on the status, Ready
False, a metric, /healthz failing, and no move of it; all of it gone once one copy is."""

from __future__ import annotations

import random
from datetime import timedelta

from reconciler.core.recovery_round import RecoveryReport, recovered_status
from reconciler.engine.loop import Loop, LoopSettings
from reconciler.engine.metrics import Metrics
from reconciler.engine.round import RoundOptions, RoundPorts, run_round
from reconciler.model.desired import DesiredState
from reconciler.model.policy import BalancePolicy
from reconciler.model.snapshot import Snapshot, VmRunState
from reconciler.model.status import ConditionType, Duplicate, ReconcileStatus
from tests.core.builders import desired, host
from tests.fakes import GIB, FakeCluster, FakeHost, FakeVm, MemoryStatusStore

HOSTS = [host("h0"), host("h1"), host("h2")]


def drifted() -> tuple[FakeCluster, DesiredState]:
    """db runs on h0, its placement says h1: a drift the round repairs, unless db is on two
    hosts."""
    fake = FakeCluster(
        "test",
        [FakeHost("h0"), FakeHost("h1"), FakeHost("h2")],
        [FakeVm("db", "h0", memory=4 * GIB), FakeVm("web", "h2", memory=4 * GIB)],
    )
    return fake, desired(HOSTS, placement={"db": "h1"})


def ports(fake: FakeCluster, store: MemoryStatusStore) -> RoundPorts:
    return RoundPorts(observer=fake, migrator=fake, recorder=fake, status=store, clock=fake.clock)


def test_a_vm_running_on_two_hosts_is_said_in_the_status_and_never_moved() -> None:
    fake, d = drifted()
    fake.twin("db", "h2")
    store = MemoryStatusStore()
    report = run_round(d, ports(fake, store), RoundOptions(act=True))
    assert [m for m, _ in fake.migrations] == []
    assert fake.hosts_of()["db"] == "h0"
    status = store.status
    assert status is not None
    assert status.duplicates == [
        Duplicate(vm="db", uuid="uuid-db", hosts=["h0", "h2"], running=True)
    ]
    duplicated = status.condition(ConditionType.DUPLICATED)
    assert duplicated is not None
    assert duplicated.status
    assert duplicated.message == "db (uuid-db) runs on h0 and h2"
    ready = status.condition(ConditionType.READY)
    assert ready is not None
    assert (ready.status, ready.reason) == (False, "Duplicated")
    assert report.plan is not None
    assert any("a duplicate: it runs on h0 and h2" in u.message for u in report.plan.unsatisfiable)
    # a person keeps one copy: the drift is repaired, the condition clears
    del fake.copies["db"]
    fake.clock.advance(timedelta(minutes=15))
    run_round(d, ports(fake, store), RoundOptions(act=True))
    assert fake.hosts_of()["db"] == "h1"
    assert store.status is not None
    assert store.status.duplicates == []
    cleared = store.status.condition(ConditionType.DUPLICATED)
    assert cleared is not None
    assert (cleared.status, cleared.reason) == (False, "NoDuplicates")


def test_ready_stays_false_since_the_duplicate_appeared() -> None:
    fake, d = drifted()
    d = desired(HOSTS)  # nothing to move: Ready would be True
    fake.twin("web", "h1")
    store = MemoryStatusStore()
    run_round(d, ports(fake, store), RoundOptions(act=True))
    assert store.status is not None
    first = store.status.condition(ConditionType.READY)
    fake.clock.advance(timedelta(minutes=15))
    run_round(d, ports(fake, store), RoundOptions(act=True))
    again = store.status.condition(ConditionType.READY)
    assert first is not None
    assert again is not None
    assert not again.status
    assert again.last_transition == first.last_transition


def test_a_copy_defined_twice_is_said_too_and_one_the_recovery_removed_is_not() -> None:
    fake, d = drifted()
    fake.twin("db", "h2")
    fake.vms["db"].state = VmRunState.SHUTOFF  # both copies shut off: defined twice
    store = MemoryStatusStore()
    removed: list[tuple[str, str]] = []

    def recovery(_: DesiredState, __: Snapshot, status: ReconcileStatus) -> ReconcileStatus:
        return recovered_status(status, RecoveryReport(removed=removed), fake.clock.now())

    p = ports(fake, store)
    p.recovery = recovery
    run_round(d, p, RoundOptions(act=True))
    assert store.status is not None
    assert store.status.duplicates == [
        Duplicate(vm="db", uuid="uuid-db", hosts=["h0", "h2"], running=False)
    ]
    # the recovery step undefines the copy on h2 (a host that came back): settled this round
    removed.append(("uuid-db", "h2"))
    fake.clock.advance(timedelta(minutes=15))
    run_round(d, p, RoundOptions(act=True))
    assert store.status.duplicates == []
    cleared = store.status.condition(ConditionType.DUPLICATED)
    assert cleared is not None
    assert not cleared.status


def test_a_duplicate_fails_healthz_and_counts_in_the_metric() -> None:
    fake, d = drifted()
    fake.twin("db", "h2")
    store = MemoryStatusStore()
    pol: BalancePolicy = d.policy

    def one(trigger: str, act: bool) -> ReconcileStatus:
        fake.clock.advance(timedelta(minutes=15))
        return run_round(d, ports(fake, store), RoundOptions(act=act, trigger=trigger)).status

    metrics = Metrics("test")
    loop = Loop(
        cluster="test",
        run_round=one,
        load_policy=lambda: pol,
        clock=fake.clock,
        metrics=metrics,
        sleep=lambda seconds, wake: fake.clock.advance(timedelta(seconds=seconds)),
        rng=random.Random(7),
        settings=LoopSettings(jitter=0),
    )
    loop.step()
    report = loop.health.report()
    assert not loop.health.healthy
    assert (report["state"], report["reason"]) == ("duplicated", "Duplicated")
    assert report["message"] == "db (uuid-db) runs on h0 and h2"

    def gauge(kind: str) -> float | None:
        return metrics.registry.get_sample_value(
            "reconciler_duplicate_vms", {"cluster": "test", "kind": kind}
        )

    assert (gauge("running"), gauge("defined")) == (1.0, 0.0)
    del fake.copies["db"]
    loop.step()
    loop.step()
    assert loop.health.healthy
    assert gauge("running") == 0.0
