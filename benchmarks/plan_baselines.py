"""Two baseline balancers, one migration per step, with the same capacity and required rules
as the benchmark's model (plan_model.Instance):

* ``incus``: Incus's rebalancer (lxc/incus#485) as described there: per round take the CPU
  architecture with the largest spread over threshold, its busiest host as the only source and
  its least busy host as the target (the next least busy when nothing fits), and move the one VM
  that brings the source closest to the midpoint of the two scores without overshooting (the
  source stays at or above the target). One move per round, a VM moves at most once
  (cooldown), until every spread is under threshold or nothing qualifies.
* ``greedy``: at each step the single move over all VMs and targets that lowers its
  architecture's spread the most (ties: the lower sum of squared deviations from the
  architecture's mean), until every spread is under threshold or no move lowers a spread.
"""

from __future__ import annotations

import time

import numpy as np
from plan_model import EPS, Instance, IntArray, Outcome, judge


class _State:
    def __init__(self, inst: Instance) -> None:
        self.inst = inst
        self.assign: IntArray = inst.home.copy()
        c, m, vc, mm = inst.sums(self.assign)
        self.c, self.m, self.vc, self.mm = c, m, vc, mm
        self.coef = inst.score_coef()
        _, _, self.score = inst.scores(self.assign)
        self.arches = inst.arches()
        self.vm_groups: dict[int, list[int]] = {}
        for gi, g in enumerate(inst.groups):
            for v in g.members:
                self.vm_groups.setdefault(v, []).append(gi)
        self.steps = 0

    def spread(self, a: str) -> float:
        s = self.score[self.arches[a]]
        return float(s.max() - s.min())

    def over(self) -> list[str]:
        return [a for a in sorted(self.arches) if self.spread(a) > self.inst.threshold + EPS]

    def vms_on(self, h: int) -> list[int]:
        return [int(v) for v in np.flatnonzero(self.assign == h)]

    def can_move(self, v: int, h: int) -> bool:
        inst = self.inst
        if h == self.assign[v] or h not in inst.allowed[v]:
            return False
        sums = (
            self.c[h] + inst.cpu[v],
            self.m[h] + inst.mem[v],
            self.vc[h] + inst.vcpus[v],
            self.mm[h] + inst.mem_max[v],
        )
        if not inst.host_fits(sums, h):
            return False
        for gi in self.vm_groups.get(v, []):
            g = inst.groups[gi]
            d = g.domain[h]
            if d < 0:
                continue
            for u in g.members:
                if u != v and g.domain[int(self.assign[u])] == d:
                    return False
        return True

    def move(self, v: int, h: int) -> None:
        inst = self.inst
        s = int(self.assign[v])
        for arr, load in (
            (self.c, inst.cpu),
            (self.m, inst.mem),
            (self.vc, inst.vcpus),
            (self.mm, inst.mem_max),
        ):
            arr[s] -= load[v]
            arr[h] += load[v]
        self.score[s] -= self.coef[v, s]
        self.score[h] += self.coef[v, h]
        self.assign[v] = h
        self.steps += 1


def incus(inst: Instance) -> Outcome:
    t0 = time.perf_counter()
    st = _State(inst)
    moved: set[int] = set()
    note = "reached"
    while True:
        over = st.over()
        if not over:
            break
        a = max(over, key=st.spread)
        hosts = st.arches[a]
        src = max(hosts, key=lambda h: st.score[h])
        pick: tuple[int, int] | None = None
        for dst in sorted((h for h in hosts if h != src), key=lambda h: st.score[h]):
            mid = (st.score[src] + st.score[dst]) / 2
            best = None
            for v in st.vms_on(src):
                if v in moved or not inst.movable[v] or not st.can_move(v, dst):
                    continue
                new_src = st.score[src] - st.coef[v, src]
                new_dst = st.score[dst] + st.coef[v, dst]
                if new_src < new_dst - EPS:
                    continue  # overshoot
                gap = abs(new_src - mid)
                if best is None or gap < best[0]:
                    best = (gap, v)
            if best is not None:
                pick = (best[1], dst)
                break
        if pick is None:
            note = "stuck"
            break
        st.move(*pick)
        moved.add(pick[0])
    return judge(inst, "incus", st.assign, time.perf_counter() - t0, steps=st.steps, note=note)


def greedy(inst: Instance) -> Outcome:
    t0 = time.perf_counter()
    st = _State(inst)
    note = "reached"
    while True:
        over = st.over()
        if not over:
            break
        best: tuple[tuple[float, float, int, int], int, int] | None = None
        for a in over:
            hosts = st.arches[a]
            old = st.spread(a)
            for src in hosts:
                for v in st.vms_on(src):
                    if not inst.movable[v]:
                        continue
                    for dst in hosts:
                        if dst == src or not st.can_move(v, dst):
                            continue
                        s = st.score[hosts].copy()
                        s[hosts.index(src)] -= st.coef[v, src]
                        s[hosts.index(dst)] += st.coef[v, dst]
                        gain = old - float(s.max() - s.min())
                        dev = float(((s - s.mean()) ** 2).sum())
                        key = (gain, -dev, -v, -dst)
                        if gain > EPS and (best is None or key > best[0]):
                            best = (key, v, dst)
        if best is None:
            note = "stuck"
            break
        st.move(best[1], best[2])
    return judge(inst, "greedy", st.assign, time.perf_counter() - t0, steps=st.steps, note=note)
