"""What a recovery step of a fenced host decides before it does anything: which VMs it starts
and where, which earlier starts it finds done, and which VMs it reports as not restarted, once."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reconciler.core.recovery import RestartStep, restart_steps
from reconciler.model.recovery import HostRecovery, RecoveryState, RestartIntent, SavedVm
from reconciler.model.snapshot import Snapshot, VmRunState, VmState
from tests.core.builders import GIB, NOW, desired, host, host_state, snapshot, vm

D = desired([host("h0"), host("h1"), host("h2")], recovery={"enabled": True})
DEAD = "h0"
RECORD = HostRecovery(unreachable_since=NOW, fenced_at=NOW)


def saved(name: str, *, running: bool = True, blockers: list[str] | None = None) -> SavedVm:
    return SavedVm(
        name=name,
        uuid=f"uuid-{name}",
        host=DEAD,
        running=running,
        vcpus=1,
        memory=GIB,
        xml=f"<domain><name>{name}</name></domain>",
        blockers=blockers or [],
        seen_at=NOW,
    )


def observed(*vms: VmState) -> Snapshot:
    return snapshot(
        [host_state("h0", reachable=False), host_state("h1"), host_state("h2")], list(vms)
    )


def shut_off(name: str, on: str) -> VmState:
    return vm(name, on).model_copy(update={"state": VmRunState.SHUTOFF})


def state(*vms: SavedVm, intents: dict[str, RestartIntent] | None = None) -> RecoveryState:
    return RecoveryState(cluster="test", vms={v.uuid: v for v in vms}, intents=intents or {})


def test_a_vm_that_ran_on_the_fenced_host_is_started_where_the_placer_puts_it() -> None:
    web = saved("web")
    decided = restart_steps(D, observed(vm("x", "h1")), state(web), DEAD, RECORD, {}, now=NOW)
    (step,) = decided.steps
    assert (step.vm, step.target, step.saved) == ("web", "h2", web)  # h1 is busier
    assert decided.intents == {}
    assert decided.not_restarted == {}


def test_an_earlier_start_that_took_effect_is_resolved_and_not_started_again() -> None:
    web = saved("web")
    intent = RestartIntent(vm="web", uuid=web.uuid, source=DEAD, target="h1", started_at=NOW)
    decided = restart_steps(
        D,
        observed(vm("web", "h1")),
        state(web, intents={web.uuid: intent}),
        DEAD,
        RECORD,
        {},
        now=NOW,
    )
    assert decided.steps == []
    assert decided.took_effect == {"web": "h1"}
    assert decided.restarted == {"web": "h1"}
    assert decided.intents == {}


def test_an_open_intent_whose_target_answers_without_the_vm_is_dropped_and_the_vm_started() -> None:
    web = saved("web")
    intent = RestartIntent(vm="web", uuid=web.uuid, source=DEAD, target="h1", started_at=NOW)
    decided = restart_steps(
        D, observed(), state(web, intents={web.uuid: intent}), DEAD, RECORD, {}, now=NOW
    )
    assert decided.intents == {}  # h1 answers and runs no web: that start did not take effect
    assert [s.vm for s in decided.steps] == ["web"]


def hung(on: str) -> Snapshot:
    """h0 fenced, ``on`` not answering (and never fenced), the third host up."""
    return snapshot([host_state(h, reachable=h not in (DEAD, on)) for h in ("h0", "h1", "h2")], [])


def test_an_open_intent_whose_target_stopped_answering_holds_the_vm() -> None:
    web = saved("web")
    intent = RestartIntent(vm="web", uuid=web.uuid, source=DEAD, target="h1", started_at=NOW)
    decided = restart_steps(
        D, hung("h1"), state(web, intents={web.uuid: intent}), DEAD, RECORD, {}, now=NOW
    )
    assert [s.target for s in decided.steps] == [None]  # said, not started
    assert decided.intents == {web.uuid: intent}
    assert "waits until h1 is fenced" in decided.not_restarted["web"]


def test_a_vm_restarted_on_a_host_that_stopped_answering_is_not_restarted_again() -> None:
    record = RECORD.model_copy(update={"restarted": {"web": "h1"}})
    decided = restart_steps(D, hung("h1"), state(saved("web")), DEAD, record, {}, now=NOW)
    assert all(s.target is None for s in decided.steps)
    assert "it may run on h1" in decided.not_restarted["web"]


def test_once_the_silent_target_is_fenced_the_held_vm_is_started_once() -> None:
    web = saved("web")
    intent = RestartIntent(vm="web", uuid=web.uuid, source=DEAD, target="h1", started_at=NOW)
    fenced = {"h1": HostRecovery(unreachable_since=NOW, fenced_at=NOW)}
    decided = restart_steps(
        D,
        hung("h1"),
        state(web, intents={web.uuid: intent}).model_copy(update={"hosts": fenced}),
        DEAD,
        RECORD,
        {},
        now=NOW,
    )
    assert [(s.vm, s.target) for s in decided.steps] == [("web", "h2")]
    assert decided.intents == {}


def test_a_vm_running_elsewhere_already_is_counted_restarted_not_started() -> None:
    decided = restart_steps(
        D, observed(vm("web", "h2")), state(saved("web")), DEAD, RECORD, {}, now=NOW
    )
    assert decided.steps == []
    assert decided.restarted == {"web": "h2"}
    assert decided.took_effect == {}


def test_a_vm_that_was_shut_off_is_left_off() -> None:
    decided = restart_steps(
        D, observed(), state(saved("web", running=False)), DEAD, RECORD, {}, now=NOW
    )
    assert decided.steps == []


def test_a_definition_left_by_a_failed_start_is_started_where_it_is() -> None:
    decided = restart_steps(
        D, observed(shut_off("web", "h1")), state(saved("web")), DEAD, RECORD, {}, now=NOW
    )
    assert [(s.vm, s.target) for s in decided.steps] == [("web", "h1")]


def test_a_vm_that_cannot_run_elsewhere_is_reported_not_restarted() -> None:
    decided = restart_steps(
        D, observed(), state(saved("db", blockers=["local disk"])), DEAD, RECORD, {}, now=NOW
    )
    why = "cannot start elsewhere: local disk"
    assert decided.steps == [RestartStep("db", None, why)]
    assert decided.not_restarted == {"db": why}


def test_vms_no_source_knows_are_reported_once_unless_they_run() -> None:
    unknown = {"b": "no saved definition", "a": "no saved definition", "up": "gone"}
    first = restart_steps(D, observed(vm("up", "h1")), state(), DEAD, RECORD, unknown, now=NOW)
    assert [(s.vm, s.target) for s in first.steps] == [("a", None), ("b", None)]
    assert first.not_restarted == {"a": "no saved definition", "b": "no saved definition"}
    again = restart_steps(
        D,
        observed(vm("up", "h1")),
        state(),
        DEAD,
        RECORD.model_copy(update={"not_restarted": first.not_restarted}),
        unknown,
        now=NOW,
    )
    assert again.steps == []  # said once, not every round
    assert again.not_restarted == first.not_restarted


@given(st.lists(st.sampled_from(["off", "here", "h1", "h2", "left-h1"]), max_size=6))
def test_no_vm_is_started_that_runs_and_every_vm_is_accounted_for(where: list[str]) -> None:
    vms = [saved(f"v{i}") for i in range(len(where))]
    seen: list[VmState] = []
    for v, w in zip(vms, where, strict=True):
        if w in ("h1", "h2"):
            seen.append(vm(v.name, w))
        elif w == "left-h1":
            seen.append(shut_off(v.name, "h1"))
    decided = restart_steps(D, observed(*seen), state(*vms), DEAD, RECORD, {}, now=NOW)
    running = {v.name for v in seen if v.state is VmRunState.RUNNING}
    started = {s.vm for s in decided.steps if s.target is not None}
    assert not started & running
    assert started | set(decided.not_restarted) | set(decided.restarted) == {v.name for v in vms}
    for s in decided.steps:
        assert s.saved is None or s.saved.name == s.vm
