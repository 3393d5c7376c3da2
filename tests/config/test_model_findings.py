"""Model errors reported on the YAML line they concern, with what to do about them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.clusters import (
    HEAD,
    cluster_yaml,
    col,
    findings_text,
    policy_yaml,
    rule_findings,
)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _policy(root: Path, *spec_lines: str) -> list[str]:
    return findings_text(
        root, {"cluster.yaml": cluster_yaml(), "policy.yaml": policy_yaml(*spec_lines)}
    )


def test_missing_api_version(tmp_path: Path) -> None:
    text = cluster_yaml().removeprefix(HEAD)
    assert findings_text(tmp_path, {"cluster.yaml": text}) == [
        "lab/cluster.yaml:1:1: error: missing apiVersion (add apiVersion: placement/v1alpha1)"
    ]


def test_unknown_api_version(tmp_path: Path) -> None:
    text = cluster_yaml().replace("placement/v1alpha1", "placement/v2")
    assert findings_text(tmp_path, {"cluster.yaml": text}) == [
        "lab/cluster.yaml:1:13: error: apiVersion: unknown apiVersion 'placement/v2' "
        "(use apiVersion: placement/v1alpha1)"
    ]


def test_missing_kind(tmp_path: Path) -> None:
    text = cluster_yaml().replace("kind: Cluster\n", "")
    assert findings_text(tmp_path, {"cluster.yaml": text}) == [
        "lab/: error: no Cluster document in this folder (add a cluster.yaml with kind: Cluster "
        "listing the hosts; see docs/cluster-state.md)",
        "lab/cluster.yaml:1:1: error: missing kind (add kind: one of Cluster, BalancePolicy, "
        "PlacementRules, Placement)",
    ]


def test_unknown_kind(tmp_path: Path) -> None:
    files = {"cluster.yaml": cluster_yaml(), "x.yaml": f"{HEAD}kind: Clutser\nmetadata: {{}}\n"}
    assert findings_text(tmp_path, files) == [
        "lab/x.yaml:2:7: error: kind: unknown kind 'Clutser' (use one of Cluster, "
        "BalancePolicy, PlacementRules, Placement)"
    ]


def test_unknown_key_points_at_the_key(tmp_path: Path) -> None:
    assert _policy(tmp_path, "threshold: 20", "treshold: 30") == [
        "lab/policy.yaml:6:3: error: spec.treshold: unknown key 'treshold' (did you mean "
        "'threshold'? allowed here: mode, interval, score, basis, load, threshold, margin, "
        "holdRounds, hostLimit, cpuOvercommit, cooldown, minUptime, batch, parallel, drift, "
        "migration, windows, record, recovery, power)"
    ]


def test_python_field_names_are_unknown_keys(tmp_path: Path) -> None:
    assert _policy(tmp_path, "hold_rounds: 3") == [
        "lab/policy.yaml:5:3: error: spec.hold_rounds: unknown key 'hold_rounds' (did you mean "
        "'holdRounds'? allowed here: mode, interval, score, basis, load, threshold, margin, "
        "holdRounds, hostLimit, cpuOvercommit, cooldown, minUptime, batch, parallel, drift, "
        "migration, windows, record, recovery, power)"
    ]


def test_unknown_key_in_a_rule_strips_the_type_tag(tmp_path: Path) -> None:
    rule = "{name: p, type: pin, vms: {names: [erp]}, hosts: {names: [kvm-01]}, maxSkew: 1}"
    assert rule_findings(tmp_path, rule) == [
        f"lab/rules.yaml:6:{col(rule, 'maxSkew')}: error: spec.rules[0].maxSkew: "
        "unknown key 'maxSkew' (remove it; allowed here: name, type, vms, hosts)"
    ]


def test_threshold_out_of_range(tmp_path: Path) -> None:
    assert _policy(tmp_path, "threshold: 120") == [
        "lab/policy.yaml:5:14: error: spec.threshold: 120 is too large (use at most 100)"
    ]


def test_batch_zero(tmp_path: Path) -> None:
    assert _policy(tmp_path, "batch: 0") == [
        "lab/policy.yaml:5:10: error: spec.batch: 0 is too small (use at least 1)"
    ]


def test_score_weights_all_zero(tmp_path: Path) -> None:
    assert _policy(tmp_path, "score: {cpu: 0, memory: 0}") == [
        "lab/policy.yaml:5:10: error: spec.score: score weights cpu and memory are both 0 "
        "(give at least one a weight)"
    ]


def test_bad_duration(tmp_path: Path) -> None:
    assert _policy(tmp_path, "interval: 15 minutes") == [
        "lab/policy.yaml:5:13: error: spec.interval: '15 minutes' is not a duration (write a "
        "number and a unit: ms, s, m, h, d or w (e.g. 90s, 15m, 6h, 1h30m))"
    ]


def test_bad_size(tmp_path: Path) -> None:
    host = '{name: kvm-01, uri: "test:///one", reserve: {memory: 4GB1}}'
    assert findings_text(tmp_path, {"cluster.yaml": cluster_yaml(host)}) == [
        f"lab/cluster.yaml:6:{col(host, '4GB1')}: error: "
        "spec.hosts[0].reserve.memory: '4GB1' is not a size "
        "(write a number and a unit: B, KiB, MiB, GiB or TiB)"
    ]


def test_wrong_enum_value(tmp_path: Path) -> None:
    assert _policy(tmp_path, "mode: yolo") == [
        "lab/policy.yaml:5:9: error: spec.mode: the string 'yolo' is not allowed "
        "(use one of 'observe', 'propose' or 'apply')"
    ]


def test_unquoted_yes_gets_a_quoting_hint(tmp_path: Path) -> None:
    host = '{name: kvm-01, uri: "test:///one", labels: {gpu: yes}}'
    assert findings_text(tmp_path, {"cluster.yaml": cluster_yaml(host)}) == [
        f"lab/cluster.yaml:6:{col(host, 'yes')}: error: "
        "spec.hosts[0].labels.gpu: expected a string, found true "
        '(put it in quotes: "yes")'
    ]


def test_missing_required_key_points_at_its_mapping(tmp_path: Path) -> None:
    cluster = cluster_yaml("{name: kvm-01}")
    assert findings_text(tmp_path, {"cluster.yaml": cluster}) == [
        "lab/cluster.yaml:6:7: error: spec.hosts[0].uri: missing required key 'uri' "
        "(add uri: to this mapping)"
    ]


def test_unknown_rule_type(tmp_path: Path) -> None:
    assert rule_findings(tmp_path, "{name: x, type: pinn, vms: {names: [a]}}") == [
        "lab/rules.yaml:6:7: error: spec.rules[0]: unknown type 'pinn' (use one of "
        "'antiAffinity', 'affinity', 'hostAffinity', 'hostAntiAffinity', 'pin', 'exclude', "
        "'spread', 'disruptionBudget')"
    ]


def test_wrong_type_in_a_rule(tmp_path: Path) -> None:
    rule = "{name: s, type: spread, vms: {names: [a]}, maxSkew: many}"
    assert rule_findings(tmp_path, rule) == [
        f"lab/rules.yaml:6:{col(rule, 'many')}: error: spec.rules[0].maxSkew: "
        "expected a whole number, found the string 'many' (write a whole number here)"
    ]


def test_two_documents_of_one_kind(tmp_path: Path) -> None:
    files = {"a.yaml": cluster_yaml(), "b.yaml": cluster_yaml()}
    assert findings_text(tmp_path, files) == [
        "lab/b.yaml:2:7: error: kind: a second Cluster document in this cluster (the first is "
        "in lab/a.yaml:2) (keep one Cluster per cluster folder; put each cluster in its own "
        "folder)"
    ]


def test_folder_without_a_cluster(tmp_path: Path) -> None:
    assert findings_text(tmp_path, {"policy.yaml": policy_yaml("batch: 2")}) == [
        "lab/: error: no Cluster document in this folder (add a cluster.yaml with kind: Cluster "
        "listing the hosts; see docs/cluster-state.md)"
    ]


def test_several_documents_in_one_file_are_all_read(tmp_path: Path) -> None:
    text = f"{cluster_yaml()}---\n{policy_yaml('batch: 0')}"
    first = len(cluster_yaml().splitlines())
    assert findings_text(tmp_path, {"all.yaml": text}) == [
        f"lab/all.yaml:{first + 6}:10: error: spec.batch: 0 is too small (use at least 1)"
    ]


def test_every_error_of_a_folder_is_reported(tmp_path: Path) -> None:
    findings = _policy(tmp_path, "batch: 0", "threshold: 101", "margin: -1")
    assert [f.split(": ")[2] for f in findings] == ["spec.batch", "spec.threshold", "spec.margin"]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (
            "threshold: yes",
            "expected a number, found yes (YAML reads it as true) (write a number here)",
        ),
        (
            "threshold: Off",
            "expected a number, found Off (YAML reads it as false) (write a number here)",
        ),
        ("threshold: '20'", "expected a number, found the string '20' (remove the quotes: 20)"),
        ('batch: "4"', "expected a whole number, found the string '4' (remove the quotes: 4)"),
        ("batch: 4.5", "expected a whole number, found the number 4.5 (write a whole number here)"),
        ("holdRounds: true", "expected a whole number, found true (write a whole number here)"),
    ],
)
def test_numbers_must_be_written_as_numbers(tmp_path: Path, line: str, problem: str) -> None:
    key = line.split(":")[0]
    assert _policy(tmp_path, line) == [
        f"lab/policy.yaml:5:{len(key) + 5}: error: spec.{key}: {problem}"
    ]


def test_booleans_must_be_written_as_booleans(tmp_path: Path) -> None:
    host = '{name: kvm-01, uri: "test:///one", maintenance: "true"}'
    where = col(host, '"true')
    assert findings_text(tmp_path, {"cluster.yaml": cluster_yaml(host)}) == [
        f"lab/cluster.yaml:6:{where}: error: spec.hosts[0].maintenance: "
        "expected true or false, found the string 'true' (remove the quotes: true)"
    ]


def test_whole_numbers_are_accepted_where_a_fraction_may_be(tmp_path: Path) -> None:
    assert (
        _policy(tmp_path, "threshold: 15", "cpuOvercommit: 2", "score: {cpu: 1, memory: 0}") == []
    )


def test_cron_schedule_out_of_range_is_reported_on_its_line(tmp_path: Path) -> None:
    window = '{schedule: "0 25 * * 1-5", duration: 0s}'
    schedule, duration = col(window, '"0 25'), col(window, "0s")
    assert _policy(tmp_path, "windows:", f"  - {window}") == [
        f"lab/policy.yaml:6:{schedule}: error: spec.windows[0].schedule: the hour "
        "field '25' is out of range (hours are 0-23) (write minute hour day-of-month month "
        'day-of-week, e.g. "0 22 * * 1-5")',
        f"lab/policy.yaml:6:{duration}: error: spec.windows[0].duration: a window of 0s "
        "never opens (give how long it stays open, e.g. 2h)",
    ]


def test_unknown_time_zone_is_reported_on_its_line(tmp_path: Path) -> None:
    window = '{schedule: "0 22 * * 1-5", duration: 2h, timezone: Europe/Berln}'
    where = col(window, "Europe/Berln")
    assert _policy(tmp_path, "windows:", f"  - {window}") == [
        f"lab/policy.yaml:6:{where}: error: spec.windows[0].timezone: unknown time zone "
        "'Europe/Berln' (did you mean 'Europe/Berlin'?)"
    ]


def test_an_interval_of_0s_is_an_error_on_its_line(tmp_path: Path) -> None:
    from reconciler.config import validate_paths

    root = Path(__file__).resolve().parents[2] / "cluster-state"
    for f in root.glob("*.yaml"):
        (tmp_path / f.name).write_text(f.read_text())
    policy = tmp_path / "policy.yaml"
    text = policy.read_text()
    assert "  interval: 15m" in text
    policy.write_text(text.replace("  interval: 15m", "  interval: 0s"))
    (report,) = validate_paths([tmp_path])
    (finding,) = report.findings
    assert finding.path == "spec.interval"
    assert finding.line == next(
        i for i, line in enumerate(policy.read_text().splitlines(), 1) if "interval:" in line
    )
    assert "without pause" in finding.message
