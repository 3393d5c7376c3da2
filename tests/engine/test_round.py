"""The round and the executor on the in-memory fake cluster: limits, state, faults."""

from __future__ import annotations

import os
import threading
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.adapters.files.text import TextFile
from reconciler.core.admission import AdmitCode, Verdict, admit
from reconciler.engine.ports import DesiredSource
from reconciler.engine.round import RoundOptions, RoundPorts, run_round
from reconciler.engine.sources import FolderSource
from reconciler.errors import TerminalError
from reconciler.model.acting import Record, Recorded
from reconciler.model.base import HostName, VmName
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Move, Reason
from reconciler.model.snapshot import Snapshot
from reconciler.model.status import ConditionType, MoveOutcome, ReconcileStatus, RoundOutcome
from tests.core.builders import desired, host, rule
from tests.fakes import (
    GIB,
    FakeCluster,
    FakeHost,
    FakeVm,
    MemorySource,
    MemoryStatusStore,
)

HOSTS3 = [host("h0"), host("h1"), host("h2")]


def unbalanced(n_hot: int = 6, hosts: int = 3) -> FakeCluster:
    """Every VM on the first host, busy; the others empty."""
    return FakeCluster(
        "test",
        [FakeHost(f"h{i}") for i in range(hosts)],
        [FakeVm(f"vm{i}", "h0", cpu_used=2.0, memory=4 * GIB) for i in range(n_hot)],
    )


def ports(
    fake: FakeCluster, store: MemoryStatusStore | None = None, source: DesiredSource | None = None
) -> RoundPorts:
    return RoundPorts(
        observer=fake,
        migrator=fake,
        recorder=fake,
        status=store or MemoryStatusStore(),
        clock=fake.clock,
        source=source,
    )


def spread_hosts(fake: FakeCluster) -> Counter[str]:
    return Counter(fake.hosts_of().values())


def test_hold_rounds_two_balances_in_the_second_round_and_status_is_written_once_per_round() -> (
    None
):
    fake = unbalanced()
    store = MemoryStatusStore()
    d = desired([host("h0"), host("h1"), host("h2")], holdRounds=2, threshold=10)
    first = run_round(d, ports(fake, store), RoundOptions(act=True))
    assert first.plan is not None
    assert first.plan.moves == []
    assert store.saves == 1
    assert store.status is not None
    assert store.status.imbalance_rounds == {"x86_64": 1}
    fake.clock.advance(timedelta(minutes=15))
    second = run_round(d, ports(fake, store), RoundOptions(act=True))
    assert store.saves == 2
    assert second.plan is not None
    assert second.plan.moves, "the second round over threshold balances"
    assert all(r.outcome is MoveOutcome.SUCCEEDED for r in second.results)
    assert len(spread_hosts(fake)) > 1
    assert second.outcome in (RoundOutcome.APPLIED,)
    status = store.status
    assert status.rounds == 2
    assert status.last_result is not None
    assert status.last_result.plan_id == second.plan.plan_id


def test_moves_are_recorded_on_the_vms_and_cooldown_holds_them_next_round() -> None:
    fake = unbalanced()
    d = desired([host("h0"), host("h1"), host("h2")], threshold=10, cooldown="6h")
    report = run_round(d, ports(fake), RoundOptions(act=True))
    moved = {r.vm for r in report.results if r.outcome is MoveOutcome.SUCCEEDED}
    assert moved
    assert report.plan is not None
    for name in moved:
        rec = fake.vms[name].record
        assert rec.last_moved_to == fake.vms[name].host
        assert rec.last_plan_id == report.plan.plan_id
        assert rec.moves == 1
        assert rec.first_seen is not None, "the move's record keeps the first sighting"
    # Make it unbalanced again by hand: none of the moved VMs may move for balance in cooldown.
    for name in moved:
        fake.vms[name].host = "h0"
    again = run_round(d, ports(fake), RoundOptions(act=True))
    assert again.plan is not None
    assert moved.isdisjoint({m.vm for m in again.plan.moves})


def test_a_failed_move_is_reported_recorded_and_not_retried_within_cooldown() -> None:
    fake = unbalanced()
    d = desired([host("h0"), host("h1"), host("h2")], threshold=10, batch=1)
    planned = run_round(d, ports(fake), RoundOptions(act=False))
    assert planned.plan is not None
    victim = planned.plan.moves[0].vm
    fake.fail_next(victim, "target refused")
    report = run_round(d, ports(fake), RoundOptions(act=True))
    assert [(r.vm, r.outcome) for r in report.results] == [(victim, MoveOutcome.FAILED)]
    assert report.outcome is RoundOutcome.PARTIAL
    failure = fake.vms[victim].record.last_failure
    assert failure is not None
    assert failure.error == "target refused"
    assert fake.vms[victim].host == "h0"
    again = run_round(d, ports(fake), RoundOptions(act=True))
    assert again.plan is not None
    assert victim not in {m.vm for m in again.plan.moves}


def test_a_success_the_client_reported_as_an_error_is_recorded_as_success() -> None:
    fake = unbalanced()
    d = desired([host("h0"), host("h1"), host("h2")], threshold=10, batch=1)
    vm = run_round(d, ports(fake), RoundOptions(act=False)).plan.moves[0].vm  # type: ignore[union-attr]
    fake.fail_after_copy(vm)
    report = run_round(d, ports(fake), RoundOptions(act=True))
    assert report.results[0].outcome is MoveOutcome.SUCCEEDED
    assert "client reported" in report.results[0].detail
    assert fake.vms[vm].record.last_moved_to == fake.vms[vm].host


def test_a_vm_shut_down_while_its_move_waits_is_skipped_and_named() -> None:
    fake = unbalanced()
    d = desired(
        [host("h0"), host("h1"), host("h2")], threshold=10, batch=3, parallel={"cluster": 1}
    )
    plan = run_round(d, ports(fake), RoundOptions(act=False)).plan
    assert plan is not None
    assert len(plan.moves) >= 2
    first, second = plan.moves[0].vm, plan.moves[1].vm
    fake.on_migrate = lambda m: fake.stop_vm(second) if m.vm == first else None
    report = run_round(d, ports(fake), RoundOptions(act=True))
    skipped = [r for r in report.results if r.outcome is MoveOutcome.SKIPPED]
    assert [(r.vm, r.reason) for r in skipped] == [(second, AdmitCode.NOT_RUNNING.value)]
    assert second in skipped[0].detail


def test_a_target_that_disappears_makes_its_waiting_moves_stale() -> None:
    fake = unbalanced(hosts=2)
    d = desired([host("h0"), host("h1")], threshold=10, batch=4, parallel={"cluster": 1})
    report0 = run_round(d, ports(fake), RoundOptions(act=False))
    assert report0.plan is not None
    assert len(report0.plan.moves) >= 2
    fake.on_migrate = lambda m: fake.unreachable("h1")
    report = run_round(d, ports(fake), RoundOptions(act=True))
    outcomes = [r.outcome for r in report.results]
    assert outcomes[0] is MoveOutcome.FAILED
    assert all(o is MoveOutcome.SKIPPED for o in outcomes[1:])
    assert {r.reason for r in report.results[1:]} == {AdmitCode.TARGET_UNREACHABLE.value}


def test_stop_lets_the_running_move_end_and_starts_nothing_more() -> None:
    fake = unbalanced()
    d = desired(
        [host("h0"), host("h1"), host("h2")], threshold=10, batch=4, parallel={"cluster": 1}
    )
    stop = threading.Event()
    fake.on_migrate = lambda m: stop.set()
    report = run_round(d, ports(fake), RoundOptions(act=True, stop=stop))
    assert report.interrupted
    assert report.results[0].outcome is MoveOutcome.SUCCEEDED
    assert {r.reason for r in report.results[1:]} == {"Interrupted"}
    assert report.outcome is RoundOutcome.PARTIAL


def test_nothing_moves_before_the_first_complete_observation() -> None:
    fake = unbalanced(hosts=4)
    fake.unreachable("h3")
    d = desired([host(f"h{i}") for i in range(4)], threshold=10)
    store = MemoryStatusStore()
    report = run_round(d, ports(fake, store), RoundOptions(act=True))
    assert report.plan is not None
    assert report.plan.moves
    assert report.results == []
    assert store.status is not None
    assert store.status.observed_since is None
    fake.unreachable("h3", False)
    report = run_round(d, ports(fake, store), RoundOptions(act=True))
    assert report.results


def test_a_vm_that_appears_after_the_first_round_is_young_for_min_uptime() -> None:
    fake = FakeCluster(
        "test", [FakeHost("h0"), FakeHost("h1")], [FakeVm("old", "h0", cpu_used=0.1)]
    )
    d = desired([host("h0"), host("h1")], threshold=10, minUptime="10m")
    store = MemoryStatusStore()
    run_round(d, ports(fake, store), RoundOptions(act=True))
    assert fake.vms["old"].record.first_seen == store.status.observed_since  # type: ignore[union-attr]
    fake.clock.advance(timedelta(minutes=5))
    for name in ("new1", "new2"):
        fake.vms[name] = FakeVm(name, "h0", cpu_used=6.0, memory=8 * GIB)
    report = run_round(d, ports(fake, store), RoundOptions(act=True))
    assert report.plan is not None
    assert report.plan.spreads[0].before > 10, "over the threshold, yet too young to move"
    assert {m.vm for m in report.plan.moves}.isdisjoint({"new1", "new2"})
    assert fake.vms["new1"].record.first_seen is not None
    fake.clock.advance(timedelta(minutes=11))
    later = run_round(d, ports(fake, store), RoundOptions(act=True))
    assert later.plan is not None
    assert {m.vm for m in later.plan.moves} & {"new1", "new2"}


def test_placement_follows_balance_moves_of_listed_vms() -> None:
    fake = unbalanced()
    listed = {f"vm{i}": "h0" for i in range(6)}
    d = desired([host("h0"), host("h1"), host("h2")], threshold=10, placement=listed, drift="adopt")
    writer = MemorySource(d, listed)
    report = run_round(d, ports(fake, source=writer), RoundOptions(act=True))
    moved = {r.vm: r.target for r in report.results if r.outcome is MoveOutcome.SUCCEEDED}
    assert moved
    assert {vm: writer.placement[vm] for vm in moved} == moved
    assert writer.placement == fake.hosts_of()


def test_an_invalid_round_writes_a_stalled_status_and_reraises() -> None:
    fake = unbalanced()
    for h in fake.hosts:
        fake.unreachable(h)
    store = MemoryStatusStore()
    d = desired([host("h0"), host("h1"), host("h2")])
    with pytest.raises(TerminalError, match="no host of cluster .* could be observed"):
        run_round(d, ports(fake, store), RoundOptions(act=True))
    assert store.saves == 1
    status = store.status
    assert status is not None
    stalled = status.condition(ConditionType.STALLED)
    assert stalled is not None
    assert stalled.status
    assert status.last_result is not None
    assert status.last_result.outcome is RoundOutcome.FAILED


# --- limits, as a property -----------------------------------------------------------------


def _drain_cluster(data: st.DataObject) -> tuple[FakeCluster, DesiredState]:
    n_hosts = data.draw(st.integers(3, 5))
    hosts = [FakeHost(f"h{i}") for i in range(n_hosts)]
    vms = [
        FakeVm(
            f"vm{i}",
            data.draw(st.sampled_from([h.name for h in hosts])),
            labels={"app": data.draw(st.sampled_from(["web", "db"]))},
            memory=data.draw(st.sampled_from([1, 2, 4])) * GIB,
        )
        for i in range(data.draw(st.integers(2, 12)))
    ]
    fake = FakeCluster("test", hosts, vms, migration_seconds=0.002)
    drained = data.draw(st.sampled_from([h.name for h in hosts]))
    d = desired(
        [
            host(
                h.name,
                maintenance=h.name == drained,
                max_outbound=data.draw(st.integers(1, 3)),
                max_inbound=data.draw(st.integers(1, 3)),
            )
            for h in hosts
        ],
        rules=[
            rule(
                name="web-budget",
                type="disruptionBudget",
                vms={"labels": {"app": "web"}},
                maxConcurrent=data.draw(st.integers(1, 2)),
            )
        ],
        batch=data.draw(st.integers(1, 12)),
        parallel={"cluster": data.draw(st.integers(1, 4))},
        threshold=data.draw(st.sampled_from([5, 50])),
    )
    return fake, d


@settings(max_examples=25)
@given(st.data())
def test_no_limit_is_ever_exceeded_and_no_vm_moves_twice(data: st.DataObject) -> None:
    fake, d = _drain_cluster(data)
    report = run_round(d, ports(fake), RoundOptions(act=True))
    spec = d.policy.spec
    hosts = {h.name: h for h in d.cluster.spec.hosts}
    web = {v.name for v in fake.vms.values() if v.labels["app"] == "web"}
    budget = d.rules.spec.rules[0].max_concurrent  # type: ignore[union-attr]
    for move, running in fake.migrations:
        now = [*running, move]
        assert len(now) <= spec.parallel.cluster
        out: Counter[str] = Counter(m.source for m in now)
        inn: Counter[str] = Counter(m.target for m in now)
        for name, h in hosts.items():
            assert out[name] <= (h.migration.max_outbound or 2)
            assert inn[name] <= (h.migration.max_inbound or 2)
        assert sum(m.vm in web for m in now) <= budget
    migrated = [m.vm for m, _ in fake.migrations]
    assert len(migrated) == len(set(migrated)), "a VM migrated twice"
    assert len(migrated) <= spec.batch
    assert report.plan is not None
    assert {r.vm for r in report.results} == {m.vm for m in report.plan.moves}


# --- admit ---------------------------------------------------------------------------------


def test_admit_waits_for_room_an_earlier_move_frees_and_skips_what_is_gone() -> None:
    fake = FakeCluster(
        "test",
        [FakeHost("a", memory=10 * GIB), FakeHost("b", memory=10 * GIB)],
        [FakeVm("big", "a", memory=8 * GIB), FakeVm("small", "b", memory=6 * GIB)],
    )
    d = desired([host("a"), host("b")], hostLimit=100)
    snap = fake.observe()
    swap = [
        Move(
            vm=VmName("small"),
            source=HostName("b"),
            target=HostName("a"),
            memory=6 * GIB,
            vcpus=2,
            reason=Reason.DRIFT,
            detail="x",
            wave=0,
        ),
        Move(
            vm=VmName("big"),
            source=HostName("a"),
            target=HostName("b"),
            memory=8 * GIB,
            vcpus=2,
            reason=Reason.DRIFT,
            detail="x",
            wave=0,
        ),
        Move(
            vm=VmName("ghost"),
            source=HostName("a"),
            target=HostName("b"),
            memory=GIB,
            vcpus=1,
            reason=Reason.DRIFT,
            detail="x",
            wave=0,
        ),
    ]
    verdicts = admit(d, snap, swap, [], fake.clock.now())
    assert [(a.verdict, a.code) for a in verdicts][2] == (Verdict.SKIP, AdmitCode.VM_GONE)
    # Neither fits until the other has left: nothing is forced, nothing is admitted.
    assert all(a.verdict is not Verdict.ADMIT for a in verdicts)


# --- the status, whatever happened -------------------------------------------------------------


class BrokenSource(MemorySource):
    """A source whose record fails with ``error`` (an adapter that broke its port's promise)."""

    def __init__(self, error: BaseException, *args: Any) -> None:
        super().__init__(*args)
        self.error = error

    def record(self, record: Record) -> Recorded:
        raise self.error


def test_a_record_that_fails_with_an_os_error_still_recovers_and_writes_the_status_once() -> None:
    fake = unbalanced()
    listed = {f"vm{i}": "h0" for i in range(6)}
    d = desired(HOSTS3, threshold=10, placement=listed)
    store = MemoryStatusStore()
    recovered: list[str] = []

    def recovery(desired: DesiredState, snapshot: Snapshot, status: ReconcileStatus) -> Any:
        recovered.append(status.cluster)
        return status

    p = ports(fake, store, source=BrokenSource(OSError(28, "No space left on device"), d, listed))
    p.recovery = recovery
    report = run_round(d, p, RoundOptions(act=True))
    assert report.results, "the round moved VMs"
    assert all(r.outcome is MoveOutcome.SUCCEEDED for r in report.results)
    assert recovered == ["test"]
    assert store.saves == 1
    assert report.record_error is not None
    assert "No space left on device" in report.record_error.message
    assert store.status is not None
    ready = store.status.condition(ConditionType.READY)
    assert ready is not None
    assert (ready.status, ready.reason) == (False, "RecordFailed")


def test_a_placement_file_that_cannot_be_written_is_a_failed_record_not_an_escaped_os_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = unbalanced()
    listed = {f"vm{i}": "h0" for i in range(6)}
    d = desired(HOSTS3, threshold=10, placement=listed)
    placement = tmp_path / "placement.yaml"
    placement.write_text(
        "apiVersion: placement/v1alpha1\nkind: Placement\nmetadata:\n  name: test\nspec:\n"
        "  vms:\n" + "".join(f"    {vm}: {h}\n" for vm, h in listed.items())
    )
    source = FolderSource(tmp_path, read=lambda _: d, placement=TextFile(placement))
    source.load()
    store = MemoryStatusStore()

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    report = run_round(d, ports(fake, store, source=source), RoundOptions(act=True))
    assert report.results
    assert report.record_error is not None
    assert isinstance(report.record_error, TerminalError)
    assert store.saves == 1
    assert "    vm0: h0\n" in placement.read_text()
