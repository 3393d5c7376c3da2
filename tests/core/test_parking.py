"""Reverts that block each other reach their placement through a free host, never reported
as unsatisfiable while a sequence of moves reaches them."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from reconciler.core import planner
from reconciler.model.history import History
from reconciler.model.plan import UnsatisfiableCode
from reconciler.model.snapshot import Snapshot
from tests.core.builders import NOW, desired, host, host_state, rule, snapshot, vm
from tests.core.checks import broken_required_rules, placements, step


def _rounds(d: object, snap: Snapshot, limit: int = 6) -> tuple[Snapshot, list[list[str]]]:
    """Plan and apply, move by move (every step checked), until a plan has nothing to do."""
    done: list[list[str]] = []
    for _ in range(limit):
        p = planner.plan(d, snap, History(), now=NOW)  # type: ignore[arg-type]
        assert not [
            u for u in p.unsatisfiable if u.code is UnsatisfiableCode.NO_FEASIBLE_HOST
        ], p.unsatisfiable
        if not p.moves:
            return snap, done
        for m in sorted(p.moves, key=lambda m: m.wave):
            snap = step(snap, m)
            assert not broken_required_rules(d, snap), (m, placements(snap))  # type: ignore[arg-type]
        done.append([f"{m.vm}:{m.source}->{m.target}" for m in p.moves])
    raise AssertionError(f"no fixpoint after {limit} rounds: {done}")


def test_a_swap_kept_apart_by_rack_goes_through_the_free_host() -> None:
    hosts = [host(f"kvm-0{i}", labels={"rack": f"r{i}"}) for i in (1, 2, 3)]
    d = desired(
        hosts,
        rules=[
            rule(name="db-apart", type="antiAffinity", vms={"names": ["db-*"]}, topologyKey="rack")
        ],
        placement={"db-1": "kvm-02", "db-2": "kvm-03"},
        hostLimit=100,
    )
    snap = snapshot(
        [host_state(h.name) for h in hosts], [vm("db-1", "kvm-03"), vm("db-2", "kvm-02")]
    )
    final, rounds = _rounds(d, snap)
    assert placements(final) == {"db-1": "kvm-02", "db-2": "kvm-03"}
    assert rounds[0] == ["db-2:kvm-02->kvm-01", "db-1:kvm-03->kvm-02"]
    assert len(rounds) == 2


@settings(max_examples=40)
@given(n=st.integers(2, 4), seed=st.integers(0, 10_000))
@example(n=2, seed=0)
@example(n=3, seed=1)
def test_any_permutation_kept_apart_per_host_is_reached_with_one_free_host(
    n: int, seed: int
) -> None:
    import random

    rnd = random.Random(seed)
    names = [f"h{i}" for i in range(n + 1)]  # n busy hosts and a free one
    vms = [vm(f"db-{i}", names[i]) for i in range(n)]
    targets = names[:n]
    rnd.shuffle(targets)
    d = desired(
        [host(h) for h in names],
        rules=[rule(name="apart", type="antiAffinity", vms={"names": ["db-*"]})],
        placement={f"db-{i}": targets[i] for i in range(n)},
        hostLimit=100,
    )
    final, _ = _rounds(d, snapshot([host_state(h) for h in names], vms), limit=2 * n + 2)
    assert placements(final) == {f"db-{i}": targets[i] for i in range(n)}
