"""Power-on for capacity carried out by a round of ``run``: a dead host that recovery tracks
leaves VMs no host in service has room for, so the standby host is powered on at once (no
``powerOnAfter`` wait), with the reason in the intent, the log and the audit record; in
``mode: propose`` nothing is switched. Judged from the fake BMCs and hosts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from reconciler.engine.power import PowerPorts, PowerSaving
from reconciler.engine.round import RoundOptions, RoundPorts, run_round
from reconciler.model.desired import DesiredState
from reconciler.model.power import HostCapacity, PowerBook, PowerMode, StandbyHost
from reconciler.model.recovery import HostRecovery, RecoveryState, SavedVm
from tests.core.builders import desired, host
from tests.engine.test_power_saving import POWER, Bmcs
from tests.fakes import GIB, FakeCluster, FakeHost, FakeVm, MemoryStatusStore


@dataclass
class Recovered:
    """Recovery's store, as recovery left it: h0 dead, two large VMs of it not restarted."""

    state: RecoveryState | None = None

    def load(self) -> RecoveryState | None:
        return self.state

    def save(self, state: RecoveryState) -> None:
        self.state = state


def world(mode: str = "apply") -> tuple[FakeCluster, DesiredState, Bmcs, PowerSaving]:
    names = [f"h{i}" for i in range(4)]
    fake = FakeCluster(
        "test",
        [FakeHost(n, cpus=16, memory=64 * GIB) for n in names],
        [FakeVm(f"vm{i}", names[i], vcpus=2, memory=40 * GIB, cpu_used=0.5) for i in (1, 2)],
    )
    d = desired(
        [host(n).model_copy(update={"power": POWER}) for n in names],
        threshold=100,
        minUptime="0s",
        cooldown="0s",
        power={"mode": mode, "powerOffAfter": "30m", "powerOnAfter": "5m"},
    )
    bmcs = Bmcs(fake)
    fake.unreachable("h0")  # dead
    fake.unreachable("h3")  # asleep on purpose
    bmcs.off.add("h3")
    now = fake.clock.now()
    bmcs.book = PowerBook(
        cluster="test",
        standby={"h3": StandbyHost(since=now - timedelta(hours=2), why="empty")},
        capacity={"h3": HostCapacity(cpus=16, memory=64 * GIB)},
    )
    lost = [
        SavedVm(
            name=f"db{i}",
            uuid=f"u-db{i}",
            host="h0",
            running=True,
            vcpus=2,
            memory=20 * GIB,
            xml="<domain/>",
            seen_at=now - timedelta(minutes=5),
        )  # fmt: skip
        for i in range(2)
    ]
    recovered = Recovered(
        RecoveryState(
            cluster="test",
            vms={v.uuid: v for v in lost},
            hosts={"h0": HostRecovery(unreachable_since=now - timedelta(minutes=3))},
        )
    )
    saving = PowerSaving(
        "test",
        PowerPorts(
            switch=bmcs, store=bmcs, clock=fake.clock, observer=fake, answers=bmcs,
            sleep=lambda s: None, recovery=recovered,
        ),
    )  # fmt: skip
    return fake, d, bmcs, saving


def one_round(fake: FakeCluster, d: DesiredState, saving: PowerSaving) -> None:
    ports = RoundPorts(
        observer=fake, migrator=fake, recorder=fake, status=MemoryStatusStore(),
        clock=fake.clock, power=saving,
    )  # fmt: skip
    run_round(d, ports, RoundOptions(act=True))


def test_a_dead_hosts_vms_without_room_power_the_standby_host_on_in_the_same_round() -> None:
    fake, d, bmcs, saving = world()
    one_round(fake, d, saving)
    assert bmcs.calls == [("on", "h3")]
    assert fake.hosts["h3"].reachable
    assert bmcs.book is not None
    assert "h3" in bmcs.book.booting
    assert saving.last.decided is not None
    assert "recovery: 2 VM(s) of h0" in saving.last.decided.why["h3"]
    # the next round sees it booting: nothing more is switched
    one_round(fake, d, saving)
    assert bmcs.calls == [("on", "h3")]


def test_propose_switches_nothing_for_capacity_either() -> None:
    fake, d, bmcs, saving = world(mode=PowerMode.PROPOSE.value)
    one_round(fake, d, saving)
    assert bmcs.calls == []
    assert saving.last.decided is not None
    assert saving.last.decided.power_on == ("h3",)
