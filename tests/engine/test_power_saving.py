"""Power saving carried out by the rounds of ``run`` on an in-memory cluster whose hosts have
BMCs: a host emptied within the policy's limits, powered off only once a fresh look shows it
empty, rounds acting on with it asleep (never counted as a dead host), and powered on again
when the load comes back. "Once" and "empty" are judged from the fake hosts and BMCs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest

from reconciler.core.next_actions import observed_facts
from reconciler.engine.power import PowerPorts, PowerSaving
from reconciler.engine.round import RoundOptions, RoundPorts, run_round
from reconciler.model.desired import DesiredState
from reconciler.model.power import HostPower, PowerBook, PowerMode
from reconciler.model.recovery import PowerState, PowerStatus
from reconciler.model.snapshot import LibvirtAnswer
from tests.core.builders import desired, host
from tests.fakes import GIB, FakeCluster, FakeHost, FakeVm, MemoryStatusStore

POWER = HostPower.model_validate(
    {"driver": "command", "command": {"on": ["on"], "off": ["off"], "status": ["status"]}}
)


@dataclass
class Bmcs:
    """The hosts' BMCs: off stops a host (its libvirt no longer answers), on starts it."""

    fake: FakeCluster
    off: set[str] = field(default_factory=set)
    calls: list[tuple[str, str]] = field(default_factory=list)
    book: PowerBook | None = None

    def power_state(self, host: str, power: HostPower) -> PowerStatus:
        return PowerStatus(state=PowerState.OFF if host in self.off else PowerState.ON)

    def power_off(self, host: str, power: HostPower) -> None:
        running = [v.name for v in self.fake.vms.values() if v.host == host]
        assert not running, f"{host} powered off with {running} on it"
        self.calls.append(("off", host))
        self.off.add(host)
        self.fake.unreachable(host)

    def power_on(self, host: str, power: HostPower) -> None:
        self.calls.append(("on", host))
        self.off.discard(host)
        self.fake.unreachable(host, False)

    def answers(self, host: str) -> LibvirtAnswer:
        if self.fake.hosts[host].reachable:
            return LibvirtAnswer(version="libvirt 10.0.0")
        return LibvirtAnswer(why="no answer")

    def load(self) -> PowerBook | None:
        return self.book

    def save(self, book: PowerBook) -> None:
        self.book = book


def cluster() -> tuple[FakeCluster, DesiredState, Bmcs, PowerSaving]:
    names = [f"h{i}" for i in range(4)]
    fake = FakeCluster(
        "test",
        [FakeHost(n, cpus=16, memory=64 * GIB) for n in names],
        [FakeVm(f"vm{i}", names[i], vcpus=2, memory=4 * GIB, cpu_used=0.2) for i in range(4)],
    )
    hosts = [host(n).model_copy(update={"power": POWER}) for n in names]
    d = desired(
        hosts,
        threshold=100,
        minUptime="0s",
        cooldown="0s",
        power={"mode": "apply", "powerOffAfter": "30m", "powerOnAfter": "5m"},
    )
    bmcs = Bmcs(fake)
    saving = PowerSaving(
        "test",
        PowerPorts(
            switch=bmcs,
            store=bmcs,
            clock=fake.clock,
            observer=fake,
            answers=bmcs,
            sleep=lambda s: None,
        ),
    )
    return fake, d, bmcs, saving


def rounds(fake: FakeCluster, d: DesiredState, saving: PowerSaving, n: int) -> None:
    store = MemoryStatusStore()
    for _ in range(n):
        ports = RoundPorts(
            observer=fake, migrator=fake, recorder=fake, status=store, clock=fake.clock,
            power=saving,
        )  # fmt: skip
        run_round(d, ports, RoundOptions(act=True))
        assert_each_vm_once_and_awake(fake)
        fake.clock.advance(timedelta(minutes=10))


def assert_each_vm_once_and_awake(fake: FakeCluster) -> None:
    for vm in fake.vms.values():
        assert fake.hosts[vm.host].reachable, f"{vm.name} is on {vm.host}, which is off"


def test_a_cluster_idle_for_long_enough_sleeps_on_fewer_hosts_and_wakes_when_load_returns() -> None:
    fake, d, bmcs, saving = cluster()
    rounds(fake, d, saving, 8)
    off = [h for action, h in bmcs.calls if action == "off"]
    assert off, "an idle cluster powers a host off"
    assert all(not fake.hosts[h].reachable for h in off)
    assert all(v.host not in off for v in fake.vms.values())
    assert bmcs.book is not None
    assert set(bmcs.book.standby) == set(off)
    # the spare hosts stay: the load needs one host, minSpareHosts keeps one more
    assert sum(h.reachable for h in fake.hosts.values()) >= 2
    # rounds go on acting with hosts asleep: the cluster counts as observed
    facts = observed_facts(
        d, fake.observe(), None, now=fake.clock.now(), actor=None, placement_changed_at=None,
        asleep=saving.asleep(),
    )  # fmt: skip
    assert facts.down == []
    # the load comes back: above the band for powerOnAfter, a host is powered on
    for vm in fake.vms.values():
        vm.cpu_used = 3.9
    for name in range(4, 16):
        fake.vms[f"big{name}"] = FakeVm(
            f"big{name}", next(h for h, s in fake.hosts.items() if s.reachable),
            vcpus=4, memory=2 * GIB, cpu_used=3.9,
        )  # fmt: skip
    rounds(fake, d, saving, 3)
    on = [h for action, h in bmcs.calls if action == "on"]
    assert on, "demand above the band powers a standby host on"
    assert all(fake.hosts[h].reachable for h in on)
    assert bmcs.book is not None
    assert not set(on) & set(bmcs.book.standby)


def test_propose_switches_nothing_and_empties_nothing() -> None:
    fake, d, bmcs, saving = cluster()
    spec = d.policy.spec.model_copy(
        update={"power": d.policy.spec.power.model_copy(update={"mode": PowerMode.PROPOSE})}
    )
    d = d.model_copy(update={"policy": d.policy.model_copy(update={"spec": spec})})
    before = {v.name: v.host for v in fake.vms.values()}
    rounds(fake, d, saving, 8)
    assert bmcs.calls == []
    assert {v.name: v.host for v in fake.vms.values()} == before


def test_a_host_that_is_not_empty_at_the_fresh_look_is_not_powered_off() -> None:
    fake, d, bmcs, saving = cluster()
    rounds(fake, d, saving, 4)  # h-something chosen and being emptied
    book = bmcs.book
    assert book is not None
    # a person starts a VM on every host being emptied right before the power-off round
    for name in book.emptying:
        fake.vms[f"late-{name}"] = FakeVm(f"late-{name}", name, cpu_used=0.1)
    rounds(fake, d, saving, 1)
    # whatever was decided, no host with a VM on it was powered off (Bmcs asserts it)
    assert_each_vm_once_and_awake(fake)


def test_each_power_step_that_switched_a_host_is_an_audit_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Judged from the bare repository: a commit per step that powered a host off, with the
    host, why and the demand, trailer Reconciler-Trigger: power."""
    from tests.engine.test_audit_queue import remote, started
    from tests.gitrepos import git

    fake, d, bmcs, saving = cluster()
    url, bare = remote(tmp_path, fake, {"vm0": "h0"}, monkeypatch)
    source = started(url, tmp_path)
    source.load()
    saving.ports.source = source
    rounds(fake, d, saving, 6)
    off = [h for action, h in bmcs.calls if action == "off"]
    assert off
    log = git(bare, "log", "main", "--format=%s%n%b%n%(trailers:key=Reconciler-Trigger)%n@@@")
    commits = [c for c in log.split("@@@") if "Power saving in cluster test" in c]
    assert commits, log
    for name in off:  # each power-off in exactly one record, with why and the demand
        assert sum(f"- {name}: powered off: empty" in c for c in commits) == 1, log
    for body in commits:
        assert "(demand " in body
        assert "Reconciler-Trigger: power" in body
