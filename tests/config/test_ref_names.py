"""Cluster and host names end up in git ref names (``reconciler/observed/<cluster>``,
``refs/reconciler/lease/<cluster>``, ``reconciler/maintenance/<cluster>/<host>``): validation
refuses the names git refuses, on their line, with the rule; git itself is the judge."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.model.base import NAME_PATTERN, REF_NAME_PATTERN, ref_component_problem
from reconciler.model.base import ref_component_suggestion as suggestion
from tests.config.clusters import HEAD, findings_text


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _cluster(name: str, host: str = "kvm-01") -> str:
    return (
        f"{HEAD}kind: Cluster\nmetadata:\n  name: {name!r}\nspec:\n  hosts:\n"
        f"    - {{name: {host!r}, uri: 'test:///default'}}\n"
    )


def git_accepts(component: str) -> bool:
    """Whether git takes ``component`` as one part of a ref name."""
    done = subprocess.run(
        ["git", "check-ref-format", f"refs/reconciler/lease/{component}"],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


@pytest.mark.parametrize(
    ("name", "rule", "fixed"),
    [
        ("lab.lock", "ends with '.lock'", "lab-lock"),
        ("a..b", "holds '..'", "a.b"),
        ("lab:x", "holds ':'", "lab-x"),
        ("lab.", "ends with '.'", "lab"),
    ],
)
def test_a_cluster_name_git_refuses_is_an_error_on_its_line(
    tmp_path: Path, name: str, rule: str, fixed: str
) -> None:
    assert not git_accepts(name)
    assert git_accepts(fixed)
    assert findings_text(tmp_path, {"cluster.yaml": _cluster(name)}) == [
        f"lab/cluster.yaml:4:9: error: metadata.name: cluster name {name!r} cannot be part of "
        f"a git ref name: git check-ref-format refuses a name that {rule} "
        f"(rename it, e.g. {fixed!r})"
    ]


def test_a_host_name_git_refuses_is_an_error_on_its_line(tmp_path: Path) -> None:
    assert findings_text(tmp_path, {"cluster.yaml": _cluster("lab", "kvm:01")}) == [
        "lab/cluster.yaml:7:14: error: spec.hosts[0].name: host name 'kvm:01' cannot be part "
        "of a git ref name: git check-ref-format refuses a name that holds ':' "
        "(rename it, e.g. 'kvm-01')"
    ]


def test_names_git_accepts_stay_valid(tmp_path: Path) -> None:
    for name in ("lab", "prod_eu-1.a", "x.lockers", "v1.2+3", "_"):
        assert git_accepts(name)
        assert findings_text(tmp_path, {"cluster.yaml": _cluster(name, name)}) == []


# Names of the document pattern, biased towards what git refuses: dots, colons, ".lock".
names = st.builds(
    str.__add__,
    st.from_regex(r"[A-Za-z0-9_][a.:_+-]{0,6}", fullmatch=True),
    st.sampled_from(["", ".", ".lock", "..", ":", ".lo", "x"]),
).filter(lambda n: re.fullmatch(NAME_PATTERN, n) is not None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(names)
def test_the_rule_is_gits_own(name: str) -> None:
    accepted = ref_component_problem(name) is None
    assert accepted == git_accepts(name)
    assert accepted == (re.fullmatch(REF_NAME_PATTERN, name) is not None)  # the JSON Schema's
    if not accepted:
        assert git_accepts(suggestion(name))
