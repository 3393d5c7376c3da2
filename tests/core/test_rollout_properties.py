"""Properties of rollouts carried out in a small world, with crashes and failures injected.

Judged from the world (which VMs ran where while each command ran, how many hosts were out)
and from the order of the records, never from the decisions' own words.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.rollout import Phase
from reconciler.model.rollout_progress import StepOutcome
from tests.core.builders import desired, host, rule, vm
from tests.core.rollout_world import World, command, rollout


@st.composite
def worlds(draw: st.DrawFn) -> tuple[World, dict[str, Any]]:
    n = draw(st.integers(2, 5))
    names = [f"kvm-{i}" for i in range(n)]
    vms = [
        vm(f"v{i}", draw(st.sampled_from(names)), memory_gib=draw(st.integers(1, 8)))
        for i in range(draw(st.integers(0, 10)))
    ]
    rules = []
    pinned = draw(st.booleans())
    if vms and pinned:
        rules.append(
            rule(
                name="pin", type="pin", vms={"names": [vms[0].name]}, hosts={"names": [vms[0].host]}
            )
        )
    commands = [command(f"c{i}", safe=draw(st.booleans())) for i in range(draw(st.integers(0, 2)))]
    each: dict[str, Any] = {
        "commands": commands,
        "ready": {"settle": draw(st.sampled_from(["0s", "20s"]))},
    }
    if draw(st.booleans()):
        each["reboot"] = {"argv": ["reboot"], "timeout": "1m", "safeToRepeat": draw(st.booleans())}
    spec: dict[str, Any] = {
        "hosts": names,
        "maxUnavailable": draw(st.integers(1, n - 1)),
        "eachHost": each,
        "immovable": {"action": "shutdown"},
    }
    if draw(st.booleans()):
        spec["before"] = [command("noout", safe=draw(st.booleans()))]
        spec["after"] = [command("unset", safe=draw(st.booleans()))]
    world = World(desired([host(h) for h in names], rules=rules), rollout(spec), vms)
    world.crash_at = set(draw(st.lists(st.integers(0, 12), max_size=2)))
    if draw(st.integers(0, 4)) == 0:
        world.failing_checks.add(draw(st.sampled_from(names)))
    return world, spec


def _unsafe(spec: dict[str, Any]) -> set[str]:
    each = spec["eachHost"]
    steps = [(f"command/{c['name']}", c) for c in each["commands"]]
    steps += [(f"before/{c['name']}", c) for c in spec.get("before", [])]
    steps += [(f"after/{c['name']}", c) for c in spec.get("after", [])]
    if "reboot" in each:
        steps.append(("reboot", each["reboot"]))
    return {s for s, c in steps if not c["safeToRepeat"]}


@settings(max_examples=60, deadline=None)
@given(worlds())
def test_rollout_invariants(case: tuple[World, dict[str, Any]]) -> None:
    world, spec = case
    vm_names = sorted(v.name for v in world.vms)
    last = world.run_until_settled()
    # never more hosts out than maxUnavailable
    assert world.max_out_seen <= spec["maxUnavailable"]
    # no VM ran on a host while one of its commands or its reboot ran
    for ran in world.ran:
        assert ran.running_on_host == (), ran
    # a host is given back only after its ready wait succeeded
    ready: set[str] = set()
    for r in world.records:
        if r.step == "ready" and r.outcome is StepOutcome.SUCCEEDED and r.host:
            ready.add(r.host)
        if r.step == "undrain" and r.outcome is StepOutcome.SUCCEEDED:
            assert r.host in ready
    # a step that is not safe to repeat never ran twice
    runs = Counter((r.host, r.step) for r in world.ran)
    unsafe = _unsafe(spec)
    for (h, step), count in runs.items():
        assert count == 1 or step not in unsafe, (h, step, count)
    # every VM is still there, exactly once
    assert sorted(v.name for v in world.vms) == vm_names
    crashed = bool(world.crash_at) and world.commands_begun > min(world.crash_at)
    if not crashed and not world.failing_checks:
        assert last.phase is Phase.DONE
        # every host's commands ran once, in order; every step before and after once
        assert all(count == 1 for count in runs.values())
        per_host = len(spec["eachHost"]["commands"]) + ("reboot" in spec["eachHost"])
        assert len(runs) == len(spec["hosts"]) * per_host + 2 * ("before" in spec)
        # the VMs shut down for their host's turn run again
        assert all(v.state.value == "running" for v in world.vms)
    if last.phase is Phase.STOPPED:
        assert last.stopped_at is not None
        host_name, step = last.stopped_at
        failed = [r for r in world.records if r.outcome is StepOutcome.FAILED]
        assert (failed[-1].host, failed[-1].step) == (host_name, step)
        if host_name is not None:
            assert host_name in last.out  # the host stays out, named
    if world.failing_checks and not crashed:
        bad = next(iter(world.failing_checks))
        assert last.phase is Phase.STOPPED
        assert last.stopped_at == (bad, "ready")
        # hosts after the failed one were never touched
        order = spec["hosts"]
        later = set(order[order.index(bad) + spec["maxUnavailable"] :])
        assert not later.intersection(r.host for r in world.records)


@settings(max_examples=30, deadline=None)
@given(worlds(), st.integers(0, 12))
def test_a_crash_resumes_where_it_was(case: tuple[World, dict[str, Any]], at: int) -> None:
    """The reconciler dies during command ``at``: afterwards nothing is skipped and only safe
    steps ran twice, or the rollout stopped naming the interrupted step."""
    world, spec = case
    world.crash_at = {at}
    world.failing_checks.clear()
    last = world.run_until_settled()
    interrupted = at < world.commands_begun
    runs = Counter((r.host, r.step) for r in world.ran)
    unsafe = _unsafe(spec)
    if last.phase is Phase.DONE:
        per_host = len(spec["eachHost"]["commands"]) + ("reboot" in spec["eachHost"])
        assert len(runs) == len(spec["hosts"]) * per_host + 2 * ("before" in spec)
        assert sum(runs.values()) == len(runs) + interrupted
    else:
        assert interrupted
        assert last.phase is Phase.STOPPED
        assert last.stopped_at is not None
        assert last.stopped_at[1] in unsafe
        assert runs[last.stopped_at] == 1
