"""Power saving carried out: the step run after each round of the active instance.

What to do is decided by ``core.power.power_next`` (hosts to empty, to power off, to power
on); this module does it through the ports ``PowerSwitch`` (the hosts' BMCs), ``PowerStore``
(the book, in the state directory), ``Observer`` and ``Answers`` (libvirt):

- **Hold**: before each round plans, the hosts being emptied, asleep or booting are held out
  (:meth:`PowerSaving.out`): the plan drains them as maintenance does, within batch, parallel
  and cooldown, and moves nothing to them; the asleep and booting ones count as observed (a
  host powered off on purpose does not answer) and are never fenced by recovery.
- **Power off**: an emptied host is powered off only when a fresh observation shows no VM on
  it; an intent is saved first; the BMC is then read until it says off (a graceful shutdown
  that does not end is given up and the host stays in service, named).
- **Power on**: an intent, the BMC asked, the host booting until libvirt answers it in full;
  a boot longer than ``bootTimeout`` is given up (named; the next standby host is chosen by a
  later round while demand stays high).
- **After a crash** an intent found in the book is resolved from the BMC: off means the host
  is asleep, on means it is in service (or booting).

With ``mode: propose`` nothing is switched and nothing is emptied; the decision is logged and
shown in the status. With ``mode: off`` every host asleep is powered on again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from reconciler.core.power import HostFacts, PowerNext, power_next
from reconciler.core.power_need import lost_vms
from reconciler.engine.ports import (
    Answers,
    Clock,
    DesiredSource,
    Observer,
    PowerStore,
    PowerSwitch,
    RecoveryStore,
)
from reconciler.errors import ReconcilerError
from reconciler.model.acting import Record
from reconciler.model.cluster import Host
from reconciler.model.desired import DesiredState
from reconciler.model.power import PowerAction, PowerBook, PowerIntent, PowerMode, StandbyHost
from reconciler.model.recovery import PowerState
from reconciler.model.snapshot import Snapshot, VmRunState

log = logging.getLogger(__name__)

OFF_POLL_SECONDS = 2.0
"""How often the BMC is read while a host shuts down."""
OFF_WAIT_SECONDS = 30.0
"""How long one power step waits for a shutdown to end; a longer one is looked at again by
the next rounds (up to the host's bootTimeout), which meanwhile go on balancing and
recovering: a round is never held by a host that takes minutes to shut down."""
LIE_READINGS = 3
"""Readings of libvirt after a BMC said off: a host whose libvirt still answers at the last
one is not off, whatever its BMC says."""


@dataclass
class PowerPorts:
    switch: PowerSwitch
    store: PowerStore
    clock: Clock
    observer: Observer
    answers: Answers
    source: DesiredSource | None = None
    """Where each power step that switched something leaves its record (an audit commit
    with ``Reconciler-Trigger: power``, or nothing for a folder)."""
    sleep: object = time.sleep
    """Waits between readings of a BMC (tests pass their own)."""
    recovery: RecoveryStore | None = None
    """Recovery's state (read only): the dead hosts and the VMs it remembers of them, whose
    room a standby host may have to bring back."""
    on_failure: Callable[[str, str], None] | None = None
    """Told of each failed power action: (host, ``on`` or ``off``), for the metrics."""


@dataclass
class PowerReport:
    """What one power step did and decided."""

    decided: PowerNext | None = None
    powered_off: list[str] = field(default_factory=list)
    powered_on: list[str] = field(default_factory=list)
    in_service: list[str] = field(default_factory=list)
    """Hosts whose boot ended this step."""
    failed: dict[str, str] = field(default_factory=dict)


def facts_of(desired: DesiredState) -> dict[str, HostFacts]:
    """What the power decision knows of each host from cluster.yaml: whether it can be
    switched, and its idle draw where given."""
    return {
        h.name: HostFacts(
            idle_watts=h.power.idle_watts if h.power is not None else None,
            switchable=h.power is not None,
        )
        for h in desired.cluster.spec.hosts
    }


class PowerSaving:
    """The power book of one cluster across the rounds of one instance."""

    def __init__(self, cluster: str, ports: PowerPorts) -> None:
        self.cluster = cluster
        self.ports = ports
        self.last = PowerReport()

    def book(self) -> PowerBook:
        return self.ports.store.load() or PowerBook(cluster=self.cluster)

    def asleep(self) -> tuple[str, ...]:
        """The book's :meth:`~reconciler.model.power.PowerBook.silent` hosts."""
        return self.book().silent()

    def out(self) -> tuple[str, ...]:
        """Hosts a round's plan holds out: being emptied, asleep, booting or being switched
        (a host shutting down is no target, even before a restart resolved its intent)."""
        book = self.book()
        return tuple(sorted({*book.emptying, *book.silent()}))

    def step(
        self,
        desired: DesiredState,
        snapshot: Snapshot,
        *,
        act: bool,
        held: Collection[str] = (),
    ) -> PowerReport:
        """One power step on the round's observation (after its moves); ``act``: the round
        may act (the policy's mode is apply and the cluster is held)."""
        report = PowerReport()
        now = self.ports.clock.now()
        book = self._resolved(self.book(), desired, report)
        book = self._booted(book, desired, now, report)
        hosts = {h.name: h for h in desired.cluster.spec.hosts}
        facts = facts_of(desired)
        asleep = {*book.standby, *book.booting}
        state = self.ports.recovery.load() if self.ports.recovery is not None else None
        down, lost = lost_vms(state, snapshot, asleep)
        decided = power_next(
            desired, snapshot, book, now, facts=facts, held=held, down=down, lost=lost
        )
        report.decided = decided
        mode = desired.policy.spec.power.mode
        for host, why in sorted(decided.why.items()):
            log.info("power: %s: %s", host, why)
        shutting = sorted(h for h, i in book.intents.items() if i.action is PowerAction.OFF)
        if shutting and mode is not PowerMode.PROPOSE and act:
            log.info(
                "power: waiting for %s to shut down; no other power action meanwhile",
                ", ".join(shutting),
            )
        if mode is PowerMode.PROPOSE or not act or shutting:
            # nothing switched, nothing emptied: only the streaks go on
            kept = book.model_copy(
                update={"low_since": decided.book.low_since, "high_since": decided.book.high_since}
            )
            self.ports.store.save(kept)
            if act:  # a shutdown that ended in this step is recorded as any switch
                self._record(decided, report, kept)
            self.last = report
            return report
        book = decided.book
        for host in decided.power_off:
            book = self._power_off(book, hosts[host], now, report)
        for host in decided.power_on:
            book = self._power_on(book, hosts[host], now, report, decided.why.get(host, ""))
        self.ports.store.save(book)
        self._record(decided, report, book)
        self.last = report
        return report

    def _record(self, decided: PowerNext, report: PowerReport, book: PowerBook) -> None:
        """The audit record of what this step switched: who, why, the demand (a shutdown
        asked by an earlier step says why it was asked then)."""
        source = self.ports.source

        def why(h: str) -> str:
            entry = book.standby.get(h)
            return decided.why.get(h) or (entry.why if entry is not None else "")

        lines = [
            f"{h}: powered off: {why(h)} (demand {100 * decided.demand:.0f}% "
            "of the capacity in service)"
            for h in report.powered_off
        ]
        lines += [f"{h}: powered on: {decided.why.get(h, '')}" for h in report.powered_on]
        lines += [f"{h}: not switched: {why}" for h, why in sorted(report.failed.items())]
        if source is None or not (report.powered_off or report.powered_on):
            return
        record = Record(
            cluster=self.cluster,
            plan_id=f"power-{self.ports.clock.now().isoformat(timespec='seconds')}",
            revision=None,
            results=[],
            placement={},
            trigger="power",
            power=lines,
        )
        try:
            source.record(record)
        except ReconcilerError as err:
            log.error("power: the record of this step could not be written: %s", err)

    # -- one host ----------------------------------------------------------------------------

    def _failed(self, host: str, action: PowerAction) -> None:
        if self.ports.on_failure is not None:
            self.ports.on_failure(host, action.value)

    def _with_intent(self, book: PowerBook, host: str, action: PowerAction, why: str) -> PowerBook:
        intent = PowerIntent(host=host, action=action, started_at=self.ports.clock.now(), why=why)
        book = book.model_copy(update={"intents": {**book.intents, host: intent}})
        self.ports.store.save(book)  # the intent is kept before the BMC is asked
        return book

    def _done(self, book: PowerBook, host: str, **update: object) -> PowerBook:
        intents = {h: i for h, i in book.intents.items() if h != host}
        return book.model_copy(update={"intents": intents, **update})

    def _power_off(
        self, book: PowerBook, host: Host, now: datetime, report: PowerReport
    ) -> PowerBook:
        name = host.name
        standby = {h: s for h, s in book.standby.items() if h != name}
        if host.power is None:
            return book.model_copy(update={"standby": standby})
        if self.ports.switch.power_state(name, host.power).state is PowerState.OFF:
            log.info("power: %s is off already", name)  # an earlier step's, resolved
            entry = StandbyHost(since=now, why="off")
            return book.model_copy(update={"standby": {**standby, name: entry}})
        fresh = self.ports.observer.observe()
        busy = [v.name for v in fresh.vms if v.host == name and v.state is not VmRunState.SHUTOFF]
        seen = next((h for h in fresh.hosts if h.name == name), None)
        if busy or seen is None or not seen.reachable:
            why = (
                f"a fresh look shows {', '.join(busy)} running there"
                if busy
                else "it did not answer the fresh look before powering off"
            )
            log.warning("power: not powering %s off: %s", name, why)
            report.failed[name] = why
            emptying = {h: t for h, t in book.emptying.items() if h != name}
            return book.model_copy(update={"standby": standby, "emptying": emptying})
        why = book.standby[name].why if name in book.standby else "empty"
        book = self._with_intent(book.model_copy(update={"standby": standby}), name,
                                 PowerAction.OFF, why)  # fmt: skip
        try:
            self.ports.switch.power_off(name, host.power)
        except ReconcilerError as err:
            return self._off_failed(book, name, err.message, now, report)
        intent = book.intents[name].model_copy(update={"asked_at": self.ports.clock.now()})
        book = book.model_copy(update={"intents": {**book.intents, name: intent}})
        self.ports.store.save(book)  # the BMC took it: a restart waits for it, not asks again
        return self._off_or_waiting(book, host, intent, now, report, OFF_WAIT_SECONDS)

    def _off_or_waiting(
        self,
        book: PowerBook,
        host: Host,
        intent: PowerIntent,
        now: datetime,
        report: PowerReport,
        wait: float,
    ) -> PowerBook:
        """After the BMC took a power-off: read it for up to ``wait`` seconds (0: once); off
        (and libvirt silent) is standby, still on within bootTimeout of the request is left to
        the next rounds (the intent kept), later is a failure and the host stays in service."""
        assert host.power is not None
        name = host.name
        limit = host.power.boot_timeout.total_seconds()
        wait = min(wait, limit)
        spent = (now - intent.started_at).total_seconds()
        try:
            off = self._until(name, host, PowerState.OFF, wait)
        except ReconcilerError as err:
            return self._off_failed(book, name, err.message, now, report)
        if not off:
            waited = spent + wait
            if waited < limit:
                log.info("power: %s is shutting down; looked at again next round", name)
                return book
            why = f"its BMC did not say off within bootTimeout ({limit:.0f}s)"
            return self._off_failed(book, name, why, now, report)
        if (still := self._still_answers(name)) is not None:
            why = f"its BMC says off but libvirt still answers ({still})"
            return self._off_failed(book, name, why, now, report)
        log.warning("power: %s powered off (%s)", name, intent.why)
        report.powered_off.append(name)
        entry = StandbyHost(since=now, why=intent.why)
        return self._done(
            book,
            name,
            standby={**book.standby, name: entry},
            failed={h: w for h, w in book.failed.items() if h != name},
            failed_at={h: t for h, t in book.failed_at.items() if h != name},
        )

    def _off_failed(
        self, book: PowerBook, name: str, why: str, now: datetime, report: PowerReport
    ) -> PowerBook:
        log.error("power: %s could not be powered off (%s); it stays in service", name, why)
        report.failed[name] = why
        self._failed(name, PowerAction.OFF)
        return self._done(
            book,
            name,
            failed={**book.failed, name: why},
            failed_at={**book.failed_at, name: now},
        )

    def _still_answers(self, name: str) -> str | None:
        """What libvirt on ``name`` still answers after its BMC said off (a BMC that lies, or
        one that says off before the host is), read a few times ``OFF_POLL_SECONDS`` apart;
        None once it does not answer."""
        for attempt in range(LIE_READINGS):
            answer = self.ports.answers.answers(name)
            if answer.why is not None:
                return None
            if attempt + 1 < LIE_READINGS:
                self.ports.sleep(OFF_POLL_SECONDS)  # type: ignore[operator]
        return f"libvirt {answer.version}"

    def _power_on(
        self, book: PowerBook, host: Host, now: datetime, report: PowerReport, why: str
    ) -> PowerBook:
        name = host.name
        if host.power is None:
            booting = {h: t for h, t in book.booting.items() if h != name}
            return book.model_copy(update={"booting": booting})
        book = self._with_intent(book, name, PowerAction.ON, why or "demand above the band")
        try:
            self.ports.switch.power_on(name, host.power)
        except ReconcilerError as err:
            log.error("power: %s could not be powered on: %s", name, err)
            report.failed[name] = err.message
            self._failed(name, PowerAction.ON)
            booting = {h: t for h, t in book.booting.items() if h != name}
            standby = {**book.standby, name: StandbyHost(since=now, why=err.message)}
            return self._done(book, name, booting=booting, standby=standby,
                              failed={**book.failed, name: err.message})  # fmt: skip
        log.warning("power: %s powered on; in service once libvirt answers", name)
        report.powered_on.append(name)
        return self._done(book, name, booting={**book.booting, name: now})

    def _until(self, name: str, host: Host, state: PowerState, within: float | None = None) -> bool:
        """Read the BMC until it says ``state``, within ``within`` seconds (the host's boot
        timeout by default), as the clock runs and as the waits between readings add up (a
        wait cut short counts whole)."""
        assert host.power is not None
        limit = host.power.boot_timeout.total_seconds() if within is None else within
        deadline = time.monotonic() + limit
        waited = 0.0
        while True:
            said = self.ports.switch.power_state(name, host.power)
            if said.state is state:
                return True
            if time.monotonic() >= deadline or waited >= limit:
                return False
            self.ports.sleep(OFF_POLL_SECONDS)  # type: ignore[operator]
            waited += OFF_POLL_SECONDS

    def _booted(
        self, book: PowerBook, desired: DesiredState, now: datetime, report: PowerReport
    ) -> PowerBook:
        """Booting hosts whose libvirt answers in full are in service; one that takes longer
        than its bootTimeout is given up."""
        hosts: Mapping[str, Host] = {h.name: h for h in desired.cluster.spec.hosts}
        booting = dict(book.booting)
        failed = dict(book.failed)
        standby = dict(book.standby)
        for name, since in sorted(book.booting.items()):
            answer = self.ports.answers.answers(name)
            if answer.why is None:
                log.warning("power: %s is back in service (%s)", name, answer.version)
                report.in_service.append(name)
                del booting[name]
                failed.pop(name, None)
                continue
            host = hosts.get(name)
            limit = host.power.boot_timeout if host is not None and host.power else None
            if limit is not None and now - since > limit:
                why = f"did not come up within bootTimeout ({answer.why})"
                log.error("power: %s %s; the next standby host is tried", name, why)
                report.failed[name] = why
                self._failed(name, PowerAction.ON)
                failed[name] = why
                del booting[name]
                standby[name] = StandbyHost(since=now, why=f"boot failed: {why}")
        return book.model_copy(update={"booting": booting, "failed": failed, "standby": standby})

    def _resolved(self, book: PowerBook, desired: DesiredState, report: PowerReport) -> PowerBook:
        """Intents a crash left, resolved from what the BMC says now."""
        if not book.intents:
            return book
        hosts = {h.name: h for h in desired.cluster.spec.hosts}
        for name, intent in sorted(book.intents.items()):
            host = hosts.get(name)
            if host is None or host.power is None:
                book = self._done(book, name)
                continue
            if intent.action is PowerAction.OFF and intent.asked_at is not None:
                # a shutdown the BMC took: over, still under way, or past its time
                book = self._off_or_waiting(book, host, intent, self.ports.clock.now(), report, 0)
                continue
            said = self.ports.switch.power_state(name, host.power)
            if intent.action is PowerAction.OFF and said.state is not PowerState.OFF:
                # a shutdown may still be under way: waited for; else asked again, after a
                # fresh look shows the host empty (``_power_off``)
                log.warning(
                    "power: the power-off of %s before a restart has not ended (the BMC says "
                    "%s): carried on",
                    name,
                    said.state.value,
                )
                if self._until(name, host, PowerState.OFF, host.power.timeout.total_seconds()):
                    entry = StandbyHost(since=intent.started_at, why=intent.why)
                    book = self._done(book, name, standby={**book.standby, name: entry})
                else:
                    book = self._power_off(self._done(book, name), host, self.ports.clock.now(),
                                           report)  # fmt: skip
            elif intent.action is PowerAction.OFF:
                entry = StandbyHost(since=intent.started_at, why=intent.why)
                book = self._done(book, name, standby={**book.standby, name: entry})
            elif said.state is PowerState.ON:
                book = self._done(book, name, booting={**book.booting, name: intent.started_at})
            else:
                # the press was lost with the crash: pressed again, the boot watched from now
                log.warning(
                    "power: the power-on of %s before a restart did not take effect (the BMC "
                    "says %s): asked again",
                    name,
                    said.state.value,
                )
                book = self._done(book, name)
                book = self._power_on(book, host, self.ports.clock.now(), report, intent.why)
            log.info("power: resolved the %s intent of %s", intent.action.value, name)
        return book
