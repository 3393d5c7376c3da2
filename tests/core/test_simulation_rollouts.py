"""Rollouts in ``simulate``: played by the same decision ``run`` carries out
(``core.rollout.next_actions_all``), their hosts held out of the round's plan as in ``run``,
each step that runs a command taking its simulated time, and their figures in the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from reconciler.core.simulation.meter import Meter
from reconciler.core.simulation.replay import Decision, RunDecider, replay
from reconciler.core.simulation.setup import simulated
from reconciler.core.simulation.world import World
from reconciler.model.desired import DesiredState
from reconciler.model.rollout_progress import UNDRAIN, StepOutcome, StepRecord
from reconciler.model.simulation import HostKind, PolicyFigures, PowerCurve, SimulatedMove
from reconciler.report.simulation_report import (
    simulation_json,
    simulation_markdown,
    simulation_text,
)
from tests.core.builders import GIB, desired, host, rule
from tests.core.rollout_world import command, rollout
from tests.core.test_simulation import trace

SMALL = HostKind(name="small", cpus=8, memory=32 * GIB, power=PowerCurve(idle=100, peak=200))
HOSTS = ["h1", "h2", "h3", "h4"]
ROLLED = ["h3", "h1", "h2"]
"""The rollout's hosts, in its order (not the cluster's): 3 of 4."""
VMS = 8
START_ON = {f"vm-{i}": HOSTS[i % 4] for i in range(VMS)}
STEP = 600.0


def kernel(**spec: Any) -> dict[str, Any]:
    return {
        "hosts": ROLLED,
        "before": [command("noout", timeout="30m")],
        "eachHost": {
            "commands": [command("upgrade", timeout="1h")],
            "reboot": {"argv": ["reboot"], "timeout": "30m", "safeToRepeat": False},
        },
        "after": [command("unset-noout", timeout="30m")],
        **spec,
    }


def cluster(**spec: Any) -> DesiredState:
    base = desired(
        [host(h) for h in HOSTS],
        placement=dict(START_ON),
        mode="apply",
        interval="5m",
        threshold=100,
        load={"window": "10m", "sampleEvery": "30s"},
        cooldown="10m",
        minUptime="0s",
    )
    return base.model_copy(update={"rollouts": [rollout(kernel(**spec), name="kernel")]})


ROWS = [[0.5] * 48 for _ in range(VMS)]


@dataclass
class Watched(RunDecider):
    """The product's decider, keeping what each round's decision planned."""

    planned: list[Decision] = field(default_factory=list)

    def decide(self, world: World, now: datetime) -> Decision:
        d = super().decide(world, now)
        self.planned.append(d)
        return d


def played(d: DesiredState) -> tuple[PolicyFigures, list[StepRecord], list[Decision]]:
    t = trace(ROWS)
    kinds = {h: SMALL for h in HOSTS}
    world = World(d, t, kinds, START_ON)
    decider = Watched(d, rollout_step=STEP)
    figures = replay(world, decider, Meter(), interval=timedelta(minutes=5))
    assert decider.rollouts is not None
    return figures, decider.rollouts.records["kernel"], decider.planned


def seconds(r: StepRecord) -> float:
    return (r.at - trace(ROWS).start).total_seconds()


def where_at(moves: list[SimulatedMove], vm: str, t: float) -> str:
    """Where ``vm`` is at ``t``: its start host, then each completed move that landed by then
    (a moving VM is on both hosts: its source until it lands)."""
    host = START_ON[vm]
    for m in moves:
        if m.vm == vm and not m.aborted and m.at + m.seconds <= t:
            host = m.target
    return host


def on_host_during(moves: list[SimulatedMove], host: str, start: float, end: float) -> list[str]:
    """VMs on ``host`` at any time in [start, end]: there at ``start``, or moving to it
    meanwhile (a moving VM counts on both hosts)."""
    return [
        vm
        for vm in START_ON
        if where_at(moves, vm, start) == host
        or any(
            m.vm == vm and m.target == host and m.at < end and m.at + m.seconds > start
            for m in moves
        )
    ]


def test_every_host_is_rolled_in_order_and_runs_no_vm_while_its_steps_run() -> None:
    figures, records, _ = played(cluster())
    given_back = [
        r.host for r in records if r.step == UNDRAIN and r.outcome is StepOutcome.SUCCEEDED
    ]
    assert given_back == ROLLED
    (rolled,) = figures.rollouts
    assert (rolled.rollout, rolled.phase, rolled.hosts, rolled.rolled) == ("kernel", "Done", 3, 3)
    assert rolled.began == 0.0
    assert rolled.ended is not None
    assert rolled.seconds == rolled.ended - rolled.began
    # every step that runs a command took the simulated step, one after the other
    commands = [
        r for r in records if r.step.startswith(("command/", "reboot", "before/", "after/"))
    ]
    starts = [r for r in commands if r.outcome is StepOutcome.STARTED]
    ends = [r for r in commands if r.outcome is StepOutcome.SUCCEEDED]
    assert len(starts) == len(ends) == 2 + 2 * 3
    for s, e in zip(starts, ends, strict=True):
        assert (s.host, s.step) == (e.host, e.step)
        assert seconds(e) - seconds(s) == STEP
        if s.host is not None:
            on = on_host_during(figures.moves, s.host, seconds(s), seconds(e))
            assert on == [], f"{on} on {s.host} during its {s.step}"
    assert rolled.seconds >= STEP * len(starts)
    # h4 is never rolled; the last host is back before the rollout's last step ends
    assert all(r.host != "h4" for r in records)


def test_the_moves_are_those_runs_decision_made_off_the_held_hosts() -> None:
    figures, records, planned = played(cluster())
    (rolled,) = figures.rollouts
    maintenance = [m for m in figures.moves if m.reason == "Maintenance"]
    assert all(not m.aborted for m in figures.moves)
    assert len(figures.moves) == figures.migrations  # threshold 100: no balance move
    assert rolled.moves == len(maintenance) == figures.migrations > 0
    decided = [m for d in planned for m in d.moves if m.reason.value == "Maintenance"]
    assert [(m.vm, m.source, m.target) for m in decided] == [
        (m.vm, m.source, m.target) for m in maintenance
    ]
    # each host's VMs at its drain left it, and only they left it while it was held out
    for h in ROLLED:
        drain = next(r for r in records if r.host == h and r.step == "drain")
        back = next(r for r in records if r.host == h and r.step == UNDRAIN)
        there = sorted(vm for vm in START_ON if where_at(figures.moves, vm, seconds(drain)) == h)
        left = sorted(
            m.vm for m in maintenance if m.source == h and seconds(drain) <= m.at <= seconds(back)
        )
        assert there
        assert left == there
        assert not [
            m.vm for m in figures.moves if m.target == h and seconds(drain) <= m.at < seconds(back)
        ], f"a VM moved to {h} while it was held out"


def test_a_rollout_waits_for_its_window_at_the_simulated_time() -> None:
    start = trace(ROWS).start  # a Monday at midnight, UTC
    opens = (start + timedelta(hours=1)).strftime("%M %H * * *")
    window = {"schedule": opens, "duration": "6h", "timezone": "UTC"}
    figures, records, _ = played(cluster(windows=[window]))
    (rolled,) = figures.rollouts
    assert rolled.began == 3600.0
    assert min(seconds(r) for r in records) == 3600.0
    assert all(m.at >= 3600.0 for m in figures.moves)


def test_a_vm_that_cannot_leave_is_shut_down_for_its_hosts_turn_and_asks_nothing() -> None:
    pinned = rule(name="erp-pinned", type="pin", vms={"names": ["vm-0"]}, hosts={"names": ["h1"]})
    base = cluster(immovable={"action": "shutdown"})
    rules = base.rules.model_copy(
        update={"spec": base.rules.spec.model_copy(update={"rules": [pinned]})}
    )
    d = base.model_copy(update={"rules": rules})
    t = trace(ROWS)
    world = World(d, t, {h: SMALL for h in HOSTS}, START_ON)
    decider = RunDecider(d, rollout_step=STEP)
    asked: list[tuple[float, float]] = []
    """(time, vm-0's demand) of each step the meter counted."""

    class Watching(Meter):
        def interval(self, t0: float, t1: float, demand: Any, *rest: Any) -> None:
            asked.append((t0, demand[0]))
            super().interval(t0, t1, demand, *rest)

    figures = replay(world, decider, Watching(), interval=timedelta(minutes=5))
    assert decider.rollouts is not None
    records = decider.rollouts.records["kernel"]
    (rolled,) = figures.rollouts
    assert (rolled.phase, rolled.rolled) == ("Done", 3)
    assert all(m.vm != "vm-0" for m in figures.moves)

    def ended(step: str) -> StepRecord:
        return next(
            r for r in records if (r.host, r.step, r.outcome) == ("h1", step, StepOutcome.SUCCEEDED)
        )

    shut, started = ended("shutdown"), ended("start")
    assert (shut.vms, started.vms) == (["vm-0"], ["vm-0"])
    # off from its shutdown until its start (h1's steps meanwhile), asking no CPU
    off = [t for t, d in asked if d == 0.0]
    assert off
    assert off == [t for t, _ in asked if seconds(shut) <= t < seconds(started)]
    assert seconds(started) - seconds(shut) >= 2 * STEP
    assert not world.off  # started again where it was


def test_the_same_inputs_give_the_same_report_byte_for_byte() -> None:
    def report() -> tuple[str, str, str]:
        out = simulated("test", [("p", cluster())], trace(ROWS), {h: SMALL for h in HOSTS})
        return simulation_json(out), simulation_text(out), simulation_markdown(out)

    a, b = report(), report()
    assert a == b
    json_text, text, markdown = a
    assert '"rollouts": [' in json_text
    assert "rollout kernel: hosts rolled" in text
    assert "3 of 3" in text
    assert "| rollout kernel: moves |" in markdown


def test_without_a_rollout_the_report_lists_none() -> None:
    plain = cluster().model_copy(update={"rollouts": []})
    out = simulated("test", [("p", plain)], trace(ROWS), {h: SMALL for h in HOSTS})
    assert out.policies[0].rollouts == []
    assert "rollouts" not in simulation_json(out)
    assert "rollout" not in simulation_text(out)
