"""A failed boot and a failed power-off are counted for the alerts
(``reconciler_power_failures_total{action}``): a BMC that refuses to power on, a boot longer
than bootTimeout, a BMC that never says off. A host not powered off because a fresh look
found a VM on it is a refusal of the reconciler's own, not a failure."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import CollectorRegistry

from reconciler.engine.metrics import Metrics
from reconciler.engine.power import PowerPorts
from reconciler.errors import TerminalError
from reconciler.model.power import HostPower, PowerBook
from reconciler.model.recovery import PowerState, PowerStatus
from tests.engine.test_power_capacity import world
from tests.engine.test_power_saving import Bmcs, cluster, rounds
from tests.fakes import FakeVm


class Refusing(Bmcs):
    def power_on(self, host: str, power: HostPower) -> None:
        self.calls.append(("on", host))
        raise TerminalError(f"{host}: the BMC answered 403")


class NeverOff(Bmcs):
    def power_off(self, host: str, power: HostPower) -> None:
        self.calls.append(("off", host))

    def power_state(self, host: str, power: HostPower) -> PowerStatus:
        return PowerStatus(state=PowerState.ON)


def counted(metrics: Metrics, host: str, action: str) -> float:
    value = metrics.registry.get_sample_value(
        "reconciler_power_failures_total", {"cluster": "test", "host": host, "action": action}
    )
    return value or 0.0


def test_a_boot_the_bmc_refuses_is_counted() -> None:
    fake, d, bmcs, saving = world()
    refusing = Refusing(fake, off=set(bmcs.off), book=bmcs.book)
    metrics = Metrics("test", CollectorRegistry())
    ports = saving.ports
    saving.ports = PowerPorts(
        switch=refusing, store=refusing, clock=ports.clock, observer=ports.observer,
        answers=refusing, sleep=ports.sleep, recovery=ports.recovery,
        on_failure=metrics.record_power_failure,
    )  # fmt: skip
    saving.step(d, fake.observe(), act=True)
    assert refusing.calls == [("on", "h3")]
    assert counted(metrics, "h3", "on") == 1
    assert refusing.book is not None
    assert "403" in refusing.book.failed["h3"]


def test_a_boot_longer_than_boot_timeout_is_counted() -> None:
    fake, d, bmcs, saving = world()
    metrics = Metrics("test", CollectorRegistry())
    saving.ports.on_failure = metrics.record_power_failure
    assert bmcs.book is not None
    bmcs.book = bmcs.book.model_copy(
        update={"standby": {}, "booting": {"h3": fake.clock.now() - timedelta(minutes=11)}}
    )  # h3 stays off: its libvirt never answers
    saving.step(d, fake.observe(), act=True)
    assert counted(metrics, "h3", "on") == 1
    assert "bootTimeout" in bmcs.book.failed["h3"]


def test_a_power_off_the_bmc_never_confirms_is_counted() -> None:
    fake, d, bmcs, saving = cluster()
    never = NeverOff(fake)
    metrics = Metrics("test", CollectorRegistry())
    saving.ports = PowerPorts(
        switch=never, store=never, clock=fake.clock, observer=fake, answers=never,
        sleep=lambda s: None, on_failure=metrics.record_power_failure,
    )  # fmt: skip
    rounds(fake, d, saving, 8)
    off = [h for action, h in never.calls if action == "off"]
    assert off
    # a shutdown is waited for across rounds up to bootTimeout: the last one asked ends then
    fake.clock.advance(timedelta(minutes=11))
    saving.step(d, fake.observe(), act=True)
    assert all(counted(metrics, h, "off") >= 1 for h in off)
    assert counted(metrics, off[0], "on") == 0


def test_a_host_kept_on_for_a_vm_found_at_the_fresh_look_is_no_failure() -> None:
    fake, d, bmcs, saving = cluster()
    metrics = Metrics("test", CollectorRegistry())
    saving.ports.on_failure = metrics.record_power_failure
    for vm in [v for v in fake.vms.values() if v.host == "h1"]:
        vm.host = "h0"
    bmcs.book = PowerBook(cluster="test", emptying={"h1": fake.clock.now()})
    snapshot = fake.observe()  # h1 empty at the round's look
    fake.vms["late"] = FakeVm("late", "h1", cpu_used=0.1)  # a person starts one there
    saving.step(d, snapshot, act=True)
    assert ("off", "h1") not in bmcs.calls
    assert counted(metrics, "h1", "off") == 0
