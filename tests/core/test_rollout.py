"""Rollout decisions, one example per promise of :mod:`reconciler.core.rollout`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from reconciler.core.rollout import (
    BeginDrain,
    CheckReady,
    Phase,
    Record,
    RunCommand,
    ShutDown,
    StartVms,
    next_actions,
    next_actions_all,
)
from reconciler.core.rollout_hosts import rollout_hosts
from reconciler.core.rollout_steps import host_steps
from reconciler.core.rollout_vms import evacuation, host_vms, with_hosts_out
from reconciler.model.history import History
from reconciler.model.rollout_progress import StepOutcome, StepRecord
from reconciler.model.snapshot import VmRunState
from tests.core.builders import NOW, desired, host, host_state, rule, snapshot, vm
from tests.core.rollout_world import World, command, rollout

HOSTS = ["kvm-01", "kvm-02", "kvm-03"]


def cluster(**kw: Any) -> Any:
    return desired([host(h) for h in HOSTS], **kw)


def snap(*vms: Any, down: tuple[str, ...] = ()) -> Any:
    return snapshot([host_state(h, reachable=h not in down) for h in HOSTS], list(vms))


def spec(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "hosts": HOSTS,
        "eachHost": {"commands": [command("upgrade")], "ready": {"settle": "0s"}},
    }
    base.update(kw)
    return base


def rec(host: str | None, step: str, outcome: str, minutes: float = 0, **kw: Any) -> StepRecord:
    return StepRecord(
        host=host,
        step=step,
        outcome=StepOutcome(outcome),
        at=NOW + timedelta(minutes=minutes),
        **kw,
    )


def test_hosts_come_in_the_order_of_the_names_then_the_clusters() -> None:
    d = desired([host("b-2"), host("a-1"), host("c-3"), host("b-1")])
    r = rollout({"hosts": ["c-*", "b-*", "a-1"]})
    assert rollout_hosts(r, d.cluster) == ["c-3", "b-2", "b-1", "a-1"]
    assert rollout_hosts(rollout({"hosts": {"names": ["*"]}}), d.cluster) == [
        "b-2",
        "a-1",
        "c-3",
        "b-1",
    ]


def test_the_steps_of_a_host() -> None:
    r = rollout(
        spec(
            immovable={"action": "shutdown"},
            eachHost={
                "commands": [command("a"), command("b")],
                "reboot": {"argv": ["reboot"], "timeout": "1m", "safeToRepeat": False},
            },
        )
    )
    assert host_steps(r) == [
        "drain",
        "shutdown",
        "command/a",
        "command/b",
        "reboot",
        "ready",
        "start",
        "undrain",
    ]
    assert host_steps(rollout(spec())) == ["drain", "command/upgrade", "ready", "undrain"]


def test_a_rollout_begins_with_its_steps_before_then_takes_the_first_host() -> None:
    r = rollout(spec(before=[command("noout")]))
    first = next_actions(r, cluster(), snap(), [], now=NOW)
    assert [type(a) for a in first.actions] == [RunCommand]
    assert first.actions[0] == RunCommand(None, "before/noout", r.spec.before[0])
    assert first.keep_out == ("kvm-01",)
    done = [rec(None, "before/noout", "started"), rec(None, "before/noout", "succeeded")]
    second = next_actions(r, cluster(), snap(), done, now=NOW)
    assert second.actions == (BeginDrain("kvm-01"),)


def test_one_host_out_at_a_time_and_two_with_max_unavailable_2() -> None:
    one = next_actions(rollout(spec()), cluster(), snap(), [], now=NOW)
    assert one.actions == (BeginDrain("kvm-01"),)
    two = next_actions(rollout(spec(maxUnavailable=2)), cluster(), snap(), [], now=NOW)
    assert two.actions == (BeginDrain("kvm-01"), BeginDrain("kvm-02"))
    assert two.keep_out == ("kvm-01", "kvm-02")


def test_an_unavailable_host_counts_toward_max_unavailable() -> None:
    d = desired([host("kvm-01"), host("kvm-02"), host("kvm-03", maintenance=True)])
    decision = next_actions(rollout(spec()), d, snap(), [], now=NOW)
    assert decision.actions == ()
    assert "kvm-03 (in maintenance)" in decision.notes[0]
    down = next_actions(rollout(spec()), cluster(), snap(down=("kvm-02",)), [], now=NOW)
    assert down.actions == ()
    assert "kvm-02 (not answering)" in down.notes[0]
    # the host itself in maintenance does not block its own turn
    own = desired([host("kvm-01", maintenance=True), host("kvm-02"), host("kvm-03")])
    assert next_actions(rollout(spec()), own, snap(), [], now=NOW).actions == (
        BeginDrain("kvm-01"),
    )


def test_the_drain_ends_when_nothing_that_must_leave_is_left() -> None:
    r = rollout(spec())
    began = [rec("kvm-01", "drain", "started")]
    busy = next_actions(r, cluster(), snap(vm("a", "kvm-01")), began, now=NOW)
    assert busy.actions == ()
    assert busy.out == ("kvm-01",)
    assert busy.notes == ("kvm-01 is being drained: a to leave",)
    assert busy.wake_at == NOW + timedelta(seconds=10)
    empty = next_actions(r, cluster(), snap(vm("a", "kvm-02")), began, now=NOW)
    assert [type(a) for a in empty.actions] == [Record]
    assert empty.actions[0] == Record(
        "kvm-01", "drain", StepOutcome.SUCCEEDED, "kvm-01 runs no VM that can leave"
    )


def test_a_drain_past_its_timeout_fails_and_stops_the_rollout() -> None:
    r = rollout(spec())
    began = [rec("kvm-01", "drain", "started")]
    late = next_actions(r, cluster(), snap(vm("a", "kvm-01")), began, now=NOW + timedelta(hours=1))
    assert late.actions == (
        Record("kvm-01", "drain", StepOutcome.FAILED, "kvm-01 still runs a after drainTimeout 1h"),
    )
    failed = [*began, rec("kvm-01", "drain", "failed", 60, detail="x")]
    stopped = next_actions(r, cluster(), snap(vm("a", "kvm-01")), failed, now=NOW)
    assert stopped.phase is Phase.STOPPED
    assert stopped.stopped_at == ("kvm-01", "drain")
    assert stopped.out == ("kvm-01",)
    assert stopped.actions == ()


def test_commands_wait_while_a_vm_runs_on_the_host() -> None:
    r = rollout(spec())
    drained = [rec("kvm-01", "drain", "started"), rec("kvm-01", "drain", "succeeded")]
    # a VM started on the host after its drain: the command waits, the planner drains it
    again = next_actions(r, cluster(), snap(vm("late", "kvm-01")), drained, now=NOW)
    assert again.actions == ()
    assert again.notes == ("kvm-01 command/upgrade waits: late runs on kvm-01",)
    assert again.out == ("kvm-01",)
    empty = next_actions(r, cluster(), snap(vm("late", "kvm-02")), drained, now=NOW)
    assert empty.actions == (RunCommand("kvm-01", "command/upgrade", r.spec.each_host.commands[0]),)
    unseen = next_actions(r, cluster(), snap(down=("kvm-01",)), drained, now=NOW)
    assert unseen.actions == ()


def test_a_pinned_vm_blocks_its_host_before_anything_starts() -> None:
    pin = rule(name="erp-pin", type="pin", vms={"names": ["erp"]}, hosts={"names": ["kvm-02"]})
    d = cluster(rules=[pin])
    r = rollout(spec())
    s = snap(vm("erp", "kvm-02"), vm("web", "kvm-02"))
    done1 = [
        rec("kvm-01", step, outcome)
        for step in ("drain", "command/upgrade", "ready", "undrain")
        for outcome in ("started", "succeeded")
    ]
    decision = next_actions(r, d, s, done1, now=NOW)
    assert decision.phase is Phase.BLOCKED
    assert decision.actions == ()
    assert [(b.vm, b.host, b.rule) for b in decision.blocked] == [("erp", "kvm-02", "erp-pin")]
    assert decision.notes == (
        "kvm-02 is blocked: erp is pinned to kvm-02 by rule erp-pin (immovable.action: block)",
    )
    assert host_vms(d, s, "kvm-02").leaving == ("web",)
    # shutdown instead of block: the host is taken, erp is shut down after the drain
    shut = rollout(spec(immovable={"action": "shutdown", "shutdownTimeout": "2m"}))
    assert next_actions(shut, d, s, done1, now=NOW).actions == (BeginDrain("kvm-02"),)
    drained = [*done1, rec("kvm-02", "drain", "started")]
    moved = snap(vm("erp", "kvm-02"), vm("web", "kvm-03"))
    ended = next_actions(shut, d, moved, drained, now=NOW)
    assert ended.actions == (
        Record(
            "kvm-02",
            "drain",
            StepOutcome.SUCCEEDED,
            "kvm-02 runs no VM that can leave; staying: erp",
        ),
    )
    after = [*drained, rec("kvm-02", "drain", "succeeded")]
    assert next_actions(shut, d, moved, after, now=NOW).actions == (
        ShutDown("kvm-02", ("erp",), timedelta(minutes=2)),
    )
    off = [
        *after,
        rec("kvm-02", "shutdown", "started", vms=["erp"]),
        rec("kvm-02", "shutdown", "succeeded", vms=["erp"]),
        rec("kvm-02", "command/upgrade", "started"),
        rec("kvm-02", "command/upgrade", "succeeded"),
        rec("kvm-02", "ready", "started"),
        rec("kvm-02", "ready", "succeeded"),
    ]
    stopped = moved.model_copy(
        update={"vms": [v.model_copy(update={"state": VmRunState.SHUTOFF}) for v in moved.vms]}
    )
    assert next_actions(shut, d, stopped, off, now=NOW).actions == (StartVms("kvm-02", ("erp",)),)


def test_a_shut_off_vm_that_cannot_move_does_not_block() -> None:
    pin = rule(name="p", type="pin", vms={"names": ["off"]}, hosts={"names": ["kvm-01"]})
    off = vm("off", "kvm-01").model_copy(update={"state": VmRunState.SHUTOFF})
    decision = next_actions(rollout(spec()), cluster(rules=[pin]), snap(off), [], now=NOW)
    assert decision.actions == (BeginDrain("kvm-01"),)


def test_ready_waits_checks_settles_and_only_then_undrains() -> None:
    check = {"name": "k", "argv": ["true"], "timeout": "5s"}
    r = rollout(
        spec(
            eachHost={
                "commands": [command("upgrade")],
                "ready": {"checks": [check], "settle": "2m", "timeout": "10m", "interval": "15s"},
            }
        )
    )
    ran = [
        rec("kvm-01", step, outcome)
        for step in ("drain", "command/upgrade")
        for outcome in ("started", "succeeded")
    ]
    first = next_actions(r, cluster(), snap(), ran, now=NOW)
    checks = tuple(r.spec.each_host.ready.checks)
    assert first.actions == (CheckReady("kvm-01", checks, begin=True),)
    waiting = [*ran, rec("kvm-01", "ready", "started")]
    again = next_actions(r, cluster(), snap(), waiting, now=NOW + timedelta(minutes=1))
    assert again.actions == (CheckReady("kvm-01", checks),)
    assert again.wake_at == NOW + timedelta(minutes=1, seconds=15)
    passed = [*waiting, rec("kvm-01", "ready", "passed", 3)]
    settling = next_actions(r, cluster(), snap(), passed, now=NOW + timedelta(minutes=4))
    assert settling.actions == ()
    assert settling.wake_at == NOW + timedelta(minutes=5)
    final = next_actions(r, cluster(), snap(), passed, now=NOW + timedelta(minutes=5))
    assert final.actions == (CheckReady("kvm-01", checks, final=True),)
    late = next_actions(r, cluster(), snap(), waiting, now=NOW + timedelta(minutes=10))
    assert late.actions == (
        Record("kvm-01", "ready", StepOutcome.FAILED, "kvm-01 was not ready within 10m"),
    )
    ready = [*passed, rec("kvm-01", "ready", "succeeded", 5)]
    back = next_actions(r, cluster(), snap(), ready, now=NOW + timedelta(minutes=5))
    # the undrain is recorded when it begins, as every step, then when it ends
    assert back.actions == (Record("kvm-01", "undrain", StepOutcome.STARTED, ""),)
    giving = [*ready, rec("kvm-01", "undrain", "started", 5)]
    given = next_actions(r, cluster(), snap(), giving, now=NOW + timedelta(minutes=5))
    assert given.out == ("kvm-01",)
    assert given.actions == (
        Record("kvm-01", "undrain", StepOutcome.SUCCEEDED, "kvm-01 is ready and back in service"),
    )


def test_an_interrupted_step_is_repeated_only_when_safe_and_after_its_timeout() -> None:
    safe = rollout(spec())
    began = [
        rec("kvm-01", "drain", "started"),
        rec("kvm-01", "drain", "succeeded"),
        rec("kvm-01", "command/upgrade", "started", by="run-a"),
    ]
    early = next_actions(safe, cluster(), snap(), began, now=NOW + timedelta(seconds=30))
    assert early.actions == ()
    assert early.wake_at == NOW + timedelta(minutes=1)
    assert "began at" in early.notes[0]
    assert "by run-a" in early.notes[0]
    late = next_actions(safe, cluster(), snap(), began, now=NOW + timedelta(minutes=1))
    assert late.actions == (
        RunCommand("kvm-01", "command/upgrade", safe.spec.each_host.commands[0], again=True),
    )
    unsafe = rollout(spec(eachHost={"commands": [command("upgrade", safe=False)]}))
    stop = next_actions(unsafe, cluster(), snap(), began, now=NOW + timedelta(minutes=1))
    assert len(stop.actions) == 1
    action = stop.actions[0]
    assert isinstance(action, Record)
    assert (action.host, action.step, action.outcome) == (
        "kvm-01",
        "command/upgrade",
        StepOutcome.FAILED,
    )
    assert "not safeToRepeat" in action.detail


def test_paused_begins_nothing_but_brings_hosts_back() -> None:
    r = rollout(spec(paused=True))
    assert next_actions(r, cluster(), snap(), [], now=NOW).actions == ()
    assert next_actions(r, cluster(), snap(), [], now=NOW).phase is Phase.PAUSED
    drained = [rec("kvm-01", "drain", "started"), rec("kvm-01", "drain", "succeeded")]
    held = next_actions(r, cluster(), snap(), drained, now=NOW)
    assert held.actions == ()
    assert held.out == ("kvm-01",)
    ran = [
        *drained,
        rec("kvm-01", "command/upgrade", "started"),
        rec("kvm-01", "command/upgrade", "succeeded"),
    ]
    back = next_actions(r, cluster(), snap(), ran, now=NOW)
    assert [type(a) for a in back.actions] == [CheckReady]


def test_hosts_are_taken_out_only_inside_a_window() -> None:
    window = {"schedule": "0 22 * * *", "duration": "2h"}
    r = rollout(spec(windows=[window]))
    noon = next_actions(r, cluster(), snap(), [], now=NOW)
    assert noon.actions == ()
    assert noon.wake_at == NOW.replace(hour=22)
    night = next_actions(r, cluster(), snap(), [], now=NOW.replace(hour=23))
    assert night.actions == (BeginDrain("kvm-01"),)
    # a host already out is finished after the window closed
    drained = [rec("kvm-01", "drain", "started"), rec("kvm-01", "drain", "succeeded")]
    day = next_actions(r, cluster(), snap(), drained, now=NOW)
    assert [type(a) for a in day.actions] == [RunCommand]


def test_steps_after_run_once_every_host_is_done() -> None:
    r = rollout(spec(hosts=["kvm-01"], after=[command("unset")]))
    done = [
        rec("kvm-01", step, outcome)
        for step in ("drain", "command/upgrade", "ready", "undrain")
        for outcome in ("started", "succeeded")
    ]
    assert next_actions(r, cluster(), snap(), done, now=NOW).actions == (
        RunCommand(None, "after/unset", r.spec.after[0]),
    )
    finished = [*done, rec(None, "after/unset", "started"), rec(None, "after/unset", "succeeded")]
    last = next_actions(r, cluster(), snap(), finished, now=NOW)
    assert last.phase is Phase.DONE
    assert last.keep_out == ()


def test_one_rollout_at_a_time() -> None:
    a, b = rollout(spec(), name="a"), rollout(spec(hosts=["kvm-03"]), name="b")
    d = cluster().model_copy(update={"rollouts": [a, b]})
    fresh = next_actions_all(d, snap(), {}, now=NOW)
    assert [x.actions for x in fresh] == [(BeginDrain("kvm-01"),), ()]
    assert fresh[1].notes == ("waits for rollout a: one rollout at a time",)
    # b began earlier (a was added later): b goes on, a waits
    began = {"b": [rec("kvm-03", "drain", "started")]}
    later = next_actions_all(d, snap(), began, now=NOW)
    assert later[0].actions == ()
    assert later[1].out == ("kvm-03",)


def test_evacuation_and_hosts_out() -> None:
    d = cluster()
    s = snap(vm("a", "kvm-01"), vm("b", "kvm-01"), vm("c", "kvm-02"))
    out = with_hosts_out(d, ["kvm-01"])
    assert [h.maintenance for h in out.cluster.spec.hosts] == [True, False, False]
    assert with_hosts_out(d, []) is d
    plan = evacuation(d, s, History(), "kvm-01", now=NOW)
    assert sorted(m.vm for m in plan.moves) == ["a", "b"]
    assert {m.source for m in plan.moves} == {"kvm-01"}
    assert "kvm-01" not in {m.target for m in plan.moves}


def test_a_whole_rollout_in_the_world() -> None:
    vms = [vm(f"v{i}", HOSTS[i % 3]) for i in range(6)]
    world = World(
        cluster(), rollout(spec(before=[command("noout")], after=[command("unset")])), vms
    )
    last = world.run_until_settled()
    assert last.phase is Phase.DONE
    commands = [(r.host, r.step) for r in world.ran]
    assert commands == [
        (None, "before/noout"),
        ("kvm-01", "command/upgrade"),
        ("kvm-02", "command/upgrade"),
        ("kvm-03", "command/upgrade"),
        (None, "after/unset"),
    ]
    assert all(r.running_on_host == () for r in world.ran)
    assert world.max_out_seen == 1
    assert sorted(v.name for v in world.vms) == [f"v{i}" for i in range(6)]


def test_a_person_resumes_a_stopped_rollout_by_retrying_or_skipping_the_step() -> None:
    failed_at = NOW + timedelta(minutes=30)
    records = [
        rec("kvm-01", step, outcome)
        for step in ("drain", "command/upgrade")
        for outcome in ("started", "succeeded")
    ] + [
        rec("kvm-01", "ready", "started", 1),
        rec("kvm-01", "ready", "failed", 30, detail="kvm-01 was not ready within 30m"),
    ]
    stopped = next_actions(rollout(spec()), cluster(), snap(), records, now=failed_at)
    assert stopped.phase is Phase.STOPPED
    assert stopped.notes[1] == (
        'to go on, add to spec.resume: {host: kvm-01, step: ready, failedAt: "'
        '2025-03-01T12:30:00+00:00", then: retry} (or then: skip when it was done by hand)'
    )
    entry = {"host": "kvm-01", "step": "ready", "failedAt": failed_at.isoformat()}
    retry = rollout(spec(resume=[{**entry, "then": "retry"}]))
    again = next_actions(retry, cluster(), snap(), records, now=failed_at)
    assert again.phase is Phase.IN_PROGRESS
    assert again.actions == (CheckReady("kvm-01", (), begin=True),)
    skip = rollout(spec(resume=[{**entry, "then": "skip"}]))
    on = next_actions(skip, cluster(), snap(), records, now=failed_at)
    assert on.actions == (Record("kvm-01", "undrain", StepOutcome.STARTED, ""),)
    # a later failure of the same step is not covered by the entry: it stops again
    later = [
        *records,
        rec("kvm-01", "ready", "started", 40),
        rec("kvm-01", "ready", "failed", 70, detail="again"),
    ]
    assert next_actions(retry, cluster(), snap(), later, now=failed_at).phase is Phase.STOPPED
