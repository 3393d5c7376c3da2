"""Power saving under faults that the lab proof found: a switch in the middle of a crash, a
BMC that says off while the host still runs, and a host whose power-off keeps failing. Judged
from the fake hosts and BMCs."""

from __future__ import annotations

from datetime import timedelta

from reconciler.core.power import FAILED_OFF_BACKOFF, power_next
from reconciler.engine.round import RoundOptions, RoundPorts, run_round
from reconciler.model.power import PowerAction, PowerBook, PowerIntent
from reconciler.model.recovery import PowerState, PowerStatus
from tests.engine.test_power_saving import Bmcs, cluster
from tests.fakes import MemoryStatusStore


class ShuttingDown(Bmcs):
    """A BMC whose graceful shutdown takes ``readings`` reads of its state to end, as one that
    was asked just before the reconciler was killed."""

    readings = 0

    def power_state(self, host: str, power: object) -> PowerStatus:
        if host in self.off or self.readings <= 0:
            return super().power_state(host, power)  # type: ignore[arg-type]
        self.readings -= 1
        if self.readings == 0:
            self.off.add(host)
            self.fake.unreachable(host)
        return PowerStatus(state=PowerState.ON)


class Liar(Bmcs):
    """Says off when asked to power off, and leaves the host running."""

    def power_off(self, host: str, power: object) -> None:
        self.calls.append(("off", host))
        self.off.add(host)  # what it says; the host's libvirt goes on answering


def test_a_host_whose_switch_a_crash_interrupted_is_held_out_until_resolved() -> None:
    fake, d, bmcs, saving = cluster()
    started = fake.clock.now()
    bmcs.book = PowerBook(
        cluster="test",
        intents={"h1": PowerIntent(host="h1", action=PowerAction.OFF, started_at=started, why="x")},
    )
    # before the step resolves the intent, the round's plan holds h1 out and knows it may be
    # silent: no move goes to a host that is shutting down
    assert "h1" in saving.out()
    assert "h1" in saving.asleep()


def test_a_power_off_under_way_at_a_crash_is_carried_on_not_taken_back() -> None:
    fake, d, _, saving = cluster()
    bmcs = ShuttingDown(fake)
    saving.ports.switch = bmcs
    saving.ports.store = bmcs
    saving.ports.answers = bmcs
    fake.vms["vm1"].host = "h0"  # h1 is empty, as it was when its power-off was asked
    bmcs.readings = 2
    bmcs.book = PowerBook(
        cluster="test",
        intents={
            "h1": PowerIntent(
                host="h1", action=PowerAction.OFF, started_at=fake.clock.now(), why="empty"
            )
        },
    )
    saving.step(d, fake.observe(), act=True)
    assert bmcs.book is not None
    assert "h1" in bmcs.book.standby, "the shutdown that ended is the host's standby"
    assert not bmcs.book.intents
    assert not fake.hosts["h1"].reachable


def test_a_power_on_lost_in_a_crash_is_asked_again() -> None:
    fake, d, bmcs, saving = cluster()
    fake.vms["vm1"].host = "h0"
    bmcs.off.add("h1")
    fake.unreachable("h1")
    bmcs.book = PowerBook(
        cluster="test",
        intents={
            "h1": PowerIntent(
                host="h1", action=PowerAction.ON, started_at=fake.clock.now(), why="demand"
            )
        },
    )
    saving.step(d, fake.observe(), act=True)
    assert ("on", "h1") in bmcs.calls
    assert bmcs.book is not None
    assert not bmcs.book.intents
    assert "h1" not in bmcs.book.standby
    assert fake.hosts["h1"].reachable  # the fake boots at once: back in service


def test_a_bmc_that_says_off_while_libvirt_answers_is_not_believed() -> None:
    fake, d, _, saving = cluster()
    bmcs = Liar(fake)
    saving.ports.switch = bmcs
    saving.ports.store = bmcs
    saving.ports.answers = bmcs
    store = MemoryStatusStore()
    for _ in range(8):
        ports = RoundPorts(
            observer=fake, migrator=fake, recorder=fake, status=store, clock=fake.clock,
            power=saving,
        )  # fmt: skip
        run_round(d, ports, RoundOptions(act=True))
        fake.clock.advance(timedelta(minutes=10))
    assert bmcs.book is not None
    lied = [h for action, h in bmcs.calls if action == "off"]
    assert lied, "the cluster was idle long enough to try"
    assert not bmcs.book.standby, "a host whose libvirt still answers is in service"
    for host in lied:
        assert "libvirt still answers" in bmcs.book.failed[host]
    # and its VMs are never moved for a power-off that cannot happen, again and again
    assert len(lied) == len(set(lied)), f"tried again within the back-off: {lied}"


def test_a_host_whose_power_off_failed_is_not_emptied_again_within_the_back_off() -> None:
    fake, d, _, _ = cluster()
    snapshot = fake.observe()
    now = fake.clock.now()
    low = now - timedelta(hours=2)
    hosts = ("h0", "h1", "h2", "h3")
    failed = {h: now - timedelta(minutes=5) for h in hosts}
    book = PowerBook(
        cluster="test", low_since=low, failed_at=failed, failed=dict.fromkeys(hosts, "x")
    )
    assert not power_next(d, snapshot, book, now).empty
    later = now + FAILED_OFF_BACKOFF
    assert power_next(d, snapshot, book.model_copy(update={"low_since": low}), later).empty


def test_power_is_not_asked_for_a_host_without_a_driver_when_resolving() -> None:
    # an intent for a host whose power section was removed is dropped, never switched
    fake, d, bmcs, saving = cluster()
    hosts = [
        h.model_copy(update={"power": None}) if h.name == "h2" else h for h in d.cluster.spec.hosts
    ]
    d = d.model_copy(
        update={
            "cluster": d.cluster.model_copy(
                update={"spec": d.cluster.spec.model_copy(update={"hosts": hosts})}
            )
        }
    )
    bmcs.book = PowerBook(
        cluster="test",
        intents={
            "h2": PowerIntent(
                host="h2", action=PowerAction.OFF, started_at=fake.clock.now(), why="x"
            )
        },
    )
    saving.step(d, fake.observe(), act=True)
    assert bmcs.book is not None
    assert not bmcs.book.intents
    assert not [c for c in bmcs.calls if c[1] == "h2"]
