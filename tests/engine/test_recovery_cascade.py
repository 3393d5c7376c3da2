"""Recovery under a cascade of host failures, on an in-memory cluster: a VM restarted on a host
that then stops answering is that host's VM; nothing of it starts again until that host is
fenced, and then once. "Once" is judged from the domains, a hung host's included."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.engine.recovery import Recovery
from reconciler.model.cluster import ClusterSpec, Defaults
from reconciler.model.desired import DesiredState
from reconciler.model.snapshot import VmRunState
from tests.core.builders import desired, host, vm
from tests.engine.test_recovery import FENCE, World, _ports, rounds
from tests.fakes import FakeClock

NAMES = ("web", "db", "other")


def four_hosts() -> tuple[World, DesiredState, Recovery]:
    base = desired(
        [host("a"), host("b"), host("c"), host("d")],
        recovery={"enabled": True, "grace": "60s"},
    )
    spec = ClusterSpec(hosts=base.cluster.spec.hosts, defaults=Defaults(fence=FENCE))
    d = base.model_copy(update={"cluster": base.cluster.model_copy(update={"spec": spec})})
    vms = [vm("web", "a"), vm("db", "a", memory_gib=8), vm("other", "b")]
    world = World(
        up=dict.fromkeys("abcd", True),
        domains={(v.host, v.uuid): v for v in vms},
        clock=FakeClock(),
    )
    return world, d, Recovery("test", _ports(world))


def runs_on(world: World, name: str) -> list[str]:
    """Every host where ``name`` runs, those whose libvirt hangs included."""
    return world.running_anywhere(f"uuid-{name}")


def assert_at_most_once(world: World) -> None:
    for name in NAMES:
        assert len(runs_on(world, name)) <= 1, (name, runs_on(world, name), world.starts)


def test_a_vm_restarted_on_a_host_that_then_hangs_is_not_restarted_again() -> None:
    world, d, rec = four_hosts()
    rounds(world, d, rec, 1)
    world.kill("a")
    while not world.starts:  # rounds until a is fenced and its VMs restarted on b, c or d
        rounds(world, d, rec, 1)
    assert world.fenced == ["a"]
    target = runs_on(world, "web")[0]
    # right after, before another observation, the target hangs (its VMs keep running) and
    # its fence fails
    world.freeze(target)
    world.fence_fails.add(target)
    rounds(world, d, rec, 12, every=15)
    assert_at_most_once(world)
    assert runs_on(world, "web") == [target]
    assert target in world.fenced  # its own recovery tried, and restarted nothing
    assert target in rec.last.fence_failing
    # once its fence works, its VMs (web among them) start elsewhere, each once
    world.fence_fails.discard(target)
    rounds(world, d, rec, 12, every=60)
    for name in NAMES:
        assert len(runs_on(world, name)) == 1, (name, world.starts)
    assert runs_on(world, "web") != [target]


def test_a_start_whose_target_hangs_before_answering_is_held_until_that_host_is_fenced() -> None:
    world, d, rec = four_hosts()
    rounds(world, d, rec, 1)
    world.kill("a")
    world.hang_in_start = True  # the first start runs the VM, then its target hangs
    rounds(world, d, rec, 1, every=60)
    rounds(world, d, rec, 1, every=15)
    assert world.starts
    hung = world.starts[0][0]
    assert not world.up[hung]
    world.fence_fails.add(hung)
    rounds(world, d, rec, 12, every=15)
    assert_at_most_once(world)
    first = world.starts[0][1].removeprefix("uuid-")
    assert runs_on(world, first) == [hung]
    assert "fenced" in rec.last.not_restarted.get(first, ""), rec.last.not_restarted
    world.fence_fails.discard(hung)
    rounds(world, d, rec, 12, every=60)
    for name in NAMES:
        assert len(runs_on(world, name)) == 1, (name, world.starts)


events = st.lists(
    st.tuples(
        st.sampled_from(["kill", "freeze", "fence-fails", "fence-works", "rounds"]),
        st.sampled_from("abcd"),
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events)
def test_no_cascade_of_host_failures_runs_a_vm_twice(script: list[tuple[str, str]]) -> None:
    """Hosts die, hang, and their fences fail or work, in any order: no VM ever runs on two
    hosts (a hung host's VMs counted), and one that ran is never lost while a host answers."""
    world, d, rec = four_hosts()
    rounds(world, d, rec, 1)
    for what, name in script:
        if what == "kill":
            world.kill(name)
        elif what == "freeze":
            world.freeze(name)
        elif what == "fence-fails":
            world.fence_fails.add(name)
        elif what == "fence-works":
            world.fence_fails.discard(name)
        else:
            rounds(world, d, rec, 3, every=30)
        assert_at_most_once(world)
    rounds(world, d, rec, 6, every=60)
    assert_at_most_once(world)
    if world.up.values() and not world.fence_fails:
        # every fence works: whatever runs nowhere now had no room (or no host answers)
        lost = [n for n in NAMES if not runs_on(world, n)]
        if lost and any(world.up.values()):
            assert all(n in rec.last.not_restarted for n in lost), (lost, rec.last.not_restarted)


def test_a_frozen_host_keeps_its_vms_shut_off_copies_only_where_fenced() -> None:
    """The fake's own rules: a frozen host's VMs keep running, a killed host's shut off."""
    world, _, _ = four_hosts()
    world.freeze("a")
    assert runs_on(world, "web") == ["a"]
    world.kill("a")
    assert runs_on(world, "web") == []
    assert world.domains[("a", "uuid-web")].state is VmRunState.SHUTOFF
