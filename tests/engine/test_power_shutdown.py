"""A shutdown that takes minutes holds no round: the power step asks the BMC, reads it for a
while, and leaves the rest to the next rounds (the intent kept, the host held out and known
silent), which go on balancing; a restart waits for a shutdown the BMC took rather than ask it
again; a shutdown past bootTimeout is given up and the host stays in service. Judged from
the fake hosts and BMCs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from reconciler.engine.power import OFF_POLL_SECONDS, OFF_WAIT_SECONDS, PowerPorts, PowerSaving
from reconciler.engine.round import RoundOptions, RoundPorts, run_round
from reconciler.model.desired import DesiredState
from reconciler.model.power import HostPower, PowerAction
from reconciler.model.recovery import PowerState, PowerStatus
from tests.engine.test_power_saving import Bmcs, assert_each_vm_once_and_awake, cluster
from tests.fakes import FakeCluster, MemoryStatusStore


@dataclass
class SlowOff(Bmcs):
    """A graceful shutdown that ends after ``minutes`` of the fake clock."""

    minutes: float = 5.0
    reads: int = 0
    ends: dict[str, datetime] = field(default_factory=dict)

    def power_off(self, host: str, power: HostPower) -> None:
        running = [v.name for v in self.fake.vms.values() if v.host == host]
        assert not running, f"{host} powered off with {running} on it"
        self.calls.append(("off", host))
        self.ends[host] = self.fake.clock.now() + timedelta(minutes=self.minutes)

    def power_state(self, host: str, power: HostPower) -> PowerStatus:
        self.reads += 1
        end = self.ends.get(host)
        if end is not None and self.fake.clock.now() >= end and host not in self.off:
            self.off.add(host)
            self.fake.unreachable(host)
        return super().power_state(host, power)


def slow(minutes: float) -> tuple[FakeCluster, DesiredState, SlowOff, PowerSaving]:
    fake, d, _, saving = cluster()
    bmcs = SlowOff(fake, minutes=minutes)
    saving.ports.switch = bmcs
    saving.ports.store = bmcs
    saving.ports.answers = bmcs
    return fake, d, bmcs, saving


def one_round(fake: FakeCluster, d: DesiredState, saving: PowerSaving, minutes: float) -> None:
    ports = RoundPorts(
        observer=fake, migrator=fake, recorder=fake, status=MemoryStatusStore(),
        clock=fake.clock, power=saving,
    )  # fmt: skip
    run_round(d, ports, RoundOptions(act=True))
    assert_each_vm_once_and_awake(fake)
    fake.clock.advance(timedelta(minutes=minutes))


def until_asked(fake: FakeCluster, d: DesiredState, bmcs: SlowOff, saving: PowerSaving) -> str:
    for _ in range(10):
        bmcs.reads = 0
        one_round(fake, d, saving, 1)
        off = [h for action, h in bmcs.calls if action == "off"]
        if off:
            return off[0]
        fake.clock.advance(timedelta(minutes=9))
    raise AssertionError("the idle cluster asked no power-off")


def test_a_slow_shutdown_is_left_to_the_next_rounds_with_its_host_held_out() -> None:
    fake, d, bmcs, saving = slow(minutes=5)
    host = until_asked(fake, d, bmcs, saving)
    # the step read the BMC for OFF_WAIT_SECONDS at most, and did not wait the shutdown out
    assert bmcs.reads <= OFF_WAIT_SECONDS / OFF_POLL_SECONDS + 3
    book = bmcs.book
    assert book is not None
    intent = book.intents[host]
    assert intent.action is PowerAction.OFF
    assert intent.asked_at is not None
    assert host not in book.standby
    assert host in saving.out()
    assert host in saving.asleep()
    # the next rounds run (a minute apart); nothing else is switched meanwhile
    for _ in range(4):
        one_round(fake, d, saving, 1)
        assert [h for action, h in bmcs.calls if action == "off"] == [host]
        assert not any(action == "on" for action, _ in bmcs.calls)
    one_round(fake, d, saving, 1)  # 5 minutes on: the BMC says off, libvirt is silent
    book = bmcs.book
    assert book is not None
    assert host in book.standby
    assert host not in book.intents
    assert not fake.hosts[host].reachable


def test_a_restart_waits_for_the_shutdown_the_bmc_took_and_does_not_ask_again() -> None:
    fake, d, bmcs, saving = slow(minutes=3)
    host = until_asked(fake, d, bmcs, saving)
    restarted = PowerSaving("test", PowerPorts(
        switch=bmcs, store=bmcs, clock=fake.clock, observer=fake, answers=bmcs,
        sleep=lambda s: None,
    ))  # fmt: skip
    assert host in restarted.out()
    for _ in range(4):
        one_round(fake, d, restarted, 1)
    assert [h for action, h in bmcs.calls if action == "off"][:1] == [host]
    assert bmcs.calls.count(("off", host)) == 1
    assert bmcs.book is not None
    assert host in bmcs.book.standby


def test_a_shutdown_past_boot_timeout_is_given_up_and_the_host_stays_in_service() -> None:
    fake, d, bmcs, saving = slow(minutes=60)
    host = until_asked(fake, d, bmcs, saving)
    fake.clock.advance(timedelta(minutes=10))  # bootTimeout (10m) since the request
    one_round(fake, d, saving, 1)
    book = bmcs.book
    assert book is not None
    assert host not in book.intents
    assert host not in book.standby
    assert "did not say off within bootTimeout" in book.failed[host]
    assert host not in saving.out()
    assert fake.hosts[host].reachable
    assert PowerState.OFF is not bmcs.power_state(host, None).state  # type: ignore[arg-type]
