"""The alert rules: promtool accepts them, their unit tests pass, and they stay in step with
the metrics the process exports and with the runbook in docs/operate.md."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import yaml

from reconciler.engine.metrics import Metrics
from tests.deploy.promtools import OPERATE, RULE_TESTS, RULES, binary

FUTURE_METRICS = {"reconciler_fence_total"}
"""Written before the code that exports them: dead-host recovery's fence counter."""


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _exported() -> set[str]:
    names: set[str] = set()
    for family in Metrics("x").registry.collect():
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}
        names.update(family.name + end for end in suffixes.get(family.type, [""]))
    return names


def test_promtool_checks_the_rules() -> None:
    done = subprocess.run(
        [binary("promtool"), "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in done.stdout


def test_the_rule_unit_tests_pass() -> None:
    done = subprocess.run(
        [binary("promtool"), "test", "rules", RULE_TESTS.name],
        capture_output=True,
        text=True,
        check=False,
        cwd=RULE_TESTS.parent,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_rule_has_a_severity_the_annotations_and_a_runbook_section() -> None:
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in OPERATE.read_text().splitlines()
        if line.startswith("#")
    }
    for rule in _rules():
        name = rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        notes = rule["annotations"]
        assert set(notes) == {"summary", "description", "runbook_url"}, name
        url = notes["runbook_url"]
        assert url.endswith(f"docs/operate.md#{name.lower()}"), name
        assert name.lower() in anchors, f"docs/operate.md has no section {name}"
        text = notes["summary"] + notes["description"]
        if name != "ReconcilerDown":  # `up` has no cluster label; it names the instance
            assert "$labels.cluster" in text, name
        if "host_reachable" in rule["expr"] or "fence" in rule["expr"]:
            assert "$labels.host" in text, name


def test_the_rules_use_only_metrics_the_process_exports() -> None:
    exported = _exported() | FUTURE_METRICS | {"up"}
    used: set[str] = set()
    for rule in _rules():
        used.update(re.findall(r"\breconciler_[a-z_]+", rule["expr"]))
        used.update(re.findall(r"\bup(?=\{)", rule["expr"]))
    assert used, "no metric found in the rules"
    assert used <= exported, f"not exported: {sorted(used - exported)}"
    assert {"reconciler_fence_total", "up", "reconciler_leader"} <= used


def test_every_alert_is_tested_both_firing_and_quiet() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    firing: set[str] = set()
    quiet: set[str] = set()
    for test in tests:
        for case in test["alert_rule_test"]:
            (firing if case["exp_alerts"] else quiet).add(case["alertname"])
    names = {rule["alert"] for rule in _rules()}
    assert names <= firing, f"never shown firing: {sorted(names - firing)}"
    assert names <= quiet, f"never shown quiet: {sorted(names - quiet)}"
