"""``plan --without-host`` and ``plan --add-host --like``: what-ifs on a snapshot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler import config
from reconciler.cli.common import EXIT_CHANGES, EXIT_ERROR
from reconciler.core import planner, whatif
from reconciler.model.history import History
from tests.e2e.test_plan_cli import reconciler
from tests.gitrepos import ROOT
from tests.impact.world import HOSTS, T0, snapshot, write

EXAMPLE = config.load_desired(ROOT / "cluster-state")
NOW = "2025-03-01T12:00:00Z"


@settings(max_examples=20, deadline=None)
@given(
    st.sampled_from(HOSTS),
    st.dictionaries(st.sampled_from(["web-1", "db-1", "erp"]), st.floats(0, 3)),
)
def test_without_a_host_nothing_stays_on_it_or_it_is_unsatisfiable(
    gone: str, cpu: dict[str, float]
) -> None:
    snap = snapshot(T0, cpu=cpu)
    plan = planner.plan(whatif.without_hosts(EXAMPLE, [gone]), snap, History(), now=T0)
    moved = {m.vm for m in [*plan.moves, *plan.deferred] if m.source == gone}
    stuck = {vm for u in plan.unsatisfiable for vm in u.vms}
    on_it = {v.name for v in snap.vms if v.host == gone}
    assert on_it <= moved | stuck
    assert all(m.target != gone for m in [*plan.moves, *plan.deferred])


def test_plan_without_host_and_with_an_added_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = write(snapshot(T0, cpu={"batch-1": 6.0, "batch-2": 6.0}), tmp_path / "snap.json")
    args = ("plan", ROOT / "cluster-state", "--snapshot", snap, "--now", NOW, "--format", "json")
    gone = reconciler(capsys, *args, "--without-host", "kvm-01", "--without-host", "kvm-03")
    assert gone.code == EXIT_CHANGES, gone.err
    data = json.loads(gone.out)
    sources = {m["source"] for m in data["moves"] + data["deferred"]}
    assert sources <= {"kvm-01", "kvm-03"}
    assert {m["target"] for m in data["moves"] + data["deferred"]} <= {"kvm-02"} or data[
        "unsatisfiable"
    ]
    history = tmp_path / "h.json"
    history.write_text('{"apiVersion": "placement/v1alpha1", "kind": "History", '
                       '"imbalanceRounds": {"x86_64": 5}}')  # fmt: skip
    added = reconciler(
        capsys, *args, "--history", history, "--add-host", "kvm-04", "--like", "kvm-02"
    )
    assert added.code == EXIT_CHANGES, added.err
    plan = json.loads(added.out)
    new = next(h for h in plan["hosts"] if h["host"] == "kvm-04")
    assert new["vmsBefore"] == 0
    assert new["vmsAfter"] >= 1  # balancing fills the new host
    plain = reconciler(capsys, *args, "--history", history)
    assert plain.out != added.out
    bad = reconciler(capsys, *args, "--add-host", "kvm-04")
    assert bad.code == EXIT_ERROR
    assert "go together" in bad.err
    unknown = reconciler(capsys, *args, "--without-host", "kvm-99")
    assert unknown.code == EXIT_ERROR
    assert "no host 'kvm-99'" in unknown.err
