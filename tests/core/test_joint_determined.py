"""A plan of drift reverts alone has nothing to choose: the exact solver is not needed."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core import joint
from reconciler.core.planner import plan
from reconciler.model.history import History
from reconciler.model.plan import Plan
from tests.core.builders import NOW, desired, host, host_state, snapshot, vm

HOSTS = ["a", "b", "c"]


def _plan(placement: dict[str, str], where: dict[str, str], threshold: float) -> Plan:
    d = desired(
        [host(h) for h in HOSTS],
        placement=placement,
        drift="revert",
        threshold=threshold,
        hostLimit=100,
        batch=100,
        parallel={"cluster": 2},
    )
    s = snapshot([host_state(h) for h in HOSTS], [vm(n, h, memory_gib=2) for n, h in where.items()])
    return plan(d, s, History(), now=NOW)


@settings(max_examples=40, deadline=None)
@given(
    st.dictionaries(st.sampled_from([f"v{i}" for i in range(8)]), st.sampled_from(HOSTS)),
    st.dictionaries(st.sampled_from([f"v{i}" for i in range(8)]), st.sampled_from(HOSTS)),
    st.sampled_from([5.0, 100.0]),
)
def test_the_plan_is_the_one_the_solver_gives(
    where: dict[str, str], placement: dict[str, str], threshold: float
) -> None:
    placement = {v: h for v, h in placement.items() if v in where}
    fast = _plan(placement, where, threshold)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(joint, "_determined", lambda *_: False)
        solved = _plan(placement, where, threshold)
    assert fast.moves == solved.moves
    assert fast.optimal == solved.optimal


def test_a_plan_of_drift_reverts_alone_does_not_load_the_solver() -> None:
    code = (
        "import sys\n"
        "from tests.core.test_joint_determined import _plan\n"
        "p = _plan({'v1': 'b', 'v2': 'c'}, {'v1': 'a', 'v2': 'a', 'v3': 'b'}, 100.0)\n"
        "assert len(p.moves) == 2, p.moves\n"
        "assert 'scipy' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
