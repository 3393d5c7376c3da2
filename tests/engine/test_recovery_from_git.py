"""Recovery by an instance that never saw the dead host reachable (a standby that took over,
a lost state directory): the VMs are taken from the observed branch when their recorded
definition is fit to start, refused with why when it is not, and listed as not restarted when
no source knows them. Judged from the fake libvirt (what started where), not the records."""

from __future__ import annotations

import logging
import re
from datetime import timedelta

import pytest

from reconciler.core.definitions import redacted_definition
from reconciler.core.recovery_round import recovered_status
from reconciler.engine.recovery import Recovery, RecoveryPorts
from reconciler.errors import RemoteUnreachable, TerminalError
from reconciler.model.base import HostName
from reconciler.model.desired import DesiredState
from reconciler.model.snapshot import VmRunState
from reconciler.model.status import ConditionType, MoveOutcome, ReconcileStatus
from tests.engine.test_recovery import World, cluster, rounds
from tests.engine.test_recovery_audit import secret_xml
from tests.fakes import FakeObservedBranch, MemorySource

PASSWORD = "vnc-S3cret"


def plain_xml(name: str, uuid: str, memory: str = "4") -> str:
    return (
        f"<domain type='kvm'><name>{name}</name><uuid>{uuid}</uuid>"
        f"<memory unit='GiB'>{memory}</memory>"
        "<devices><graphics type='vnc' port='-1'/></devices></domain>"
    )


class XmlWorld(World):
    """Domains with real definitions; ``xml`` overrides a VM's (by name); ``started`` keeps
    the XML of every start."""

    def __init__(self, base: World, xml: dict[str, str] | None = None) -> None:
        super().__init__(up=base.up, domains=base.domains, clock=base.clock)
        self.xml = dict(xml or {})
        self.started: dict[str, list[str]] = {}
        self.unreadable: set[str] = set()

    def definitions(self, host: str) -> dict[str, str]:
        if host in self.unreadable:
            raise TerminalError(f"cannot read the definitions on {host}")
        return {
            u: self.xml.get(d.name, plain_xml(d.name, u))
            for (h, u), d in self.domains.items()
            if h == host
        }

    def start(self, host: str, uuid: str, xml: str) -> None:
        name = re.search(r"<name>([^<]+)</name>", xml)
        assert name is not None
        self.started.setdefault(name.group(1), []).append(xml)
        super().start(host, uuid, f"<domain>{name.group(1)}</domain>")


def recorded(world: XmlWorld, branch: FakeObservedBranch, **override: str) -> None:
    """Push what a recorder pushes: the snapshot and every definition, redacted; ``override``
    replaces a VM's text as it reaches the branch (a hand-made push)."""
    texts: dict[str, str] = {}
    for host in world.up:
        for uuid, xml in world.definitions(host).items():
            name = next(d.name for (h, u), d in world.domains.items() if u == uuid)
            text = redacted_definition(xml)
            assert text is not None
            texts[name] = text
    branch.push(world.snapshot(), {**texts, **override})


def fresh(
    world: XmlWorld, branch: FakeObservedBranch | None, source: MemorySource | None = None
) -> Recovery:
    """An instance with an empty state directory."""
    world.saved = None
    ports = RecoveryPorts(
        fencer=world,
        restarter=world,
        store=world,
        clock=world.clock,
        observed=branch,
        source=source,
    )
    return Recovery("test", ports)


def setup(
    *, kill: bool = True, pushed: dict[str, str] | None = None, **xml: str
) -> tuple[XmlWorld, DesiredState, FakeObservedBranch]:
    """Host a runs web and db; the branch recorded them (``pushed`` replaces a VM's text on
    the branch); then a dies."""
    base, d, _ = cluster()
    world = XmlWorld(base, xml)
    branch = FakeObservedBranch()
    recorded(world, branch, **(pushed or {}))
    world.clock.advance(timedelta(seconds=30))
    if kill:
        world.kill("a")
    return world, d, branch


def test_a_fresh_instance_restarts_the_vms_the_branch_recorded_once() -> None:
    world, d, branch = setup()
    rec = fresh(world, branch)
    rounds(world, d, rec, 8)
    assert world.fenced == ["a"]
    for name in ("web", "db"):
        assert len(world.running(f"uuid-{name}")) == 1, name
    assert sorted(world.starts) == sorted(set(world.starts))  # each started once
    assert len(world.starts) == 2
    # what was defined is the recorded definition (no header comment), nothing else
    assert "<name>web</name>" in world.started["web"][0]
    assert "secrets removed" not in world.started["web"][0]
    assert rec.last.not_restarted == {}


def test_without_the_branch_a_fresh_instance_says_loudly_what_it_cannot_restart() -> None:
    world, d, _ = setup()
    d = _placed(d, web="a", db="a", other="a")  # other runs on b: nothing to say of it
    rec = fresh(world, None)
    rounds(world, d, rec, 5)
    assert world.fenced == ["a"]
    assert world.starts == []
    why = "no saved definition: this instance never saw a reachable"
    assert rec.last.not_restarted == {"db": why, "web": why}
    status = recovered_status(ReconcileStatus(cluster="test"), rec.last, world.clock.now())
    cond = next(c for c in status.conditions if c.type is ConditionType.RECOVERED)
    assert cond.status is False
    assert cond.reason == "NotRestarted"
    assert why in cond.message


def test_a_definition_redacted_on_recording_is_not_started_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world, d, branch = setup(db=secret_xml("db", "uuid-db"))
    source = MemorySource()
    rec = fresh(world, branch, source)
    with caplog.at_level(logging.ERROR):
        rounds(world, d, rec, 5)
    assert len(world.running("uuid-web")) == 1
    assert world.running("uuid-db") == []
    assert [h for h, u in world.starts if u == "uuid-db"] == []
    why = rec.last.not_restarted["db"]
    assert why.startswith("its definition in git lacks ")
    assert "console passwords" in why
    assert why.endswith("; start it by hand")
    assert f"db of fenced host a is not restarted: {why}" in caplog.text
    assert caplog.text.count("db of fenced host a is not restarted") == 1  # said once
    status = recovered_status(ReconcileStatus(cluster="test"), rec.last, world.clock.now())
    cond = next(c for c in status.conditions if c.type is ConditionType.RECOVERED)
    assert cond.status is False
    assert why in cond.message
    skipped = [r for rec_ in source.records for r in rec_.results if r.vm == "db"]
    assert [(r.outcome, r.detail) for r in skipped] == [(MoveOutcome.SKIPPED, why)]


@pytest.mark.parametrize(
    ("construct", "named"),
    [
        (
            "<qemu:commandline xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>"
            "<qemu:arg value='-S'/></qemu:commandline>",
            "QEMU command line passthrough",
        ),
        ("<devices><graphics type='vnc' passwd='x'/></devices>", "console passwords"),
        (
            "<devices><disk type='network'><source protocol='rbd' name='p/v'>"
            "<auth username='u'><secret type='ceph' usage='k'/></auth></source></disk></devices>",
            "disk authentication",
        ),
    ],
)
def test_a_definition_pushed_by_hand_with_a_construct_recording_strips_is_refused(
    construct: str, named: str
) -> None:
    text = redacted_definition(plain_xml("db", "uuid-db"))
    assert text is not None
    world, d, branch = setup(pushed={"db": text.replace("</domain>", construct + "</domain>")})
    rec = fresh(world, branch)
    rounds(world, d, rec, 5)
    assert world.running("uuid-db") == []
    assert len(world.running("uuid-web")) == 1
    why = rec.last.not_restarted["db"]
    assert named in why
    assert "recording never keeps" in why


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (plain_xml("db", "uuid-db"), "no recording header"),
        (redacted_definition(plain_xml("web", "uuid-web")), "not of db (uuid-db)"),
        (redacted_definition(plain_xml("db", "uuid-other")), "not of db (uuid-db)"),
        (redacted_definition(plain_xml("db2", "uuid-db")), "not of db (uuid-db)"),
        ("<!-- secrets removed before recording: none found -->\n<domain>", "not well-formed"),
    ],
)
def test_a_definition_not_as_recorded_or_of_another_vm_is_refused(
    text: str | None, says: str
) -> None:
    assert text is not None
    world, d, branch = setup(pushed={"db": text})
    rec = fresh(world, branch)
    rounds(world, d, rec, 5)
    assert world.running("uuid-db") == []
    assert says in rec.last.not_restarted["db"]


def test_a_failed_read_of_the_branch_is_logged_and_the_saved_definitions_still_serve(
    caplog: pytest.LogCaptureFixture,
) -> None:
    base, d, _ = cluster()
    world = XmlWorld(base)
    branch = FakeObservedBranch()
    branch.fail_with = RemoteUnreachable("git show outlived 20 s and was stopped")
    rec = fresh(world, branch)
    rounds(world, d, rec, 1)  # this instance saw a: its state directory knows web and db
    world.kill("a")
    with caplog.at_level(logging.WARNING):
        rounds(world, d, rec, 5)
    assert branch.reads > 0
    assert "could not read the recorded definitions of a" in caplog.text
    for name in ("web", "db"):
        assert len(world.running(f"uuid-{name}")) == 1
    assert rec.last.not_restarted == {}


def test_a_failed_read_with_nothing_saved_restarts_nothing_and_says_so() -> None:
    world, d, branch = setup()
    d = _placed(d, web="a")
    branch.fail_with = RemoteUnreachable("git show outlived 20 s and was stopped")
    rec = fresh(world, branch)
    rounds(world, d, rec, 5)
    assert world.fenced == ["a"]
    assert world.starts == []
    why = rec.last.not_restarted["web"]
    assert why.startswith("no saved definition: this instance never saw a reachable")
    assert "could not be read: git show outlived" in why


def test_a_sighting_newer_than_the_branch_wins() -> None:
    world, d, branch = setup(kill=False)
    # the definition changed since the recording (db got a console password, kept whole in
    # the state directory only): the branch's older text must not be used
    world.xml["db"] = secret_xml("db", "uuid-db")
    rec = fresh(world, branch)
    rounds(world, d, rec, 1)
    world.kill("a")
    rounds(world, d, rec, 5)
    assert len(world.running("uuid-db")) == 1
    assert PASSWORD in world.started["db"][0]  # the whole definition this instance saw


def test_a_recording_newer_than_the_saved_sighting_wins() -> None:
    base, d, _ = cluster()
    world = XmlWorld(base)
    branch = FakeObservedBranch()
    rec = fresh(world, branch)
    rounds(world, d, rec, 1)  # this instance saw a, then lost touch with it
    world.xml["web"] = plain_xml("web", "uuid-web", memory="6")
    recorded(world, branch)  # another instance recorded a newer definition meanwhile
    world.clock.advance(timedelta(seconds=5))
    world.kill("a")
    rounds(world, d, rec, 5)
    assert len(world.running("uuid-web")) == 1
    assert '<memory unit="GiB">6</memory>' in world.started["web"][0]


def test_the_read_back_can_be_turned_off() -> None:
    world, d, branch = setup()
    d = _placed(d, web="a")
    policy = d.policy.spec.model_copy(
        update={
            "recovery": d.policy.spec.recovery.model_copy(update={"definitions_from_git": False})
        }
    )
    d = d.model_copy(update={"policy": d.policy.model_copy(update={"spec": policy})})
    rec = fresh(world, branch)
    rounds(world, d, rec, 5)
    assert branch.reads == 0
    assert world.starts == []
    assert rec.last.not_restarted == {
        "web": "no saved definition: this instance never saw a reachable"
    }


def test_the_branch_is_read_where_the_host_was_last_reachable() -> None:
    """A standby that took over keeps recording, with the dead host unreachable and none of
    its VMs: the recording in which the host was reachable is the one that counts."""
    world, d, branch = setup()
    recorded(world, branch)  # a is dead in this one
    assert not any(h.reachable for h in branch.pushed[-1].snapshot.hosts if h.name == "a")
    rec = fresh(world, branch)
    rounds(world, d, rec, 5)
    for name in ("web", "db"):
        assert len(world.running(f"uuid-{name}")) == 1


def test_after_a_crash_mid_recovery_a_fresh_instance_starts_nothing_twice() -> None:
    world, d, branch = setup()
    world.crash_after_start = True
    rec = fresh(world, branch)
    with pytest.raises(KeyboardInterrupt):
        rounds(world, d, rec, 5)
    world.crash_after_start = False
    first = list(world.starts)
    assert len(first) == 1
    # the state directory is lost as well: a new instance knows only the branch
    rec = fresh(world, branch)
    rounds(world, d, rec, 8)
    for name in ("web", "db"):
        assert len(world.running(f"uuid-{name}")) == 1
    assert len(world.starts) == 2  # the one before the crash was not repeated


def test_a_vm_the_branch_puts_on_the_dead_host_that_runs_elsewhere_is_not_reported() -> None:
    world, d, branch = setup(pushed={"db": "<domain/>"})
    # db was moved to b after the recording; b's definitions cannot be read this time, so the
    # state directory does not know it: libvirt's answer (it runs) is what counts
    key = next(k for k in world.domains if k[1] == "uuid-db")
    world.domains[("b", "uuid-db")] = world.domains.pop(key).model_copy(
        update={"host": HostName("b"), "state": VmRunState.RUNNING}
    )
    world.unreadable.add("b")
    rec = fresh(world, branch)
    rounds(world, d, rec, 5)
    assert world.running("uuid-db") == ["b"]
    assert len(world.running("uuid-web")) == 1
    assert rec.last.not_restarted == {}


def _placed(d: DesiredState, **where: str) -> DesiredState:
    spec = d.placement.spec.model_copy(update={"vms": where})
    return d.model_copy(update={"placement": d.placement.model_copy(update={"spec": spec})})
