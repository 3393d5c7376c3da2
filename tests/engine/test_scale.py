"""The executor's work per started move does not grow with the cluster (not timed: counted)."""

from __future__ import annotations

import threading
from datetime import timedelta

from reconciler.engine.execute import FRESH_FOR, Execution, Ports
from reconciler.model.status import MoveOutcome
from tests.engine.scale import run_scale, scale_case


def test_host_calls_per_started_move_do_not_grow_with_the_cluster() -> None:
    small, large = run_scale(40), run_scale(160)
    assert small.started == small.pending
    assert large.started == large.pending
    # a look at both ends (none in the first wave), the intent, the outcome and both ends of
    # the migration: at most 6, whatever the cluster's size
    assert small.calls_per_move <= 6
    assert large.calls_per_move <= 6
    assert large.calls_per_move <= small.calls_per_move + 0.25


def test_admission_work_per_started_move_does_not_grow_with_the_cluster() -> None:
    small, large = run_scale(40), run_scale(160)
    # the model of the whole cluster is built once and followed in place after that
    assert small.builds == 1
    assert large.builds == 1
    # a pass judges the queue only up to the cluster's limit, not all of it
    assert large.verdicts_per_move <= small.verdicts_per_move + 0.5
    assert large.verdicts_per_move <= 4


def _execution(hosts: int, parallel_all: bool, age: timedelta) -> tuple[Execution, int]:
    fake, d, moves = scale_case(hosts)
    if parallel_all:
        spec = d.policy.spec
        parallel = spec.parallel.model_copy(update={"cluster": len(moves)})
        d = d.model_copy(
            update={
                "policy": d.policy.model_copy(
                    update={"spec": spec.model_copy(update={"parallel": parallel})}
                )
            }
        )
    snapshot = fake.observe()
    fake.observations = 0
    fake.clock.advance(age)
    execution = Execution(
        d,
        snapshot,
        moves,
        Ports(fake, fake, fake, fake.clock),
        plan_id="p",
        stop=threading.Event(),
        abort=threading.Event(),
    )
    results = execution.run()
    assert all(r.outcome is MoveOutcome.SUCCEEDED for r in results)
    return execution, fake.observations


def test_the_first_wave_starts_on_the_rounds_own_observation_without_a_second_look() -> None:
    # every move fits in the first wave (parallel and per-host limits), so nothing is looked at
    _, looks = _execution(8, parallel_all=True, age=timedelta(0))
    assert looks == 0


def test_an_observation_older_than_fresh_for_is_looked_at_again_before_the_first_wave() -> None:
    _, looks = _execution(8, parallel_all=True, age=FRESH_FOR + timedelta(seconds=1))
    assert looks == 1
