"""A soak of the loop around the real round on the in-memory cluster, in virtual time.

Every round observes, plans and (in apply mode) migrates; one host flaps between reachable and
unreachable, webhooks arrive now and then. Memory (tracemalloc), threads and open file
descriptors are sampled after a warm-up and at the end. Used by a short test and by
``benchmarks/soak_run.py`` for the long version.
"""

from __future__ import annotations

import gc
import os
import random
import tracemalloc
from dataclasses import dataclass
from datetime import timedelta

from reconciler.engine.loop import Loop, LoopSettings
from reconciler.engine.metrics import Metrics
from reconciler.engine.round import RoundOptions, RoundPorts, run_round
from reconciler.model.policy import Mode
from reconciler.model.status import ReconcileStatus
from tests.core.builders import desired, host
from tests.engine.loop_fakes import FakeClock, FakeTime
from tests.fakes import GIB, FakeCluster, FakeHost, FakeVm, MemoryStatusStore


@dataclass
class SoakFigures:
    rounds: int
    migrations: int
    flap_migrations: int
    memory_growth_kib: float
    threads: tuple[int, int]
    fds: tuple[int, int]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def soak(rounds: int, *, flap_every: int = 7, seed: int = 1) -> SoakFigures:
    rng = random.Random(seed)
    names = ["h0", "h1", "h2", "h3"]
    d = desired([host(n) for n in names], threshold=15, batch=2, cooldown="0s", minUptime="0s")
    d = d.model_copy(
        update={
            "policy": d.policy.model_copy(
                update={
                    "spec": d.policy.spec.model_copy(
                        update={"mode": Mode.APPLY, "interval": timedelta(minutes=5)}
                    )
                }
            )
        }
    )
    time = FakeTime(clock=FakeClock())
    fake = FakeCluster(
        "test",
        [FakeHost(n) for n in names],
        [FakeVm(f"vm{i}", "h0", cpu_used=1.5, memory=2 * GIB) for i in range(12)],
    )
    fake.clock = time.clock  # type: ignore[assignment]
    store = MemoryStatusStore()
    ports = RoundPorts(observer=fake, migrator=fake, recorder=fake, status=store, clock=time.clock)
    loop: Loop
    flap_moves = 0
    done = 0

    def one(trigger: str, act: bool) -> ReconcileStatus:
        nonlocal flap_moves, done
        done += 1
        flapping = done % flap_every == 0
        fake.unreachable("h3", flapping)
        before = len(fake.migrations)
        report = run_round(d, ports, RoundOptions(act=act, trigger=trigger, stop=loop.round_stop))
        if flapping:
            flap_moves += sum(m.target == "h3" for m, _ in fake.migrations[before:])
        if done % 50 == 0:  # the load shifts, so balance keeps having work to do
            for vm in fake.vms.values():
                vm.cpu_used = rng.uniform(0.2, 3.0)
        if rng.random() < 0.1:
            loop.wakeup.trigger("webhook")
        if done >= rounds:
            loop.stop()
        return report.status

    loop = Loop(
        cluster="test",
        run_round=one,
        load_policy=lambda: d.policy,
        clock=time.clock,
        metrics=Metrics("test"),
        sleep=time.sleep,
        rng=rng,
        settings=LoopSettings(),
    )
    warm = max(50, rounds // 10)
    threads: list[int] = []
    fds: list[int] = []
    tracemalloc.start()
    try:
        while not loop.stopping:
            loop.step()
            if done == warm and not threads:
                gc.collect()
                baseline = tracemalloc.get_traced_memory()[0]
                threads.append(len(os.listdir("/proc/self/task")))
                fds.append(_fds())
        gc.collect()
        growth = (tracemalloc.get_traced_memory()[0] - baseline) / 1024
    finally:
        tracemalloc.stop()
    threads.append(len(os.listdir("/proc/self/task")))
    fds.append(_fds())
    return SoakFigures(
        rounds=done,
        migrations=len(fake.migrations),
        flap_migrations=flap_moves,
        memory_growth_kib=growth,
        threads=(threads[0], threads[1]),
        fds=(fds[0], fds[1]),
    )
