"""Dead-host recovery decisions, on an in-memory cluster: detection, fencing, restart once,
stale copies on a host that comes back."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from reconciler.core.recovery_round import recovered_status
from reconciler.engine.recovery import Recovery, RecoveryPorts
from reconciler.errors import TerminalError, TransientError
from reconciler.model.base import HostName
from reconciler.model.cluster import ClusterSpec, Defaults
from reconciler.model.desired import DesiredState
from reconciler.model.recovery import (
    Fence,
    FenceOutcome,
    FenceResult,
    PowerState,
    PowerStatus,
    RecoveryState,
)
from reconciler.model.snapshot import (
    LibvirtAnswer,
    Snapshot,
    Unmigratable,
    UnmigratableReason,
    VmRunState,
    VmState,
)
from reconciler.model.status import ConditionType, ReconcileStatus
from tests.core.builders import desired, host, host_state, vm
from tests.fakes import FakeClock

LOCAL = UnmigratableReason.LOCAL_DISK
RUNNING = VmRunState.RUNNING
FENCE = Fence(command=["fence", "{host}"])
"""A fence without a status action: only libvirt's silence confirms it."""
AGENT = Fence(command=["fence_ipmilan", "--ip={host}-bmc", "--action=off"])
"""A fence agent: its status action (``--action=status``) must say off too."""


@dataclass
class World:
    """Hosts and domains as libvirt would have them: (host, uuid) -> domain."""

    up: dict[str, bool]
    domains: dict[tuple[str, str], VmState]
    clock: FakeClock
    fence_says: FenceOutcome = FenceOutcome.OK
    fenced: list[str] = field(default_factory=list)
    starts: list[tuple[str, str]] = field(default_factory=list)
    undefined: list[tuple[str, str]] = field(default_factory=list)
    crash_after_start: bool = False
    saved: RecoveryState | None = None
    status_says: PowerState | None = None
    """What the fence's status action answers; None: the truth (off once fenced for real)."""
    lying: bool = False
    """The fence exits 0 without switching anything off."""
    thaws_during_fence: bool = False
    """The host answers libvirt again while its fence runs."""
    powered_off: set[str] = field(default_factory=set)
    asked_status: list[str] = field(default_factory=list)
    outcomes: list[tuple[str, FenceOutcome]] = field(default_factory=list)
    fence_fails: set[str] = field(default_factory=set)
    """Hosts whose fence times out, whatever ``fence_says``."""
    hang_in_start: bool = False
    """The next start takes effect, then its target's libvirt hangs and the call fails."""

    def snapshot(self) -> Snapshot:
        return Snapshot(
            cluster="test",
            taken_at=self.clock.now(),
            hosts=[host_state(h, reachable=ok) for h, ok in sorted(self.up.items())],
            vms=[d for (h, _), d in sorted(self.domains.items()) if self.up[h]],
        )

    # Fencer
    def fence(self, host: str, fence: Fence) -> FenceResult:
        self.fenced.append(host)
        if host in self.fence_fails:
            return FenceResult(outcome=FenceOutcome.TIMEOUT, detail="killed after 30 s")
        if self.thaws_during_fence:
            self.up[host] = True
        if self.fence_says is FenceOutcome.OK and not self.lying:
            self.kill(host)
            self.powered_off.add(host)
        return FenceResult(outcome=self.fence_says)

    def status(self, host: str, fence: Fence) -> PowerStatus:
        self.asked_status.append(host)
        if self.status_says is not None:
            return PowerStatus(state=self.status_says, detail=f"Status: {self.status_says}")
        state = PowerState.OFF if host in self.powered_off else PowerState.ON
        return PowerStatus(state=state, detail=f"Status: {state.value.upper()}")

    # Restarter
    def definitions(self, host: str) -> dict[str, str]:
        return {u: f"<domain>{d.name}</domain>" for (h, u), d in self.domains.items() if h == host}

    def start(self, host: str, uuid: str, xml: str) -> None:
        self.starts.append((host, uuid))
        name = xml.removeprefix("<domain>").removesuffix("</domain>")
        old = next(d for (_, u), d in self.domains.items() if u == uuid)
        self.domains[(host, uuid)] = old.model_copy(
            update={"host": HostName(host), "state": VmRunState.RUNNING, "name": name}
        )
        if self.crash_after_start:
            raise KeyboardInterrupt  # the reconciler dies right after libvirt started it
        if self.hang_in_start:
            self.hang_in_start = False
            self.freeze(host)
            raise TransientError(f"libvirt on {host} did not answer within 30 s")

    def answers(self, host: str) -> LibvirtAnswer:
        if self.up[host]:
            return LibvirtAnswer(version="libvirt 10.0.0")
        return LibvirtAnswer(why=f"libvirt on {host} did not answer within 5s")

    def undefine(self, host: str, uuid: str) -> None:
        if self.domains[(host, uuid)].state is not VmRunState.SHUTOFF:
            raise TerminalError("runs")
        self.undefined.append((host, uuid))
        del self.domains[(host, uuid)]

    # RecoveryStore
    def load(self) -> RecoveryState | None:
        return self.saved

    def save(self, state: RecoveryState) -> None:
        self.saved = state

    def kill(self, name: str) -> None:
        """The host dies; on reboot its domains are defined and shut off."""
        self.up[name] = False
        for key, d in list(self.domains.items()):
            if key[0] == name:
                self.domains[key] = d.model_copy(update={"state": VmRunState.SHUTOFF})

    def freeze(self, name: str) -> None:
        """The host's libvirt hangs: it answers nothing, its VMs keep running."""
        self.up[name] = False

    def running(self, uuid: str) -> list[str]:
        return [
            h
            for (h, u), d in self.domains.items()
            if u == uuid and d.state is VmRunState.RUNNING and self.up[h]
        ]

    def running_anywhere(self, uuid: str) -> list[str]:
        """Hosts where the VM runs, a host whose libvirt hangs included."""
        return [h for (h, u), d in self.domains.items() if u == uuid and d.state is RUNNING]


def cluster(
    *, fence: bool = True, agent: bool = False, **recovery: object
) -> tuple[World, DesiredState, Recovery]:
    base = desired(
        [host("a"), host("b"), host("c")],
        recovery={"enabled": True, "grace": "60s", **recovery},
    )
    chosen = (AGENT if agent else FENCE) if fence else None
    spec = ClusterSpec(hosts=base.cluster.spec.hosts, defaults=Defaults(fence=chosen))
    d = base.model_copy(update={"cluster": base.cluster.model_copy(update={"spec": spec})})
    vms = [vm("web", "a"), vm("db", "a", memory_gib=8), vm("other", "b")]
    world = World(
        up={"a": True, "b": True, "c": True},
        domains={("a" if v.name != "other" else "b", v.uuid): v for v in vms},
        clock=FakeClock(),
    )
    return world, d, Recovery("test", _ports(world))


def _ports(world: World) -> RecoveryPorts:
    return RecoveryPorts(
        fencer=world,
        restarter=world,
        store=world,
        clock=world.clock,
        on_fence=lambda h, outcome: world.outcomes.append((h, outcome)),
    )


def rounds(world: World, d: DesiredState, rec: Recovery, n: int, every: float = 20) -> None:
    for _ in range(n):
        rec.step(d, world.snapshot(), act=True)
        world.clock.advance(timedelta(seconds=every))


def test_a_dead_host_is_fenced_after_grace_and_its_vms_run_elsewhere_once() -> None:
    world, d, rec = cluster()
    rounds(world, d, rec, 1)
    world.kill("a")
    rounds(world, d, rec, 3)  # 0 s, 20 s, 40 s: within grace
    assert world.fenced == []
    assert world.starts == []
    rounds(world, d, rec, 5)  # 60 s on: fenced, restarted; later rounds change nothing
    assert world.fenced == ["a"]
    for name in ("web", "db"):
        assert len(world.running(f"uuid-{name}")) == 1
    assert len(world.starts) == 2


def test_one_failed_observation_is_not_a_dead_host() -> None:
    world, d, rec = cluster()
    rounds(world, d, rec, 1)
    world.up["a"] = False
    rounds(world, d, rec, 2, every=40)  # unreachable at 0 s and 40 s
    world.up["a"] = True
    rounds(world, d, rec, 1, every=40)  # answers at 80 s: the count starts again
    world.up["a"] = False
    rounds(world, d, rec, 2, every=40)
    assert world.fenced == []


def test_a_host_that_answers_without_its_vms_is_not_a_candidate() -> None:
    world, d, rec = cluster()
    rounds(world, d, rec, 1)
    for key in [k for k in world.domains if k[0] == "a"]:
        del world.domains[key]
    rounds(world, d, rec, 10)
    assert world.fenced == []
    assert world.starts == []


def test_a_failed_fence_restarts_nothing_and_is_retried_with_backoff() -> None:
    world, d, rec = cluster()
    world.fence_says = FenceOutcome.TIMEOUT
    rounds(world, d, rec, 1)
    world.kill("a")
    rounds(world, d, rec, 7, every=15)  # fences 60 s after, again 15 s later, then 30 s
    assert world.starts == []
    assert world.fenced == ["a", "a"]
    assert "a" in rec.last.fence_failing
    status = recovered_status(ReconcileStatus(cluster="test"), rec.last, world.clock.now())
    condition = status.condition(ConditionType.RECOVERED)
    assert condition is not None
    assert not condition.status
    assert "fencing a" in condition.message
    world.fence_says = FenceOutcome.OK
    rounds(world, d, rec, 3, every=15)
    assert len(world.starts) == 2
    assert not rec.last.fence_failing


def test_no_fence_means_no_recovery() -> None:
    world, d, rec = cluster(fence=False)
    rounds(world, d, rec, 1)
    world.kill("a")
    rounds(world, d, rec, 6)
    assert world.starts == []
    assert rec.last.unfenceable == ["a"]


def test_a_reconciler_killed_after_a_start_starts_nothing_twice() -> None:
    world, d, rec = cluster()
    rounds(world, d, rec, 1)
    world.kill("a")
    world.crash_after_start = True
    with contextlib.suppress(KeyboardInterrupt):
        rounds(world, d, rec, 5)
    assert world.saved is not None  # the intent outlived the crash
    assert world.saved.intents
    world.crash_after_start = False
    again = Recovery("test", _ports(world))  # a new process: fenced state read back
    rounds(world, d, again, 3)
    for name in ("web", "db"):
        assert len(world.running(f"uuid-{name}")) == 1, world.starts
    assert len(world.starts) == 2
    assert world.saved is not None
    assert not world.saved.intents


def test_restart_order_follows_priority() -> None:
    world, d, rec = cluster(priorities=[{"vms": {"names": ["web"]}, "priority": 10}])
    rounds(world, d, rec, 1)
    world.kill("a")
    rounds(world, d, rec, 5)
    assert [u for _, u in world.starts] == ["uuid-web", "uuid-db"]


def test_a_vm_with_local_disks_is_not_restarted_and_says_why() -> None:
    world, d, rec = cluster()
    key = ("a", "uuid-db")
    world.domains[key] = world.domains[key].model_copy(
        update={"unmigratable": [Unmigratable(code=LOCAL, detail="/var/lib/db.img")]}
    )
    rounds(world, d, rec, 1)
    world.kill("a")
    rounds(world, d, rec, 5)
    assert [u for _, u in world.starts] == ["uuid-web"]
    assert "shared storage" in rec.last.not_restarted["db"]


def test_a_returning_host_loses_its_stale_copies_and_keeps_what_runs_nowhere_else() -> None:
    world, d, rec = cluster()
    world.domains[("a", "uuid-spare")] = vm("spare", "a").model_copy(
        update={"state": VmRunState.SHUTOFF}
    )
    rounds(world, d, rec, 1)
    world.kill("a")
    rounds(world, d, rec, 5)
    world.up["a"] = True  # back, with its old definitions, shut off
    rounds(world, d, rec, 1)
    assert sorted(u for _, u in world.undefined) == ["uuid-db", "uuid-web"]
    for name in ("web", "db"):
        assert [h for (h, u) in world.domains if u == f"uuid-{name}"] != ["a"]
        assert len([h for (h, u) in world.domains if u == f"uuid-{name}"]) == 1
    assert ("a", "uuid-spare") in world.domains  # ran nowhere else: left alone
    assert world.saved is not None
    assert "a" not in world.saved.hosts


def test_nothing_happens_when_recovery_is_disabled() -> None:
    world, d, rec = cluster(enabled=False)
    rounds(world, d, rec, 1)
    world.kill("a")
    rounds(world, d, rec, 6)
    assert world.fenced == []
    assert world.starts == []


# --- fences verified, not believed ----------------------------------------------------------


def assert_never_twice(world: World) -> None:
    for uuid in ("uuid-web", "uuid-db"):
        assert len(world.running_anywhere(uuid)) == 1, (uuid, world.starts)


def test_a_confirmed_fence_asks_the_agents_status_and_libvirt_then_restarts() -> None:
    world, d, rec = cluster(agent=True)
    rounds(world, d, rec, 1)
    world.freeze("a")  # it hangs; the fence switches it off for real
    rounds(world, d, rec, 5)
    assert world.fenced == ["a"]
    assert world.asked_status == ["a"]
    assert world.outcomes == [("a", FenceOutcome.OK)]
    assert_never_twice(world)
    assert len(world.starts) == 2
    assert world.saved is not None
    fence = world.saved.hosts["a"].fence
    assert fence is not None
    assert "status action: Status: OFF" in fence.detail
    assert "libvirt does not answer" in fence.detail


def test_a_lying_fence_whose_status_action_says_on_restarts_nothing() -> None:
    world, d, rec = cluster(agent=True)
    world.lying = True
    rounds(world, d, rec, 1)
    world.freeze("a")  # its VMs keep running
    rounds(world, d, rec, 7, every=15)  # fenced 60 s after, again 15 s later
    assert world.starts == []
    assert world.fenced == ["a", "a"]
    assert world.outcomes == [("a", FenceOutcome.UNCONFIRMED)] * 2
    assert rec.last.unconfirmed == ["a"]
    assert "status action says on (Status: ON)" in rec.last.fence_failing["a"]
    status = recovered_status(ReconcileStatus(cluster="test"), rec.last, world.clock.now())
    condition = status.condition(ConditionType.RECOVERED)
    assert condition is not None
    assert not condition.status
    assert condition.reason == "FenceUnconfirmed"
    world.up["a"] = True  # it answers again: nothing ever ran twice
    rounds(world, d, rec, 3)
    assert_never_twice(world)
    assert world.starts == []
    assert world.saved is not None
    assert "a" not in world.saved.hosts


@pytest.mark.parametrize("said", [PowerState.UNKNOWN, PowerState.ON])
def test_a_status_action_that_does_not_say_off_restarts_nothing(said: PowerState) -> None:
    world, d, rec = cluster(agent=True)
    world.status_says = said
    rounds(world, d, rec, 1)
    world.kill("a")  # dead for real, but the agent cannot tell
    rounds(world, d, rec, 8)
    assert len(world.fenced) >= 2  # retried with backoff, never believed
    assert world.starts == []
    assert rec.last.unconfirmed == ["a"]


def test_a_host_that_answers_again_before_the_fence_returns_is_not_restarted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world, d, rec = cluster()  # no status action: libvirt's answer alone decides
    world.lying = True
    world.thaws_during_fence = True
    rounds(world, d, rec, 1)
    world.freeze("a")
    rounds(world, d, rec, 5)
    assert world.fenced == ["a"]
    assert world.asked_status == []  # the fence has no status action to ask
    assert world.starts == []
    assert world.outcomes == [("a", FenceOutcome.UNCONFIRMED)]
    assert_never_twice(world)
    assert "the fence exited 0 but libvirt on a still answers (libvirt 10.0.0)" in caplog.text
    assert "host a answers again; it was never confirmed fenced" in caplog.text


def test_a_fenced_host_that_answers_again_before_its_restarts_cancels_them() -> None:
    world, d, rec = cluster(reserveHosts=0)
    rounds(world, d, rec, 1)
    world.kill("a")
    # no host has room for db yet: web restarts, db waits for a later step
    big = world.domains[("b", "uuid-other")].model_copy(update={"memory_max": 60 * 2**30})
    world.domains[("b", "uuid-other")] = big
    world.domains[("c", "uuid-hog")] = vm("hog", "c", memory_gib=60)
    rounds(world, d, rec, 4)
    started = [u for _, u in world.starts]
    assert "uuid-db" not in started, started
    world.up["a"] = True  # answers again: what was not restarted is not, ever
    del world.domains[("c", "uuid-hog")]
    rounds(world, d, rec, 4)
    assert "uuid-db" not in [u for _, u in world.starts]
