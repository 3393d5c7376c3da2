"""Which hosts can be emptied (``core.power.drainable``), checked against the plain reading of
its rule on random clusters: each VM of each candidate, the largest first, goes to the
feasible host where the score stays lowest (ties: the lower index); a host with a VM that
finds no place keeps all of its VMs. The fast path ranks hosts by score and checks them in
that order; it must choose exactly the same."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.feasibility import check_move
from reconciler.core.power import best_target, drainable
from reconciler.core.rollout_vms import with_hosts_out
from reconciler.core.state import build
from reconciler.model.desired import DesiredState
from reconciler.model.rules import HostAffinityRule
from reconciler.model.snapshot import Snapshot
from tests.core.builders import NOW, desired, host, host_state, snapshot, vm

FAST_ON_BIG = HostAffinityRule.model_validate(
    {
        "name": "fast-on-big",
        "type": "hostAffinity",
        "vms": {"labels": {"speed": "fast"}},
        "hosts": {"labels": {"kind": "big"}},
    }
)


def made(case: Case) -> tuple[DesiredState, Snapshot, list[str]]:
    """Hosts of even index are ``big``; every third VM is ``fast`` and must run on a big one
    (a required host rule, as the PlanetLab set-up's)."""
    n, memory, vms, _, _ = case
    names = [f"h{i}" for i in range(n)]
    kinds = {h: {"kind": "big" if i % 2 == 0 else "small"} for i, h in enumerate(names)}
    d = desired([host(h, labels=kinds[h]) for h in names], rules=[FAST_ON_BIG])
    snap = snapshot(
        [host_state(h, memory_gib=memory[i]) for i, h in enumerate(names)],
        [vm(f"v{i:02d}", names[h], memory_gib=m, vcpus=c, cpu_used=u,
            labels={"speed": "fast"} if i % 3 == 0 else {})
         for i, (h, m, c, u) in enumerate(vms)],
    )  # fmt: skip
    return d, snap, names


def plainly(d: DesiredState, snap: Snapshot, hosts: set[str], asleep: set[str]) -> set[str]:
    model, state = build(with_hosts_out(d, sorted({*hosts, *asleep})), snap)
    index = {h.name: h.index for h in model.hosts}
    left: set[str] = set()
    for name in sorted(hosts):
        h = index.get(name)
        if h is None:
            continue
        vms = sorted(
            (v.index for v in model.vms if state.host_of[v.index] == h),
            key=lambda v: (-model.vms[v].memory, model.vms[v].name),
        )
        placed = []
        for v in vms:
            fits = [t.index for t in model.hosts if check_move(state, v, t.index) is None]
            if not fits:
                break
            state.move(v, min(fits, key=lambda t: (state.score_with(t, v, 1), t)))
            placed.append(v)
        if len(placed) == len(vms):
            left.add(name)
        else:
            for v in placed:
                state.move(v, h)
    return left


Case = tuple[int, list[int], list[tuple[int, int, int, float]], set[int], set[int]]
cluster: st.SearchStrategy[Case] = st.integers(3, 8).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.lists(st.sampled_from([8, 12, 16]), min_size=n, max_size=n),  # GiB per host (ties)
        st.lists(  # VMs: host, memory GiB, vCPUs, cores used
            st.tuples(
                st.integers(0, n - 1),
                st.sampled_from([1, 2, 4, 6]),
                st.integers(1, 8),
                st.sampled_from([0.0, 0.5, 1.0, 2.5]),
            ),
            max_size=24,
        ),  # fmt: skip
        st.sets(st.integers(0, n - 1), min_size=1, max_size=n),  # candidates
        st.sets(st.integers(0, n - 1), max_size=2),  # asleep
    )
)


@settings(max_examples=300, deadline=None)
@given(cluster)
def test_the_hosts_found_drainable_are_those_the_plain_rule_finds(case: Case) -> None:
    _, _, _, candidates, asleep = case
    d, snap, names = made(case)
    hosts = {names[i] for i in candidates}
    sleeping = {names[i] for i in asleep} - hosts
    assert drainable(d, snap, hosts, sleeping, NOW) == plainly(d, snap, hosts, sleeping)


@settings(max_examples=300, deadline=None)
@given(cluster, st.data())
def test_the_target_chosen_is_the_lowest_score_feasible_host(
    case: Case, data: st.DataObject
) -> None:
    _, _, _, candidates, asleep = case
    d, snap, names = made(case)
    out = sorted({names[i] for i in candidates | asleep})
    model, state = build(with_hosts_out(d, out), snap)
    if not model.vms:
        return
    v = data.draw(st.integers(0, len(model.vms) - 1))
    targets = range(len(model.hosts))
    fits = [t for t in targets if check_move(state, v, t) is None]
    expected = min(fits, key=lambda t: (state.score_with(t, v, 1), t)) if fits else None
    assert best_target(state, v, targets) == expected
