"""The pure decisions of a recovery step: what to do about a host that does not answer, its
record after a fence, and which sighting of each VM is kept."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from reconciler.core.recovery_round import (
    HostVerdict,
    after_fence,
    host_next,
    remembered,
)
from reconciler.model.recovery import (
    FenceOutcome,
    FenceResult,
    RecoveryState,
    SavedVm,
)
from reconciler.model.snapshot import VmRunState
from tests.core.builders import GIB, NOW, host_state, snapshot, vm

GRACE = timedelta(seconds=60)
seconds = st.integers(min_value=0, max_value=3600).map(lambda s: timedelta(seconds=s))


@given(seconds, seconds, st.booleans(), st.booleans(), st.integers(0, 8))
def test_nothing_is_restarted_before_a_confirmed_fence_nor_fenced_before_its_time(
    unreachable: timedelta, since_fence: timedelta, has_fence: bool, act: bool, attempts: int
) -> None:
    since = NOW - unreachable
    record = None
    if attempts:
        result = FenceResult(outcome=FenceOutcome.TIMEOUT)
        for _ in range(attempts):
            record = after_fence(record, since, result, NOW - since_fence)
    step = host_next(record, since, NOW, grace=GRACE, has_fence=has_fence, act=act)
    assert step.verdict is not HostVerdict.RESTART  # never fenced: never restarted
    if step.verdict is HostVerdict.FENCE:
        assert act
        assert has_fence
        assert record is not None or unreachable >= GRACE
        assert record is None or record.next_attempt_at is None or record.next_attempt_at <= NOW
    if record is None and unreachable < GRACE:
        assert step.verdict is HostVerdict.WAIT
        assert step.until == since + GRACE


def test_a_confirmed_fence_makes_the_host_restartable_in_a_step_that_acts() -> None:
    record = after_fence(None, NOW, FenceResult(outcome=FenceOutcome.OK), NOW)
    assert record.fenced_at == NOW
    assert host_next(record, NOW, NOW, grace=GRACE, has_fence=True, act=True).verdict is (
        HostVerdict.RESTART
    )
    assert host_next(record, NOW, NOW, grace=GRACE, has_fence=True, act=False).verdict is (
        HostVerdict.FENCED_LOOK
    )


def test_failed_fences_back_off_15_30_60_seconds() -> None:
    record = None
    waits = []
    for _ in range(3):
        record = after_fence(record, NOW, FenceResult(outcome=FenceOutcome.FAILED), NOW)
        assert record.next_attempt_at is not None
        waits.append((record.next_attempt_at - NOW).total_seconds())
    assert waits == [15, 30, 60]
    assert record is not None
    assert record.attempts == 3
    assert record.fenced_at is None


def saved(name: str, on: str, *, running: bool = True) -> SavedVm:
    return SavedVm(
        name=name,
        uuid=f"uuid-{name}",
        host=on,
        running=running,
        vcpus=1,
        memory=GIB,
        xml="<domain/>",
        seen_at=NOW - timedelta(hours=1),
    )


def test_a_shut_off_copy_never_replaces_a_vm_running_on_a_host_that_does_not_answer() -> None:
    state = RecoveryState(cluster="test", vms={"uuid-web": saved("web", "h2")})
    copy = vm("web", "h1").model_copy(update={"state": VmRunState.SHUTOFF})
    seen = snapshot([host_state("h1"), host_state("h2", reachable=False)], [copy])
    kept = remembered(state, seen, {"h1": {"uuid-web": "<domain/>"}}, NOW)
    assert kept["uuid-web"].host == "h2"
    assert kept["uuid-web"].running


def test_a_host_whose_definitions_cannot_be_read_keeps_what_was_saved_of_it() -> None:
    state = RecoveryState(cluster="test", vms={"uuid-web": saved("web", "h1")})
    seen = snapshot([host_state("h1")], [vm("web", "h1", memory_gib=8)])
    assert remembered(state, seen, {"h1": None}, NOW) == state.vms
    fresh = remembered(state, seen, {"h1": {"uuid-web": "<domain>new</domain>"}}, NOW)
    assert fresh["uuid-web"].memory == 8 * GIB
    assert fresh["uuid-web"].seen_at == NOW
