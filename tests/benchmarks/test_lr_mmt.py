"""The overload rule of the LR-MMT reference policy (``benchmarks/lr_mmt.py``): CloudSim
3.0.3's local regression over a host's last 10 figures, read one interval past the newest,
times the safety parameter, against 1; the static threshold 0.7 below 10 figures."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from lr_mmt import FALLBACK, LrMmt, Regression, fit, predicts_overload
from simulate_planetlab import desired_of

from reconciler.core.simulation.trace import Trace, TraceVm
from reconciler.core.simulation.world import World
from reconciler.model.simulation import NAMED_KINDS


def rising(newest: float, step: float, count: int = 10) -> list[float]:
    """``count`` figures, newest first, each ``step`` above the one before it."""
    return [newest - step * i for i in range(count)]


def test_a_rising_host_is_overloaded_before_it_reaches_the_safety_line() -> None:
    # 0.35 ... 0.80: the line predicts 0.85 next, x 1.2 = 1.02.
    assert predicts_overload(rising(0.80, 0.05)) is True
    # The same newest figure, flat: 0.80 x 1.2 = 0.96.
    assert predicts_overload([0.80] * 10) is False


def test_a_falling_host_is_not_overloaded_although_it_is_high_now() -> None:
    # 0.90 down to 0.45: the line predicts 0.40 next.
    assert predicts_overload(rising(0.45, -0.05)) is False
    assert predicts_overload([0.90] * 10) is True


def test_the_line_is_read_past_the_migration_and_scaled_by_safety() -> None:
    series = rising(0.70, 0.02)  # predicts 0.72 one interval on, 0.74 two
    assert predicts_overload(series, 1.4) is True  # 1.008
    assert predicts_overload(series, 1.3) is False  # 0.936
    assert predicts_overload(series, 1.3, horizon=5) is True  # 0.80 x 1.3 = 1.04
    assert predicts_overload([1000.0] * 10, capacity=5320.0) is False
    assert predicts_overload([4500.0] * 10, capacity=5320.0) is True


def test_exactly_one_after_safety_is_overloaded() -> None:
    assert predicts_overload([0.5] * 10, 2.0) is True


def test_only_the_newest_ten_figures_count() -> None:
    assert predicts_overload([0.9] * 10 + [0.0] * 20) is True
    assert predicts_overload([0.1] * 10 + [5.0] * 20) is False


def test_fewer_than_ten_figures_leave_it_to_the_fallback() -> None:
    assert predicts_overload([0.99] * 9) is None
    # Older zeros are trimmed first: a host whose VMs loaded it only lately.
    assert predicts_overload([0.99] * 9 + [0.0] * 5) is None
    # A zero among the figures is kept.
    assert predicts_overload([0.9] * 5 + [0.0] + [0.9] * 4) is not None


@given(st.lists(st.floats(0, 3000, allow_nan=False), min_size=10, max_size=10))
def test_fit_is_least_squares_over_the_ten_figures(figures: list[float]) -> None:
    intercept, slope = fit(np.array([figures]))
    x = np.arange(10, 0, -1, dtype=np.float64)  # newest first: x = 10 ... 1
    expected_slope, expected_intercept = np.polyfit(x, figures, 1)
    assert slope[0] == pytest.approx(expected_slope, abs=1e-6)
    assert intercept[0] == pytest.approx(expected_intercept, abs=1e-6)


HISTORY = st.lists(st.floats(0, 2500, allow_nan=False), min_size=1, max_size=30)


def judged(histories: list[list[float]], lists: list[list[int]], capacity: float) -> Regression:
    """The rule over one host holding ``lists[0]`` of the VMs (histories newest first, padded
    to one length with the oldest zeros a VM has before it existed)."""
    rounds = max(len(h) for h in histories)
    past = np.array([h + [0.0] * (rounds - len(h)) for h in histories])
    intercept, slope = fit(past)
    long = (past[:, 9:] != 0).any(axis=1)
    return Regression(
        1.2,
        past[:, 0].copy(),
        lists,
        np.array([capacity]),
        intercept=intercept,
        slope=slope,
        long=long,
        horizon=np.ones(len(histories)),
    )


def expected(histories: list[list[float]], vms: list[int], capacity: float) -> bool:
    """CloudSim's rule on the host's summed history, the fallback below ten figures (cases
    within rounding of either line are left out: the sum and the fit may round apart)."""
    rounds = max(len(h) for h in histories)
    total = [
        sum(histories[vm][i] if i < len(histories[vm]) else 0.0 for vm in vms)
        for i in range(rounds)
    ]
    verdict = predicts_overload(total, 1.2, capacity=capacity)
    if verdict is None:
        assume(abs(total[0] / capacity - FALLBACK) > 1e-9)
        return total[0] / capacity > FALLBACK
    a, b = fit(np.array([total]))
    assume(abs(1.2 * (a[0] + 11 * b[0]) / capacity - 1) > 1e-9)
    return verdict


@given(
    st.lists(HISTORY, min_size=1, max_size=5),
    st.data(),
    st.sampled_from([3720.0, 5320.0]),
)
def test_a_hosts_verdict_is_that_of_its_summed_history_as_vms_come_and_go(
    histories: list[list[float]], data: st.DataObject, capacity: float
) -> None:
    vms = list(range(len(histories)))
    on_host = data.draw(st.lists(st.sampled_from(vms), unique=True))
    lists = [list(on_host)]
    rule = judged(histories, lists, capacity)
    assert rule.over_host(0) == expected(histories, on_host, capacity)
    assert bool(rule.over()[0]) == expected(histories, on_host, capacity)
    for vm in vms:
        if vm not in on_host:
            assert bool(rule.over_with(vm)[0]) == expected(histories, [*on_host, vm], capacity)
    for vm in on_host:  # planned off one by one, as the overloaded hosts are emptied
        lists[0].remove(vm)
        rule.remove(vm, 0)
        assert rule.over_host(0) == expected(histories, lists[0], capacity)


def test_exactly_one_after_safety_is_overloaded_as_vms_are_planned() -> None:
    # Flat at half the host's MIPS, safety 2: exactly 1.
    exact = Regression(
        2.0,
        np.array([0.5]),
        [[0]],
        np.array([1.0]),
        intercept=np.array([0.5]),
        slope=np.array([0.0]),
        long=np.array([True]),
        horizon=np.array([1.0]),
    )
    assert exact.over_host(0)
    assert bool(exact.over()[0])


def test_a_host_left_with_young_vms_only_falls_back_to_the_threshold() -> None:
    # VM 0: 30 figures of almost nothing; VM 1: 5 figures at 0.65 (its line rises from the
    # zeros before it: 1.04 with safety), below the fallback's 0.7.
    histories = [[0.01] * 30, [0.65] * 5]
    lists = [[0, 1]]
    rule = judged(histories, lists, 1.0)
    assert rule.over_host(0)  # ten figures and more: the regression
    lists[0].remove(0)
    rule.remove(0, 0)
    assert not rule.over_host(0)  # five figures: 0.65 is not above 0.7
    assert not rule.over()[0]


def test_the_longest_migration_on_the_host_sets_how_far_the_line_is_read() -> None:
    # VM 0 alone: 0.80 next (0.96 with safety); VM 1 (no load) migrates for three intervals:
    # with it, the line is read at 0.84 (1.008).
    histories = [rising(0.78, 0.02), [0.0] * 10]
    rounds = np.array(histories)
    intercept, slope = fit(rounds)
    lists = [[0]]
    rule = Regression(
        1.2,
        rounds[:, 0].copy(),
        lists,
        np.array([1.0]),
        intercept=intercept,
        slope=slope,
        long=np.array([True, False]),
        horizon=np.array([1.0, 3.0]),
    )
    assert not rule.over_host(0)
    assert bool(rule.over_with(1)[0])
    lists[0].append(1)
    rule.add(1, 0)
    assert rule.over_host(0)


G5 = 5320.0
"""A G5 host's MIPS (2 x 2660)."""
GIB = 1024**3


def one_busy_host(utilisation: list[float], vms: int = 2) -> tuple[LrMmt, World, Trace]:
    """LR-MMT-1.2 over three G5 hosts, the first holding ``vms`` VMs (1, 2, ... GiB) that load
    it evenly to ``utilisation[k]`` of its MIPS at step ``k``, the others empty, deciding on
    each step's figure from the start (the benchmark's simulator accounting)."""
    kinds = {f"h{i}": NAMED_KINDS["G5"] for i in range(3)}
    desired = desired_of(kinds, {"basis": "used"})
    share = tuple(u * G5 / vms for u in utilisation)
    names = ["small", "large", *(f"vm{i}" for i in range(2, vms))]
    trace = Trace(
        source="hand-made",
        start=datetime(2011, 3, 3, tzinfo=UTC),
        step=300.0,
        vms=tuple(TraceVm(name, 1, (i + 1) * GIB) for i, name in enumerate(names)),
        demand=tuple(share for _ in names),
    )
    world = World(desired, trace, kinds, dict.fromkeys(names, "h0"))
    return LrMmt(desired, 1.2, first=0.0, lag=0.0), world, trace


def first_move(utilisation: list[float], rounds: int = 20) -> tuple[int, str] | None:
    """The round at which LR-MMT-1.2 first moves a VM off :func:`one_busy_host`'s busy host,
    and the VM."""
    policy, world, trace = one_busy_host(utilisation)
    for k in range(rounds):
        moves = policy.decide(world, trace.start + timedelta(seconds=300 * k)).moves
        if moves:
            assert all(m.source == "h0" for m in moves)
            return k, moves[0].vm
    return None


def test_a_rising_host_is_relieved_when_its_line_crosses_the_safety_line() -> None:
    # 0.30, 0.33, ...: the line reads 0.84 at round 17 (x 1.2 >= 1), 0.81 at round 16; the
    # fallback's 0.7, had it still decided, would have moved at round 14 (0.72).
    assert first_move([0.30 + 0.03 * k for k in range(30)]) == (17, "small")


def test_below_ten_figures_the_fallback_threshold_decides() -> None:
    assert first_move([0.72] * 30) == (0, "small")
    assert first_move([0.69] * 30) is None


def test_from_the_tenth_figure_the_regression_decides() -> None:
    # Nine rounds at 0.5, then 0.72: above the fallback's 0.7 from the tenth figure on, but
    # the line through ten figures reads 0.59 next (0.71 with safety) and overshoots the step
    # by 40% at most (0.81, 0.97 with safety).
    assert first_move([0.5] * 9 + [0.72] * 21, rounds=30) is None


def test_a_vm_keeps_thirty_figures() -> None:
    # Busy, then idle for 30 rounds: the busy figures are forgotten, so the host has one
    # figure that is not 0 and the fallback decides again (0.75 is above 0.7).
    assert first_move([0.5] * 5 + [0.0] * 30 + [0.75] * 5, rounds=40) == (35, "small")


def test_a_host_over_its_capacity_but_not_predicted_overloaded_is_an_underloaded_one() -> None:
    # A spike to 105% after nine rounds at 30%: the line reads 0.6 next (0.72 with safety),
    # so it is not overloaded; its scheduler scales its VMs down to fit, floored to whole
    # MIPS, and a little under 100% it is the round's last candidate to empty (none of its
    # VMs has anywhere to go: the other hosts are asleep).
    policy, world, trace = one_busy_host([0.3] * 9 + [1.05], vms=3)
    for k in range(9):
        policy.decide(world, trace.start + timedelta(seconds=300 * k))
    policy.trail = []
    assert policy.decide(world, trace.start + timedelta(seconds=2700)).moves == []
    assert policy.trail == [
        "Under-utilized host: host #0",
        "Not all VMs can be reallocated from the host, reallocation cancelled",
    ]
