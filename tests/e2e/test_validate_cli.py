"""``reconciler validate`` and ``reconciler schema`` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.cli import main
from tests.config.clusters import cluster_yaml, policy_yaml, write_folder

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_example_cluster_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "validate", str(REPO / "cluster-state"))
    assert (code, err) == (0, "")
    assert out == f"{REPO}/cluster-state/: cluster lab: 3 hosts, 8 rules, 1 rollout: valid\n"


def test_default_path_is_cluster_state(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    assert _run(capsys, "validate") == (
        0,
        "cluster-state/: cluster lab: 3 hosts, 8 rules, 1 rollout: valid\n",
        "",
    )


def test_a_missing_path_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(capsys, "validate", "nowhere/") == (
        2,
        "",
        "error: nowhere: no such file or folder\n",
    )


def test_an_unknown_format_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "validate", "--format", "xml")
    assert code == 2
    assert "invalid choice: 'xml'" in err


def test_errors_exit_1_with_findings_and_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_folder(tmp_path, {"cluster.yaml": cluster_yaml(), "policy.yaml": policy_yaml("batch: 0")})
    assert _run(capsys, "validate", "lab") == (
        1,
        "lab/policy.yaml:5:10: error: spec.batch: 0 is too small (use at least 1)\n"
        "lab/: 1 error\n",
        "",
    )


def test_warnings_alone_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = cluster_yaml('{name: kvm-01, uri: "test:///one", maintenance: true}')
    placement = (
        "apiVersion: placement/v1alpha1\nkind: Placement\nmetadata: {name: p}\n"
        "spec: {vms: {web-1: kvm-01}}\n"
    )
    write_folder(tmp_path, {"cluster.yaml": cluster, "placement.yaml": placement})
    code, out, _ = _run(capsys, "validate", "lab")
    assert code == 0
    assert out.splitlines()[-1] == "lab/: cluster lab: 1 host, 0 rules: valid, 1 warning"


def test_json_format_is_an_array_of_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_folder(tmp_path, {"cluster.yaml": cluster_yaml(), "policy.yaml": policy_yaml("batch: 0")})
    code, out, _ = _run(capsys, "validate", "--format", "json", "lab")
    assert code == 1
    assert json.loads(out) == [
        {
            "file": "lab/policy.yaml",
            "line": 5,
            "column": 10,
            "severity": "error",
            "path": "spec.batch",
            "message": "0 is too small",
            "hint": "use at least 1",
        }
    ]


def test_a_folder_of_clusters_validates_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_folder(tmp_path / "clusters", {"cluster.yaml": cluster_yaml()}, name="a")
    bad = cluster_yaml().replace("name: lab", "name: b").replace('"test:///two"', '"test:///one"')
    write_folder(tmp_path / "clusters", {"cluster.yaml": bad}, name="b")
    code, out, _ = _run(capsys, "validate", "clusters")
    assert code == 1
    assert out.splitlines()[-2:] == [
        "clusters/a/: cluster lab: 3 hosts, 0 rules: valid",
        "clusters/b/: cluster b: 3 hosts, 0 rules: 1 error",
    ]


def test_a_single_file_is_checked_in_its_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = (
        "apiVersion: placement/v1alpha1\nkind: PlacementRules\nmetadata: {name: r}\n"
        "spec: {rules: [{name: p, type: pin, vms: {names: [a]}, hosts: {names: [kvm-09]}}]}\n"
    )
    write_folder(tmp_path, {"cluster.yaml": cluster_yaml(), "rules.yaml": rules})
    code, out, _ = _run(capsys, "validate", "lab/rules.yaml")
    assert code == 1
    assert out.splitlines()[-1] == (
        "lab/rules.yaml: 1 file checked in cluster lab (3 hosts, 1 rule): 1 error"
    )
    assert "host 'kvm-09' does not exist" in out


def _sparse(path: Path) -> None:
    with path.open("wb") as handle:
        handle.truncate(50 * 1024 * 1024)


def _outside_link(path: Path) -> None:
    target = path.parent.parent / "outside.yaml"
    target.write_text(cluster_yaml())
    path.symlink_to(target)


BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)

BAD_INPUTS: dict[str, tuple[Callable[[Path], object], str]] = {
    "malformed": (
        lambda p: p.write_text("apiVersion: placement/v1alpha1\nkind: [Cluster\n"),
        "lab/x.yaml:3:1: error: malformed YAML: expected ',' or ']', but got '<stream end>' "
        "(while parsing a flow sequence) (check the indentation, the quotes and the ':' after "
        "each key near here)",
    ),
    "non-mapping": (
        lambda p: p.write_text("- kvm-01\n- kvm-02\n"),
        "lab/x.yaml:1:1: error: a document must be a mapping, found a list (start the document "
        "with apiVersion:, kind:, metadata: and spec:)",
    ),
    "multi-document": (
        lambda p: p.write_text(f"{cluster_yaml()}---\n{policy_yaml('threshold: 120')}"),
        "lab/x.yaml:14:14: error: spec.threshold: 120 is too large (use at most 100)",
    ),
    "binary": (
        lambda p: p.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00"),
        "lab/x.yaml:1:8: error: binary file (it holds NUL bytes) (only YAML text files belong "
        "in a cluster folder)",
    ),
    "not-utf8": (
        lambda p: p.write_bytes(b"kind: Cl\xfcster\n"),
        "lab/x.yaml:1:9: error: not UTF-8 text (byte 0xfc) (save the file as UTF-8)",
    ),
    "50-MB": (
        _sparse,
        "lab/x.yaml:1:1: error: file is 52428800 bytes, over the limit of 16777216 bytes (16 MiB) "
        "(split it into smaller files, or check that it belongs in the folder)",
    ),
    "symlink-out": (
        _outside_link,
        "lab/x.yaml:1:1: error: symlink leads outside the folder, to {tmp}/outside.yaml (copy "
        "the file into the folder instead of linking to it)",
    ),
    "billion-laughs": (
        lambda p: p.write_text(BILLION_LAUGHS),
        "lab/x.yaml:6:1: error: the document expands to more than 100000 values (anchors and "
        "aliases repeated inside each other) (write the values out instead of nesting aliases)",
    ),
    "duplicate-keys": (
        lambda p: p.write_text(cluster_yaml() + "kind: Cluster\n"),
        "lab/x.yaml:9:1: error: duplicate key 'kind' (first on line 2) (keep one of the two; "
        "YAML would silently use the last)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_exits_1_with_a_clear_message(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write, expected = BAD_INPUTS[case]
    folder = write_folder(tmp_path, {})
    write(folder / "x.yaml")
    # this process's CPU time, which other load on the machine does not stretch: a bomb
    # expanded, or a huge file parsed, would take minutes of it; refusing them, a second
    start = time.process_time()
    code, out, err = _run(capsys, "validate", "lab")
    assert time.process_time() - start < 10
    assert code == 1
    assert expected.format(tmp=tmp_path.resolve()) in out.splitlines()
    assert "Traceback" not in out + err


def test_an_empty_folder_has_no_cluster_documents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    assert _run(capsys, "validate", "empty") == (
        1,
        "empty/: error: no cluster documents found (add a cluster.yaml with kind: Cluster; see "
        "docs/cluster-state.md)\nempty/: 1 error\n",
        "",
    )


def test_schema_prints_one_kind(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "schema", "BalancePolicy")
    assert code == 0
    assert json.loads(out)["$id"] == "https://placement-reconciler.dev/schemas/policy.json"


def test_schema_write_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(capsys, "schema", "--check", "--dir", "out")[0] == 1
    code, out, _ = _run(capsys, "schema", "--write", "--dir", "out")
    assert code == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "cluster.json",
        "findings.json",
        "history.json",
        "hostkinds.json",
        "impact.json",
        "movehistory.json",
        "place.json",
        "placement.json",
        "plan.json",
        "policy.json",
        "rollout.json",
        "rolloutplan.json",
        "rolloutprogress.json",
        "rolloutstatus.json",
        "rules.json",
        "simulation.json",
        "snapshot.json",
        "status.json",
    ]
    assert _run(capsys, "schema", "--check", "--dir", "out") == (0, "", "")


def test_schema_without_a_kind_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "schema", "nonsense")
    assert code == 2
    assert err.startswith(
        "error: give a KIND (cluster, policy, rules, placement, rollout, snapshot"
    )


def test_the_console_script(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "reconciler"
    write_folder(tmp_path, {"x.yaml": BILLION_LAUGHS})
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    ok = subprocess.run(
        [str(script), "validate", str(REPO / "cluster-state")],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert (ok.returncode, ok.stderr) == (0, "")
    assert ok.stdout.endswith("cluster lab: 3 hosts, 8 rules, 1 rollout: valid\n")
    bad = subprocess.run(
        [str(script), "validate", "lab"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    assert bad.returncode == 1
    assert "expands to more than 100000 values" in bad.stdout
    assert "Traceback" not in bad.stdout + bad.stderr
