"""``AdmissionView``: the model followed in place equals a build from the same observation.

The reference is the plain way: one snapshot, the hosts looked at afresh merged into it and
each VM put where its migration left it, then ``build`` and ``admit`` on the whole of it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.admission import admit, judge
from reconciler.core.admission_view import AdmissionView
from reconciler.core.rules import DomainCounts
from reconciler.core.state import Journal, Model, State, build
from reconciler.model.base import HostName, VmName
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Move, Reason
from reconciler.model.snapshot import HostState, InFlight, Snapshot, VmRunState, VmState
from tests.core.builders import NOW, desired, host, host_state, rule, snapshot, vm

HOSTS = ["a", "b", "c", "d"]
VMS = [f"v{i}" for i in range(7)]
RULES = [
    rule(name="apart", type="antiAffinity", vms={"labels": {"app": "db"}}),
    rule(name="racks", type="spread", vms={"labels": {"app": "web"}}, topologyKey="rack"),
    rule(name="pair", type="affinity", vms={"names": ["v5", "v6"]}),
    rule(name="budget", type="disruptionBudget", vms={"labels": {"app": "web"}}, maxConcurrent=1),
]


def cluster(parallel: int) -> DesiredState:
    hosts = [host(h, labels={"rack": "r1" if h in "ab" else "r2"}) for h in HOSTS]
    return desired(hosts, rules=RULES, hostLimit=90, parallel={"cluster": parallel})


# --- the reference: what the executor did before it kept a view ---------------------------


def merged(base: Snapshot, fresh: Snapshot) -> Snapshot:
    seen = {h.name for h in fresh.hosts}
    hosts = [h for h in base.hosts if h.name not in seen] + list(fresh.hosts)
    vms = [v for v in base.vms if v.host not in seen] + list(fresh.vms)
    counts: dict[str, set[str]] = {}
    for v in vms:
        counts.setdefault(v.name, set()).add(v.host)
    uuids: dict[str, str] = {v.name: v.uuid for v in vms}
    in_flight = [
        InFlight(name=name, uuid=uuids[name], hosts=sorted(where))
        for name, where in sorted(counts.items())
        if len(where) > 1
    ]
    return base.model_copy(
        update={"hosts": hosts, "vms": vms, "taken_at": fresh.taken_at, "in_flight": in_flight}
    )


def now_on(base: Snapshot, name: str, where: str) -> Snapshot:
    vms, seen = [], False
    for v in base.vms:
        if v.name != name:
            vms.append(v)
        elif not seen:
            vms.append(v.model_copy(update={"host": where}))
            seen = True
    return base.model_copy(update={"vms": vms})


# --- what is compared ---------------------------------------------------------------------


def _counts(dc: DomainCounts) -> tuple[Any, ...]:
    # a probe taken back may leave a domain registered at 0; for every kind but spread (whose
    # domains are all registered from the start) that changes no measure
    if dc.kind == "spread":
        return dc.kind, dc.total, dc.counts, dc.hist, dc.excess, dc.sumsq
    counts = {d: c for d, c in dc.counts.items() if c}
    hist = {c: n for c, n in dc.hist.items() if c}
    return dc.kind, dc.total, counts, hist, dc.excess, dc.sumsq


def canonical(model: Model, state: State) -> tuple[Any, ...]:
    return (
        tuple(model.hosts),
        tuple(model.vms),
        model.rules,
        model.weights,
        dict(model.host_index),
        dict(model.vm_index),
        tuple(model.observed),
        dict(model.arches),
        state.host_of,
        state.vms_on,
        state.memory,
        state.vcpus,
        state.cpu_load,
        state.mem_load,
        [_counts(c) for c in state.counts],
    )


# --- generated observations and changes ----------------------------------------------------

STATES = st.sampled_from([VmRunState.RUNNING] * 4 + [VmRunState.PAUSED, VmRunState.SHUTOFF])


@st.composite
def a_vm(draw: st.DrawFn, name: str, on: str) -> VmState:
    app = draw(st.sampled_from(["db", "web", "other"]))
    seen = vm(
        name,
        on,
        vcpus=draw(st.integers(1, 4)),
        memory_gib=draw(st.sampled_from([1, 2, 4, 8])),
        cpu_used=draw(st.sampled_from([0.1, 0.3, 0.7, 1.9])),
        labels={"app": app},
        migratable=draw(st.booleans()),
    )
    return seen.model_copy(update={"state": draw(STATES)})


@st.composite
def a_host(draw: st.DrawFn, name: str) -> HostState:
    if draw(st.integers(0, 9)) == 0:
        return host_state(name, reachable=False)
    return host_state(
        name,
        cpus=draw(st.sampled_from([8, 16])),
        memory_gib=draw(st.sampled_from([32, 64])),
        arch="aarch64" if draw(st.integers(0, 19)) == 0 else "x86_64",
    )


@st.composite
def an_observation(draw: st.DrawFn, hosts: list[str], step: int) -> Snapshot:
    """``hosts`` looked at: each VM lands on one of them, or elsewhere, or twice (in flight)."""
    seen = [draw(a_host(h)) for h in hosts]
    vms = []
    for name in VMS:
        where = draw(st.sampled_from([*hosts, None, None]))
        if where is not None:
            vms.append(draw(a_vm(name, where)))
            if draw(st.integers(0, 7)) == 0:
                vms.append(draw(a_vm(name, draw(st.sampled_from(hosts)))))
    snap = snapshot(seen, vms)
    return snap.model_copy(update={"taken_at": NOW + timedelta(seconds=step)})


@st.composite
def some_moves(draw: st.DrawFn) -> list[Move]:
    out = []
    for name in draw(st.lists(st.sampled_from(VMS), max_size=5, unique=True)):
        source, target = draw(st.sampled_from(HOSTS)), draw(st.sampled_from(HOSTS))
        affinity = name in ("v5", "v6") and draw(st.booleans())
        out.append(
            Move(
                vm=VmName(name),
                source=HostName(source),
                target=HostName(target),
                memory=4 << 30,
                vcpus=2,
                reason=Reason.AFFINITY if affinity else Reason.BALANCE,
                rule="pair" if affinity else None,
                detail="x",
                wave=0,
            )
        )
    return out


def check(view: AdmissionView, reference: Snapshot, d: DesiredState, data: st.DataObject) -> None:
    assert view.snapshot() == reference
    if view.settled:
        model, first, second = view.model()
        rebuilt = canonical(*build(d, reference))
        assert canonical(model, first) == rebuilt
        assert canonical(model, second) == rebuilt
    moves = data.draw(some_moves())
    running = data.draw(some_moves())
    running = [m for m in running if m.vm not in {p.vm for p in moves}]
    assert judge(view, moves, running) == admit(d, reference, moves, running, NOW)
    if view.settled:  # a judgement leaves the model as it found it
        model, first, second = view.model()
        assert canonical(model, first) == canonical(*build(d, reference))


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(1, 3))
def test_the_view_followed_in_place_equals_a_build_after_any_sequence(
    data: st.DataObject, parallel: int
) -> None:
    d = cluster(parallel)
    start = snapshot(
        [host_state(h) for h in HOSTS],
        [data.draw(a_vm(name, data.draw(st.sampled_from(HOSTS)))) for name in VMS],
    )
    view, reference = AdmissionView(d, start), start
    check(view, reference, d, data)
    for step in range(data.draw(st.integers(1, 8))):
        if data.draw(st.integers(0, 2)):
            name = data.draw(st.sampled_from(VMS))
            where = data.draw(st.sampled_from(HOSTS))
            view.vm_now_on(name, where)
            reference = now_on(reference, name, where)
        else:
            hosts = st.lists(st.sampled_from(HOSTS), min_size=1, max_size=2, unique=True)
            looked = data.draw(hosts)
            fresh = data.draw(an_observation(looked, step + 1))
            view.replace_hosts(fresh)
            reference = merged(reference, fresh)
        check(view, reference, d, data)


def test_a_quiet_cluster_keeps_its_model_across_changes() -> None:
    # the point of the view: a VM moving and its hosts looked at again rebuild nothing
    d = cluster(2)
    start = snapshot([host_state(h) for h in HOSTS], [vm(n, "a") for n in VMS])
    view = AdmissionView(d, start)
    model, first, _ = view.model()
    view.vm_now_on("v1", "b")
    fresh = snapshot(
        [host_state("a"), host_state("b")],
        [vm(n, "a") for n in VMS if n != "v1"] + [vm("v1", "b", cpu_used=1.5)],
    )
    view.replace_hosts(fresh)
    again, state, _ = view.model()
    assert again is model
    assert state is first
    assert state.host_of[model.vm_index["v1"]] == model.host_index["b"]


def test_a_journal_takes_back_every_move_exactly() -> None:
    d = cluster(2)
    start = snapshot(
        [host_state(h) for h in HOSTS],
        [vm(n, HOSTS[i % 4], cpu_used=0.1 * (i + 1)) for i, n in enumerate(VMS)],
    )
    model, state = build(d, start)
    before = canonical(model, state)
    journal = Journal(state)
    journal.move(0, 3)
    mark = journal.mark()
    journal.move(1, 0)
    journal.move(0, 2)
    journal.undo(mark)
    assert state.host_of[0] == 3
    assert state.host_of[1] == model.observed[1]
    journal.undo()
    assert canonical(model, state) == before
