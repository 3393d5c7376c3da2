"""LR-MMT: the literature's best-known consolidation heuristic, as CloudSim 3.0.3 runs it.

A reference policy for ``simulate_planetlab.py`` (not part of the product): the local
regression allocation policy (``PowerVmAllocationPolicyMigrationLocalRegression``, safety 1.2
in the published tables) with the minimum-migration-time selection, everything else as in
:class:`thr_mmt.ThrMmt` (the same ``PowerVmAllocationPolicyMigrationAbstract`` round: the VMs
with the least RAM leave the overloaded hosts, each VM goes where power grows least, the
underloaded hosts are emptied all or nothing). Only the overload rule differs (:class:`Regression`):

- A host's history is the sum over the VMs on it now (a VM planned there included) of each
  VM's own history of requested MIPS (``PowerHostUtilizationHistory.getUtilizationHistory``):
  the load read at each round since the first (the VM keeps it when it moves), at most 30,
  over the host's MIPS, its oldest zeros trimmed.
- With 10 figures or more, a line is fitted to the last 10 (x = 1, oldest, ... 10, newest) and
  read at x = 10 + the intervals the host's longest migration takes (RAM over half the
  bandwidth, rounded up to whole intervals: 1 on the PlanetLab set-up); the host is
  overloaded when that prediction times the safety parameter is 1 or more.
- With fewer (a host whose VMs are all younger than 10 rounds, or whose older figures are all
  0), the fallback: the static threshold at 0.7 (requested MIPS over MIPS above 0.7).

CloudSim calls it loess with tricube weights (``MathUtil.getLoessParameterEstimates``), but
3.0.3's weighted regression weighs only when at least 40% of the weights are 0, which its
tricube weights for 10 points never are (they are all positive: the inverse of the tricube,
``getTricubeWeigts``): the fit is ordinary least squares. It is linear in the figures, so a
host's prediction is the sum of its VMs' (:func:`fit`), and the rule is kept per host as VMs
are planned on and off, as :class:`thr_mmt.Threshold` keeps requested MIPS.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from thr_mmt import Flags, Floats, Threshold, ThrMmt

from reconciler.model.desired import DesiredState

MIB = 1024**2
POINTS = 10
"""Figures the regression fits (``length`` in CloudSim: responsive to the latest values)."""
HISTORY = 30
"""Figures a VM keeps (``PowerVm.HISTORY_LENGTH``)."""
FALLBACK = 0.7
"""The static threshold used while a host has fewer than :data:`POINTS` figures."""


def fit(history: Floats) -> tuple[Floats, Floats]:
    """Intercept and slope of the least-squares line through the newest :data:`POINTS`
    figures of each row of ``history`` (column 0 the newest; missing figures are 0), at
    x = 1 for the oldest of them and :data:`POINTS` for the newest."""
    rows = history.shape[0]
    y = np.zeros((rows, POINTS))
    n = min(POINTS, history.shape[1])
    y[:, :n] = history[:, :n]
    x = POINTS - np.arange(POINTS, dtype=np.float64)  # column i is x = 10 - i
    centred = x - x.mean()
    slope = y @ centred / float(centred @ centred)
    intercept = y.mean(axis=1) - slope * x.mean()
    return intercept, slope


def predicts_overload(
    history: Sequence[float], safety: float = 1.2, horizon: int = 1, *, capacity: float = 1.0
) -> bool | None:
    """CloudSim's rule on one host's ``history`` (newest first, in MIPS, of ``capacity``
    MIPS): True or False from the regression, None when there are too few figures for it (the
    fallback decides). The figures are trimmed of their oldest zeros first, as CloudSim does."""
    figures = list(history[:HISTORY])
    while figures and figures[-1] == 0:
        figures.pop()
    if len(figures) < POINTS:
        return None
    a, b = fit(np.array([figures], dtype=np.float64))
    return bool(safety * (a[0] + b[0] * (POINTS + horizon)) / capacity >= 1)


class Regression(Threshold):
    """CloudSim's local regression rule over the hosts' VM ``lists`` (see the module's doc).

    ``intercept``, ``slope``: each VM's share of its host's fit; ``long``: whether the VM
    alone gives its host :data:`POINTS` figures (one of its figures at least that old is not
    0); ``horizon``: each VM's migration in whole intervals. ``demand`` and ``threshold`` (the
    fallback's) as :class:`thr_mmt.Threshold`."""

    def __init__(
        self,
        safety: float,
        demand: Floats,
        lists: Sequence[Sequence[int]],
        capacity: Floats,
        *,
        intercept: Floats,
        slope: Floats,
        long: Flags,
        horizon: Floats,
    ) -> None:
        super().__init__(FALLBACK, demand, lists, capacity)
        self.safety = safety
        self.lists = lists
        self.intercept = intercept
        self.slope = slope
        self.long = long
        self.vm_horizon = horizon
        hosts = len(lists)
        self.a = np.zeros(hosts)
        self.b = np.zeros(hosts)
        self.longs = np.zeros(hosts, dtype=np.int64)
        self.horizon = np.zeros(hosts)
        for h, vms in enumerate(lists):
            for vm in vms:
                self._count(vm, h, 1)
            self._horizon(h)

    def _count(self, vm: int, h: int, sign: int) -> None:
        self.a[h] += sign * self.intercept[vm]
        self.b[h] += sign * self.slope[vm]
        self.longs[h] += sign * int(self.long[vm])

    def _horizon(self, h: int) -> None:
        self.horizon[h] = max((self.vm_horizon[vm] for vm in self.lists[h]), default=0.0)

    def add(self, vm: int, h: int) -> None:
        super().add(vm, h)
        self._count(vm, h, 1)
        self._horizon(h)

    def remove(self, vm: int, h: int) -> None:
        super().remove(vm, h)
        self._count(vm, h, -1)
        self._horizon(h)

    def _rule(self, a: Floats, b: Floats, longs: Flags, horizon: Floats, fallback: Flags) -> Flags:
        predicted = self.safety * (a + b * (POINTS + horizon)) / self.capacity
        return np.where(longs, predicted >= 1, fallback)

    def over(self) -> Flags:
        return self._rule(self.a, self.b, self.longs > 0, self.horizon, super().over())

    def over_host(self, h: int) -> bool:
        if self.longs[h] == 0:
            return super().over_host(h)
        predicted = self.safety * (self.a[h] + self.b[h] * (POINTS + self.horizon[h]))
        return bool(predicted / self.capacity[h] >= 1)

    def over_with(self, vm: int) -> Flags:
        return self._rule(
            self.a + self.intercept[vm],
            self.b + self.slope[vm],
            (self.longs > 0) | self.long[vm],
            np.maximum(self.horizon, self.vm_horizon[vm]),
            super().over_with(vm),
        )


class LrMmt(ThrMmt):
    """CloudSim 3.0.3's LR-MMT at ``safety``, deciding every round of the replay; the other
    arguments as :class:`thr_mmt.ThrMmt`'s. A VM's history is the load read at each round
    this policy decides (from ``first``), as CloudSim's VMs record it at each update."""

    def __init__(
        self,
        desired: DesiredState,
        safety: float = 1.2,
        *,
        first: float = 300.0,
        lag: float = 0.1,
        finished: Sequence[float] | None = None,
        tie: float = 0.0,
    ) -> None:
        super().__init__(desired, FALLBACK, first=first, lag=lag, finished=finished, tie=tie)
        self.safety = safety
        self.name = f"lr-mmt-{safety:g}"
        self.history: list[Floats] = []
        """Each round's load as this policy read it, newest last (at most :data:`HISTORY`)."""
        self.fallbacks = 0
        """Host-rounds judged by the fallback threshold (hosts with VMs, at the round's start)."""
        bandwidth = desired.cluster.spec.defaults.migration.bandwidth
        self._bandwidth = float(bandwidth * MIB) if bandwidth else math.inf

    def judge(
        self, demand: Floats, lists: Sequence[Sequence[int]], capacity: Floats, seconds: float
    ) -> Threshold:
        self.history.append(demand)
        del self.history[:-HISTORY]
        past = np.stack(self.history[::-1], axis=1)  # column 0: this round
        intercept, slope = fit(past)
        long = (past[:, POINTS - 1 :] != 0).any(axis=1)
        step = self.desired.policy.spec.interval.total_seconds()
        horizon = np.ceil(self._ram / self._bandwidth / step)
        rule = Regression(
            self.safety,
            demand,
            lists,
            capacity,
            intercept=intercept,
            slope=slope,
            long=long,
            horizon=horizon,
        )
        used = np.array([len(vms) > 0 for vms in lists])
        self.fallbacks += int(np.count_nonzero((rule.longs == 0) & used))
        return rule
