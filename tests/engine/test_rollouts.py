"""Rollouts carried out on the in-memory fake cluster, the round draining the hosts held out.

Judged from the fake cluster (which VMs ran on a host while its commands ran, where every VM
is) and from the order of the records, with faults injected: a records store that fails, a
hold lost, a VM started on a drained host, a host that does not come back.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from reconciler.core.rollout import Phase
from reconciler.engine.rollouts import RolloutPorts, RolloutRound, carry_out
from reconciler.engine.round import RoundOptions, RoundPorts, run_round
from reconciler.errors import ConfigError
from reconciler.model.base import API_VERSION
from reconciler.model.desired import DesiredState
from reconciler.model.rollout import Rollout
from reconciler.model.rollout_progress import StepOutcome, StepRecord
from reconciler.model.snapshot import VmRunState
from tests.core.builders import desired, host, rule
from tests.fakes import FakeCluster, FakeHost, FakeVm, MemoryStatusStore
from tests.rollout_fakes import FakeHostControl, FakeRolloutCommands, FakeRolloutRecords

HOSTS = ["h0", "h1", "h2"]


def rollout(**spec: Any) -> Rollout:
    body: dict[str, Any] = {
        "hosts": HOSTS,
        "eachHost": {
            "commands": [
                {"name": "upgrade", "argv": ["true"], "timeout": "1m", "safeToRepeat": True}
            ],
            "reboot": {"argv": ["reboot"], "timeout": "1m", "safeToRepeat": False},
        },
    }
    body.update(spec)
    return Rollout.model_validate(
        {"apiVersion": API_VERSION, "kind": "Rollout", "metadata": {"name": "r"}, "spec": body}
    )


class World:
    def __init__(self, r: Rollout, *, vms: int = 6, rules: list[Any] | None = None) -> None:
        self.fake = FakeCluster(
            "test",
            [FakeHost(h) for h in HOSTS],
            [FakeVm(f"vm{i}", HOSTS[i % 3]) for i in range(vms)],
        )
        base = desired([host(h) for h in HOSTS], rules=rules or [])
        self.desired: DesiredState = base.model_copy(update={"rollouts": [r]})
        self.records = FakeRolloutRecords()
        self.commands = FakeRolloutCommands(self.fake)
        self.hosts = FakeHostControl(self.fake)
        self.store = MemoryStatusStore()
        self.max_out = 0
        self.commands.on_run = self.reboot
        self.current: Callable[[], DesiredState] | None = None
        """The desired state as its source holds it now, read before each step begins."""

    def reboot(self, host: str | None, step: str) -> None:
        if step == "reboot" and host is not None:
            self.fake.unreachable(host)

    def ports(self) -> RolloutPorts:
        return RolloutPorts(
            records=self.records,
            commands=self.commands,
            hosts=self.hosts,
            observer=self.fake,
            clock=self.fake.clock,
            desired=self.current,
        )

    def round(self, **kw: Any) -> RolloutRound:
        """One round of run on the active instance: it carries the rollouts on and drains the
        hosts they hold out."""
        round_ports = RoundPorts(
            observer=self.fake,
            migrator=self.fake,
            recorder=self.fake,
            status=self.store,
            clock=self.fake.clock,
            hold=kw.get("hold"),
            rollouts=self.ports(),
        )
        report = run_round(
            self.desired, round_ports, RoundOptions(act=True, holds=True, instance="run@a")
        )
        assert report.rollouts is not None
        done = report.rollouts
        self.max_out = max(self.max_out, len(done.out))
        self.last_status = report.status
        for h in self.fake.hosts.values():  # a rebooted host is back a round later
            h.reachable = True
        self.fake.clock.advance(timedelta(seconds=30))
        return done

    def until_settled(self, rounds: int = 60) -> RolloutRound:
        done = self.round()
        for _ in range(rounds):
            if done.decisions and done.decisions[0].phase in (Phase.DONE, Phase.STOPPED):
                break
            done = self.round()
        return done


def test_a_rollout_patches_every_host_one_at_a_time_with_no_vm_on_it() -> None:
    world = World(rollout())
    last = world.until_settled()
    assert last.decisions[0].phase is Phase.DONE
    steps = [(r.host, r.step) for r in world.commands.ran]
    assert steps == [(h, s) for h in HOSTS for s in ("command/upgrade", "reboot")]
    assert all(r.running_on_host == () for r in world.commands.ran)
    assert world.max_out == 1
    assert sorted(world.fake.vms) == [f"vm{i}" for i in range(6)]
    assert all(v.state is VmRunState.RUNNING for v in world.fake.vms.values())
    records = world.records.load("r").records
    # every step of every host begun and ended, in order, undrain after ready
    for h in HOSTS:
        mine = [(r.step, r.outcome) for r in records if r.host == h]
        assert mine[0] == ("drain", StepOutcome.STARTED)
        assert mine[-1] == ("undrain", StepOutcome.SUCCEEDED)
        assert mine.index(("ready", StepOutcome.SUCCEEDED)) < len(mine) - 1
    # the command's output went with its record
    assert ("exit 0", "done") in [(r.detail, out) for r, out in world.records.outputs]


def test_a_host_that_is_not_ready_stops_the_rollout_there() -> None:
    world = World(
        rollout(
            eachHost={
                "reboot": {"argv": ["x"], "timeout": "1m", "safeToRepeat": True},
                "ready": {"timeout": "2m"},
            }
        )
    )
    world.hosts.not_ready.add("h1")
    last = world.until_settled()
    decision = last.decisions[0]
    assert decision.phase is Phase.STOPPED
    assert decision.stopped_at == ("h1", "ready")
    assert decision.out == ("h1",)
    assert [r.host for r in world.commands.ran] == ["h0", "h1"]  # h2 never touched
    assert not [r for r in world.records.load("r").records if r.host == "h2"]


class _Lost:
    def valid(self) -> bool:
        return False

    def holder(self) -> str | None:
        return "run@b"


def test_no_step_begins_without_the_hold() -> None:
    world = World(rollout())
    done = world.round(hold=_Lost())
    assert world.records.load("r").records == []
    assert done.out == ()
    direct = carry_out(
        world.desired,
        world.fake.observe(),
        world.ports(),
        instance="run@a",
        may_act=lambda: "the hold on the cluster is no longer confirmed",
    )
    assert direct.recorded == []


def test_a_command_does_not_run_when_its_start_cannot_be_recorded() -> None:
    world = World(rollout())
    world.round()  # h0 taken out and emptied by the round
    assert world.commands.ran == []
    world.records.fail_appends = True
    done = world.round()
    assert done.error is not None
    assert world.commands.ran == []


def test_a_vm_started_on_a_drained_host_holds_its_command_back() -> None:
    world = World(rollout())
    world.round()  # h0 taken out and emptied by the round
    assert world.commands.ran == []

    def start_vm_there(record: StepRecord) -> None:
        # a person starts a VM on h0 between the round's look and the command
        if (record.host, record.step, record.outcome) == ("h0", "drain", StepOutcome.SUCCEEDED):
            world.fake.vms["late"] = FakeVm("late", "h0")

    world.records.on_append = start_vm_there
    done = world.round()
    assert world.commands.ran == []  # the fresh look saw the new VM
    assert done.out == ("h0",)  # still held out: the round drains it
    assert world.fake.vms["late"].host != "h0"
    world.records.on_append = None
    world.round()
    assert [(r.host, r.step, r.running_on_host) for r in world.commands.ran][:1] == [
        ("h0", "command/upgrade", ())
    ]


def test_a_pinned_vm_is_shut_down_for_its_hosts_turn_and_started_after() -> None:
    pin = rule(name="p", type="pin", vms={"names": ["vm1"]}, hosts={"names": ["h1"]})
    world = World(rollout(immovable={"action": "shutdown"}), rules=[pin])
    last = world.until_settled()
    assert last.decisions[0].phase is Phase.DONE
    assert world.hosts.shut == [("h1", ("vm1",))]
    assert world.hosts.started == [("h1", ("vm1",))]
    assert world.fake.vms["vm1"].host == "h1"
    assert world.fake.vms["vm1"].state is VmRunState.RUNNING
    assert all(r.running_on_host == () for r in world.commands.ran)


def test_no_balance_move_while_a_rollout_is_in_progress() -> None:
    # every VM on h0, busy: balance would spread them over h1 and h2, the hosts taken next
    world = World(rollout(hosts=["h1", "h2"]), vms=0)
    world.fake.vms.update({f"hot{i}": FakeVm(f"hot{i}", "h0", cpu_used=2.0) for i in range(6)})
    world.desired = world.desired.model_copy(
        update={"policy": desired([host(h) for h in HOSTS], holdRounds=1, threshold=10).policy}
    )
    rounds = 0
    while True:
        done = world.round()
        rounds += 1
        if done.decisions[0].phase is Phase.DONE or rounds > 30:
            break
        assert done.keep_out
        assert all(v.host == "h0" for v in world.fake.vms.values())
    assert rounds > 2
    assert done.decisions[0].phase is Phase.DONE
    world.round()  # done: balance goes on
    assert any(v.host != "h0" for v in world.fake.vms.values())


def test_the_rounds_status_names_where_a_rollout_stopped() -> None:
    world = World(rollout())
    world.commands.fail.add(("h0", "command/upgrade"))
    world.until_settled()
    states = world.last_status.rollouts
    assert [(s.rollout, s.phase, s.out, s.stopped_host, s.stopped_step) for s in states] == [
        ("r", "Stopped", ["h0"], "h0", "command/upgrade")
    ]
    assert states[0].message == "stopped at h0 command/upgrade: exit 1"


def test_every_step_is_recorded_when_it_begins_then_when_it_ends() -> None:
    world = World(rollout(immovable={"action": "shutdown"}))
    assert world.until_settled().decisions[0].phase is Phase.DONE
    records = world.records.load("r").records
    steps: dict[tuple[str | None, str], list[StepOutcome]] = {}
    for r in records:
        steps.setdefault((r.host, r.step), []).append(r.outcome)
    assert {step for _, step in steps} == {
        "drain",
        "shutdown",
        "command/upgrade",
        "reboot",
        "ready",
        "start",
        "undrain",
    }
    for where, outcomes in steps.items():
        # its start first, its outcome last; between them only the ready wait's looks
        assert outcomes[0] is StepOutcome.STARTED, (where, outcomes)
        assert outcomes[-1] is StepOutcome.SUCCEEDED, (where, outcomes)
        assert StepOutcome.STARTED not in outcomes[1:], (where, outcomes)


def test_an_edit_merged_while_a_command_runs_counts_from_the_next_step() -> None:
    world = World(rollout())
    merged: list[DesiredState] = []

    def pause_during_the_first_command(host: str | None, step: str) -> None:
        world.reboot(host, step)
        if not merged:  # a person merges spec.paused: true while h0's upgrade runs
            paused = rollout(paused=True)
            merged.append(world.desired.model_copy(update={"rollouts": [paused]}))

    world.commands.on_run = pause_during_the_first_command
    world.current = lambda: merged[-1] if merged else world.desired
    world.round()  # h0 taken out and emptied by the round
    done = world.round()
    assert [(r.host, r.step) for r in world.commands.ran] == [("h0", "command/upgrade")]
    assert done.decisions[0].phase is Phase.PAUSED
    assert done.out == ("h0",)  # out, and held out while paused
    steps = [(r.host, r.step, r.outcome.value) for r in world.records.load("r").records]
    assert steps[-1] == ("h0", "command/upgrade", "succeeded")  # the reboot never began


def test_a_desired_state_that_cannot_be_read_again_begins_no_step() -> None:
    world = World(rollout())
    broken: list[str] = []

    def read() -> DesiredState:
        if broken:
            raise ConfigError("rollouts/r.yaml:3:1: error: spec: invalid", hint="fix it")
        return world.desired

    def break_during_the_first_command(host: str | None, step: str) -> None:
        world.reboot(host, step)
        broken.append(step)

    world.commands.on_run = break_during_the_first_command
    world.current = read
    world.round()  # h0 taken out and emptied by the round
    done = world.round()
    assert done.error is None
    assert [(r.host, r.step) for r in world.commands.ran] == [("h0", "command/upgrade")]
    steps = [(r.host, r.step, r.outcome.value) for r in world.records.load("r").records]
    # the command's outcome is recorded (it ends a step); nothing begins after it
    assert steps[-1] == ("h0", "command/upgrade", "succeeded")
    assert done.out == ("h0",)
