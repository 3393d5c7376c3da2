"""Golden scenarios: every tests/scenarios/*.yaml runs through plan() and must give its outcome.

A scenario holds ``description``, ``now``, ``desired`` (the documents ``cluster`` and, optionally,
``policy``, ``rules`` and ``placement``, inline), ``snapshot``, optional ``history`` and, last,
``expected``: the plan's essential outcome (moves, deferred, unsatisfiable, proposed placement
and the spread of each architecture, rounded to one decimal).

A scenario whose ``expected`` is right but which the planner gets wrong today carries
``known_bug: <what is wrong>``: it runs as a strict xfail (it fails the suite once the planner is
fixed, so the key gets removed) and ``UPDATE_GOLDEN`` leaves it alone.

To record what the planner now gives after a deliberate change::

    UPDATE_GOLDEN=1 pytest tests/core/test_scenarios.py

This rewrites everything from the ``expected:`` line down and keeps the rest of the file. Read
every changed expectation in the diff before committing it: a golden that records a bug hides it.
"""

from __future__ import annotations

import importlib
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconciler.model.cluster import Cluster
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.placement import Placement
from reconciler.model.plan import Move, Plan
from reconciler.model.policy import BalancePolicy
from reconciler.model.rules import PlacementRules
from reconciler.model.snapshot import Snapshot

SCENARIOS = Path(__file__).parent.parent / "scenarios"
FILES = sorted(SCENARIOS.glob("*.yaml"))
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
TOP_KEYS = {"description", "known_bug", "now", "desired", "snapshot", "history", "expected"}


class Scenario:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = yaml.safe_load(path.read_text())
        unknown = set(self.data) - TOP_KEYS
        assert not unknown, f"{path.name}: unknown keys {sorted(unknown)}"
        docs = self.data["desired"]
        parts: dict[str, Any] = {"cluster": Cluster.model_validate(docs["cluster"])}
        for key, model in (
            ("policy", BalancePolicy),
            ("rules", PlacementRules),
            ("placement", Placement),
        ):
            if key in docs:
                parts[key] = model.model_validate(docs[key])
        self.desired = DesiredState(**parts)
        self.snapshot = Snapshot.model_validate(self.data["snapshot"])
        self.history = History.model_validate(self.data.get("history") or {})
        self.now = datetime.fromisoformat(self.data["now"])
        self.expected: dict[str, Any] = self.data.get("expected") or {}


def _move(move: Move) -> dict[str, Any]:
    return {
        "vm": move.vm,
        "source": move.source,
        "target": move.target,
        "reason": str(move.reason),
        "rule": move.rule,
        "wave": move.wave,
    }


def outcome(plan: Plan) -> dict[str, Any]:
    """The parts of a plan a scenario pins down, as plain data."""
    return {
        "moves": [_move(m) for m in plan.moves],
        "deferred": [_move(m) for m in plan.deferred],
        "unsatisfiable": [
            {"code": str(u.code), "rule": u.rule, "message": u.message} for u in plan.unsatisfiable
        ],
        "placement": dict(sorted(plan.placement.items())),
        "spreads": {
            s.arch: {
                "before": round(s.before, 1),
                "after": round(s.after, 1),
                "rounds_over": s.rounds_over,
                "balancing": s.balancing,
            }
            for s in sorted(plan.spreads, key=lambda s: s.arch)
        },
    }


class _Dumper(yaml.SafeDumper):
    """Block style for the outline, one flow-style line per move, item or spread."""


def _represent_dict(dumper: yaml.SafeDumper, data: dict[str, Any]) -> yaml.Node:
    flow = not any(isinstance(v, dict | list) for v in data.values())
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=flow)


_Dumper.add_representer(dict, _represent_dict)


def write_expected(path: Path, expected: dict[str, Any]) -> None:
    """Replace the ``expected:`` block, which must come last, and keep the rest of the file."""
    text = path.read_text()
    marker = "\nexpected:"
    head = text[: text.index(marker) + 1] if marker in text else text.rstrip("\n") + "\n"
    body = yaml.dump(
        {"expected": expected}, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True
    )
    path.write_text(head + body)


def test_there_are_scenarios() -> None:
    assert len(FILES) >= 20


def test_write_expected_replaces_only_the_expected_block(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("# keep me\ndescription: d\nexpected:\n  moves: []\n")
    new = {"moves": [{"vm": "a", "wave": 0}], "placement": {"a": "h"}}
    write_expected(path, new)
    text = path.read_text()
    assert text.startswith("# keep me\ndescription: d\nexpected:\n")
    assert "- {vm: a, wave: 0}" in text
    assert yaml.safe_load(text)["expected"] == new


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario_is_consistent(path: Path) -> None:
    """Snapshot and desired state describe the same cluster, and ``expected`` comes last."""
    s = Scenario(path)
    assert s.snapshot.cluster == s.desired.cluster.metadata.name
    cluster_hosts = {h.name for h in s.desired.cluster.spec.hosts}
    assert {h.name for h in s.snapshot.hosts} <= cluster_hosts
    assert list(s.data)[-1] == "expected"
    assert s.now.tzinfo is not None


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario_documents_pass_validation(path: Path, tmp_path: Path) -> None:
    """The inline documents are a valid cluster folder, semantic checks included."""
    loader = pytest.importorskip("reconciler.config.loader")
    docs = Scenario(path).data["desired"]
    for key, doc in docs.items():
        (tmp_path / f"{key}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    loader.load_desired(tmp_path)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario(path: Path, request: pytest.FixtureRequest) -> None:
    try:
        planner = importlib.import_module("reconciler.core.planner")
    except ModuleNotFoundError as err:
        if err.name not in {"reconciler.core", "reconciler.core.planner"}:
            raise
        pytest.skip("reconciler.core.planner is not there yet")
    s = Scenario(path)
    known_bug = s.data.get("known_bug")
    if known_bug:
        request.applymarker(pytest.mark.xfail(reason=f"planner bug: {known_bug}", strict=True))
    plan: Plan = planner.plan(s.desired, s.snapshot, s.history, now=s.now)
    got = outcome(plan)
    if UPDATE and got != s.expected and not known_bug:
        write_expected(path, got)
        return
    assert got == s.expected, f"{path.name}: {s.data['description']}"
