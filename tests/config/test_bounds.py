"""Every duration, size and count is bounded to what the runtime can use: a value outside is a
finding on its line with the bound, never a traceback and never a value that passes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.config import validate_folder
from reconciler.config.findings import Severity
from tests.config.clusters import HEAD, cluster_yaml, findings_text, policy_yaml, write_folder


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _policy(root: Path, *spec_lines: str) -> list[str]:
    return findings_text(
        root, {"cluster.yaml": cluster_yaml(), "policy.yaml": policy_yaml(*spec_lines)}
    )


def _cluster(root: Path, *spec_lines: str) -> list[str]:
    """A cluster whose spec has ``spec_lines`` (from line 5) before its one host."""
    lines = "".join(f"  {s}\n" for s in spec_lines)
    text = (
        f"{HEAD}kind: Cluster\nmetadata: {{name: lab}}\nspec:\n{lines}"
        '  hosts:\n    - {name: kvm-01, uri: "test:///one"}\n'
    )
    return findings_text(root, {"cluster.yaml": text})


POLICY_CASES = [
    # (spec line, path, what the finding says, the bound its hint gives)
    ("cooldown: 99999999999999w", "spec.cooldown", "is too long", "at most 365d"),
    ("cooldown: 1.0e+300", "spec.cooldown", "is too long", "at most 365d"),
    ("cooldown: 366d", "spec.cooldown", "is too long", "at most 365d"),
    ("minUptime: 9999999999999999999d", "spec.minUptime", "is too long", "at most 365d"),
    ("interval: 8d", "spec.interval", "is too long", "at most 7d"),
    ("interval: 0s", "spec.interval", "without pause", "e.g. 15m"),
    ("interval: .nan", "spec.interval", "not a duration", "ms, s, m"),
    ("interval: .inf", "spec.interval", "is too long", "at most 7d"),
    (
        'windows: [{schedule: "0 22 * * *", duration: 99999999999999w}]',
        "spec.windows[0].duration",
        "is too long",
        "at most 366d",
    ),
    ("migration: {timeoutPerGiB: 0s}", "spec.migration.timeoutPerGiB", "too short", "1s"),
    ("migration: {timeoutPerGiB: 2h}", "spec.migration.timeoutPerGiB", "too long", "1h"),
    ("migration: {progressTimeout: 0s}", "spec.migration.progressTimeout", "too short", "1s"),
    ("migration: {progressTimeout: 25h}", "spec.migration.progressTimeout", "too long", "1d"),
    ("cpuOvercommit: .nan", "spec.cpuOvercommit", ".nan is not a finite number", "0.5"),
    ("threshold: .inf", "spec.threshold", ".inf is not a finite number", "0.5"),
    ("score: {cpu: .nan, memory: 1}", "spec.score.cpu", "not a finite number", "0.5"),
]


@pytest.mark.parametrize(("line", "path", "problem", "bound"), POLICY_CASES)
def test_policy_values_out_of_bounds_are_errors(
    tmp_path: Path, line: str, path: str, problem: str, bound: str
) -> None:
    findings = _policy(tmp_path, line)
    assert len(findings) == 1, findings
    assert findings[0].startswith("lab/policy.yaml:5:"), findings
    assert f": error: {path}: " in findings[0]
    assert problem in findings[0]
    assert bound in findings[0]


CLUSTER_CASES = [
    ("defaults: {migration: {bandwidth: 99999999999999999999999}}", "bandwidth", "1048576"),
    ("defaults: {migration: {bandwidth: 1048577}}", "bandwidth", "1048576"),
    ("defaults: {reserve: {cpus: .inf}}", "reserve.cpus", ".inf is not a finite number"),
    ("defaults: {reserve: {cpus: .NaN}}", "reserve.cpus", ".NaN is not a finite number"),
    ("defaults: {reserve: {cpus: 4097}}", "reserve.cpus", "4096"),
    ("defaults: {reserve: {memory: 99999999999999TiB}}", "reserve.memory", "1024TiB"),
    ("defaults: {reserve: {memory: 1025TiB}}", "reserve.memory", "1024TiB"),
    (f"defaults: {{reserve: {{memory: {'9' * 400}TiB}}}}", "reserve.memory", "1024TiB"),
    ("defaults: {reserve: {memory: 99999999999999999999999999}}", "reserve.memory", "1024TiB"),
    ("observe: {sampleInterval: 1000d}", "observe.sampleInterval", "at most 1m"),
    ("observe: {connectTimeout: 1000d}", "observe.connectTimeout", "at most 10m"),
    ("observe: {callTimeout: 11m}", "observe.callTimeout", "at most 10m"),
    ("observe: {callTimeout: 0s}", "observe.callTimeout", ""),
]


@pytest.mark.parametrize(("line", "path", "bound"), CLUSTER_CASES)
def test_cluster_values_out_of_bounds_are_errors(
    tmp_path: Path, line: str, path: str, bound: str
) -> None:
    findings = _cluster(tmp_path, line)
    assert len(findings) == 1, findings
    assert findings[0].startswith("lab/cluster.yaml:5:"), findings
    assert f": error: spec.{line.split(':')[0]}." in findings[0]
    assert path in findings[0]
    assert bound in findings[0]


@pytest.mark.parametrize(
    ("rule", "path"),
    [
        ("{name: s, type: spread, vms: {names: [a*]}, maxSkew: 99999999999999}", "maxSkew"),
        (
            "{name: d, type: disruptionBudget, vms: {names: [a*]}, maxConcurrent: 10000001}",
            "maxConcurrent",
        ),
    ],
)
def test_rule_counts_are_bounded(tmp_path: Path, rule: str, path: str) -> None:
    rules = f"{HEAD}kind: PlacementRules\nmetadata: {{name: r}}\nspec:\n  rules:\n    - {rule}\n"
    findings = findings_text(tmp_path, {"cluster.yaml": cluster_yaml(), "rules.yaml": rules})
    assert len(findings) == 1, findings
    assert f"spec.rules[0].{path}: " in findings[0]
    assert "use at most 1000000" in findings[0]


def test_the_bounds_themselves_are_valid(tmp_path: Path) -> None:
    assert (
        _policy(
            tmp_path,
            "cooldown: 365d",
            "minUptime: 0s",
            "interval: 7d",
            "migration: {timeoutPerGiB: 1h, progressTimeout: 1s}",
            'windows: [{schedule: "0 22 * * *", duration: 366d}]',
        )
        == []
    )
    assert (
        _cluster(
            tmp_path,
            "defaults: {reserve: {memory: 1024TiB, cpus: 4096}, migration: {bandwidth: 1048576}}",
            "observe: {sampleInterval: 1m, connectTimeout: 10m, callTimeout: 1ms}",
        )
        == []
    )


_NUMBER = st.one_of(
    st.integers(min_value=0, max_value=10**40).map(str),
    st.from_regex(r"[0-9]{1,30}\.[0-9]{1,10}", fullmatch=True),
)
_DURATION_TEXT = st.one_of(
    st.lists(st.tuples(_NUMBER, st.sampled_from(["ms", "s", "m", "h", "d", "w"])), min_size=1).map(
        lambda parts: "".join(n + u for n, u in parts)
    ),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=12),
)
_DURATION_KEYS = [
    "interval",
    "cooldown",
    "minUptime",
    "migration.timeoutPerGiB",
    "migration.progressTimeout",
]


def _nested(key: str, value: str) -> str:
    head, _, rest = key.partition(".")
    return f"{head}: {value}" if not rest else f"{head}: {{{rest}: {value}}}"


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(_DURATION_KEYS), text=_DURATION_TEXT, raw=st.booleans())
def test_any_duration_text_validates_within_bounds_or_is_a_finding(
    tmp_path: Path, key: str, text: str, raw: bool
) -> None:
    value = text if raw and text.strip() and text.isprintable() else _quoted(text)
    folder = write_folder(
        tmp_path, {"cluster.yaml": cluster_yaml(), "policy.yaml": policy_yaml(_nested(key, value))}
    )
    report, desired = validate_folder(folder)  # never raises
    if desired is not None:
        spec = desired.policy.spec
        days = 86400
        assert 0 < spec.interval.total_seconds() <= 7 * days
        assert 0 <= spec.cooldown.total_seconds() <= 365 * days
        assert 0 <= spec.min_uptime.total_seconds() <= 365 * days
        assert 1 <= spec.migration.timeout_per_gib.total_seconds() <= 3600
        assert 1 <= spec.migration.progress_timeout.total_seconds() <= days
    else:
        assert report.findings
        for finding in report.findings:
            assert finding.line is not None
            assert finding.hint


_SIZE_TEXT = st.one_of(
    st.tuples(
        _NUMBER, st.sampled_from(["B", "KiB", "MiB", "GiB", "TiB", "KB", "GB", "TB", ""])
    ).map("".join),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats().map(repr),
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_SIZE_TEXT)
def test_any_size_text_validates_within_bounds_or_is_a_finding(tmp_path: Path, text: str) -> None:
    host = f'{{name: kvm-01, uri: "test:///one", reserve: {{memory: {text}, cpus: {text}}}}}'
    folder = write_folder(tmp_path, {"cluster.yaml": cluster_yaml(host)})
    report, desired = validate_folder(folder)
    if desired is not None:
        reserve = desired.cluster.spec.hosts[0].reserve
        assert reserve.memory is not None
        assert 0 <= reserve.memory <= 1024**5
        assert reserve.cpus is not None
        assert 0 <= reserve.cpus <= 4096
    else:
        assert all(f.severity is Severity.ERROR for f in report.findings)
        assert all(f.line is not None and f.hint for f in report.findings)
