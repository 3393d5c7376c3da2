"""Properties of plan() on random small clusters and rules."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.core.planner import plan
from reconciler.core.vm_facts import age_of
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Move, Plan, Reason
from tests.core.builders import NOW, apply_moves
from tests.core.checks import host_overcommit, placements, required_measures, selects, step
from tests.core.strategies import Case, cases

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(case: Case) -> Plan:
    desired, snap, history = case
    return plan(desired, snap, history, now=NOW)


def _waves(p: Plan) -> list[list[Move]]:
    """This round's moves by wave, then the deferred ones by wave."""
    out: list[list[Move]] = []
    for moves in (p.moves, p.deferred):
        for w in sorted({m.wave for m in moves}):
            out.append([m for m in moves if m.wave == w])
    return out


def _affinity_rules(desired: DesiredState) -> set[str]:
    return {
        r.name
        for r in desired.rules.spec.rules
        if r.type == "affinity" and r.enforcement.value == "required"
    }


@SETTINGS
@given(cases(), st.randoms(use_true_random=False))
def test_moves_in_any_order_within_a_wave_keep_capacity_and_never_worsen_a_required_rule(
    case: Case, rnd: random.Random
) -> None:
    """Run each wave's moves in a random order: no step overcommits its target, and no step
    raises a required rule's measure (affinity, whose members move together in one wave, is
    compared at wave boundaries). Catches a move into a host that a later move of the same
    wave was meant to free (the ``last_leaving`` dependency)."""
    desired, snap, _ = case
    p = run(case)
    affinity = _affinity_rules(desired)
    state = snap
    measures = required_measures(desired, state)
    for wave in _waves(p):
        start = measures
        order = list(wave)
        rnd.shuffle(order)
        for move in order:
            state = step(state, move)
            assert host_overcommit(desired, state, move.target) is None, move
            now = required_measures(desired, state)
            worse = {r for r in now if r not in affinity and now[r] > measures[r]}
            assert not worse, (move, worse)
            measures = now
        worse = {r for r in affinity if measures[r] > start[r]}
        assert not worse, (wave, worse)


@SETTINGS
@given(cases())
def test_a_required_affinity_group_moves_in_one_wave(case: Case) -> None:
    """Members of a required affinity that share a host and move go in one wave, together."""
    desired, snap, _ = case
    p = run(case)
    where = placements(snap)
    labels: dict[str, dict[str, str]] = {v.name: v.labels for v in snap.vms}
    wave_of: dict[str, tuple[bool, int, str]] = {
        m.vm: (m in p.deferred, m.wave, m.target) for m in p.moves + p.deferred
    }
    for r in desired.rules.spec.rules:
        if r.type != "affinity" or r.enforcement.value != "required":
            continue
        ms = [n for n in where if selects(r.vms, n, labels[n])]
        for a in ms:
            for b in ms:
                if a < b and where[a] == where[b] and (a in wave_of or b in wave_of):
                    assert wave_of.get(a) == wave_of.get(b), (r.name, a, b)


@SETTINGS
@given(cases())
def test_batch_and_limits(case: Case) -> None:
    desired, snap, _ = case
    spec = desired.policy.spec
    p = run(case)
    assert len(p.moves) <= spec.batch
    moved = [m.vm for m in p.moves + p.deferred]
    assert len(moved) == len(set(moved)), "a VM moves at most once per plan"
    reachable = {h.name for h in snap.hosts if h.reachable}
    arch = {h.name: h.arch for h in snap.hosts}
    maintenance = {h.name for h in desired.cluster.spec.hosts if h.maintenance}
    for m in p.moves + p.deferred:
        assert m.source in reachable
        assert m.target in reachable
        assert m.target not in maintenance
        assert arch[m.source] == arch[m.target]
    # waves respect cluster parallelism
    for moves in (p.moves, p.deferred):
        per_wave: dict[int, int] = {}
        for m in moves:
            per_wave[m.wave] = per_wave.get(m.wave, 0) + 1
        assert all(n <= spec.parallel.cluster for n in per_wave.values())
    # mandatory moves come before balance moves, except in an exact joint plan, where a
    # balance move may have to come first to make room
    reasons = [m.reason for m in p.moves + p.deferred]
    if Reason.BALANCE in reasons and p.optimal is None:
        first = reasons.index(Reason.BALANCE)
        assert all(r is Reason.BALANCE for r in reasons[first:])


@SETTINGS
@given(cases())
def test_nothing_cooling_young_pinned_or_unmigratable_moves_for_balance(case: Case) -> None:
    desired, snap, history = case
    spec = desired.policy.spec
    p = run(case)
    vms = {v.name: v for v in snap.vms}
    recent = {
        v.name
        for v in snap.vms
        if v.reconciler.last_failure is not None
        and NOW - v.reconciler.last_failure.at < spec.cooldown
    }
    for m in p.moves + p.deferred:
        v = vms[m.vm]
        assert v.migratable
        if m.reason is not Reason.BALANCE:
            continue
        assert m.vm not in recent
        last = v.reconciler.last_moved_at
        assert last is None or NOW - last >= spec.cooldown
        age = age_of(v, history, snap.taken_at, NOW)
        assert age is None or age >= spec.min_uptime
        assert m.vm not in ("vm2",) or not any(r.type == "pin" for r in desired.rules.spec.rules)
        assert m.vm != "vm3" or not any(r.type == "exclude" for r in desired.rules.spec.rules)


@SETTINGS
@given(cases(), st.randoms(use_true_random=False))
def test_shuffled_inputs_give_the_same_plan(case: Case, rnd: random.Random) -> None:
    desired, snap, history = case

    def shuffled(items: list[object]) -> list[object]:
        out = list(items)
        rnd.shuffle(out)
        return out

    d2 = desired.model_copy(
        update={
            "cluster": desired.cluster.model_copy(
                update={
                    "spec": desired.cluster.spec.model_copy(
                        update={"hosts": shuffled(list(desired.cluster.spec.hosts))}
                    )
                }
            ),
            "rules": desired.rules.model_copy(
                update={
                    "spec": desired.rules.spec.model_copy(
                        update={"rules": shuffled(list(desired.rules.spec.rules))}
                    )
                }
            ),
            "placement": desired.placement.model_copy(
                update={
                    "spec": desired.placement.spec.model_copy(
                        update={
                            "vms": dict(shuffled(list(desired.placement.spec.vms.items())))  # type: ignore[arg-type]
                        }
                    )
                }
            ),
        }
    )
    s2 = snap.model_copy(
        update={"hosts": shuffled(list(snap.hosts)), "vms": shuffled(list(snap.vms))}
    )
    a = plan(desired, snap, history, now=NOW)
    b = plan(d2, s2, history, now=NOW)
    assert a == b


@SETTINGS
@given(cases())
def test_deterministic(case: Case) -> None:
    assert run(case) == run(case)


@SETTINGS
@given(cases())
def test_planning_again_on_the_end_state_gives_no_balance_moves(case: Case) -> None:
    desired, snap, history = case
    p = run(case)
    moves = p.moves + p.deferred
    end = apply_moves(snap, moves, at=NOW)
    history2 = history.model_copy(update={"imbalance_rounds": p.imbalance_rounds})
    desired2 = desired.model_copy(
        update={
            "placement": desired.placement.model_copy(
                update={"spec": desired.placement.spec.model_copy(update={"vms": p.placement})}
            )
        }
    )
    again = plan(desired2, end, history2, now=NOW)
    # An imbalance still waiting out holdRounds may rightly start balancing next round.
    waiting = any(s.rounds_over > 0 and not s.balancing for s in p.spreads)
    mandatory = [m for m in again.moves + again.deferred if m.reason is not Reason.BALANCE]
    if not mandatory and not waiting:
        assert [m for m in again.moves + again.deferred if m.reason is Reason.BALANCE] == []
