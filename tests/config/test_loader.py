"""load_desired and validate_paths: what other commands and ``validate`` call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.config import Finding, Severity, load_desired, validate_paths
from reconciler.config.folders import cluster_folders
from reconciler.errors import ConfigError, ValidationFailed
from tests.config.clusters import cluster_yaml, placement_yaml, policy_yaml, write_folder

REPO = Path(__file__).resolve().parents[2]


def test_load_desired_of_the_example() -> None:
    desired = load_desired(REPO / "cluster-state")
    assert desired.cluster.metadata.name == "lab"
    assert [h.name for h in desired.cluster.spec.hosts] == ["kvm-01", "kvm-02", "kvm-03"]
    assert len(desired.rules.spec.rules) == 8
    assert desired.placement.spec.vms["erp"] == "kvm-03"
    assert desired.policy.spec.windows is not None


def test_absent_kinds_take_their_defaults(tmp_path: Path) -> None:
    desired = load_desired(write_folder(tmp_path, {"cluster.yaml": cluster_yaml()}))
    assert desired.policy.spec.batch == 4
    assert desired.rules.spec.rules == []
    assert desired.placement.spec.vms == {}


def test_load_desired_raises_with_every_finding(tmp_path: Path) -> None:
    folder = write_folder(
        tmp_path, {"cluster.yaml": cluster_yaml(), "policy.yaml": policy_yaml("batch: 0")}
    )
    with pytest.raises(ValidationFailed) as info:
        load_desired(folder)
    findings = info.value.findings
    assert isinstance(findings, list)
    assert all(isinstance(f, Finding) for f in findings)
    assert [(f.line, f.path) for f in findings] == [(5, "spec.batch")]
    assert info.value.message == (
        f"{folder}/ is not valid (1 error):\n"
        f"{folder}/policy.yaml:5:10: error: spec.batch: 0 is too small (use at least 1)"
    )


def test_warnings_do_not_stop_load_desired(tmp_path: Path) -> None:
    cluster = cluster_yaml('{name: kvm-01, uri: "test:///one", maintenance: true}')
    folder = write_folder(
        tmp_path, {"cluster.yaml": cluster, "placement.yaml": placement_yaml("a: kvm-01")}
    )
    assert load_desired(folder).placement.spec.vms == {"a": "kvm-01"}
    (report,) = validate_paths([folder])
    assert [f.severity for f in report.findings] == [Severity.WARNING]
    assert report.valid


def test_load_desired_of_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a folder"):
        load_desired(tmp_path / "nope")


def test_cluster_folders_skip_hidden_and_include_clusters_below_clusters(tmp_path: Path) -> None:
    write_folder(tmp_path, {"cluster.yaml": "x"}, name="a")
    write_folder(tmp_path / "a", {"cluster.yaml": "x"}, name="nested")
    write_folder(tmp_path, {"cluster.yaml": "x"}, name=".git")
    write_folder(tmp_path, {"notes.txt": "x"}, name="docs")
    assert cluster_folders(tmp_path) == [tmp_path / "a", tmp_path / "a" / "nested"]


def test_a_cluster_folder_with_cluster_subfolders_validates_all_of_them(tmp_path: Path) -> None:
    top = write_folder(tmp_path, {"cluster.yaml": cluster_yaml()}, name="prod")
    bad = cluster_yaml().replace("name: lab", "name: eu").replace('"test:///two"', '"test:///one"')
    write_folder(top, {"cluster.yaml": bad}, name="eu")
    reports = validate_paths([top])
    assert [(r.folder, r.name, r.valid) for r in reports] == [
        (f"{top}/", "lab", True),
        (f"{top}/eu/", "eu", False),
    ]


def test_the_yaml_extension_is_read_in_any_case(tmp_path: Path) -> None:
    rules = (
        "apiVersion: placement/v1alpha1\nkind: PlacementRules\nmetadata: {name: r}\n"
        "spec: {rules: [{name: p, type: pin, vms: {names: [a]}, hosts: {names: [kvm-09]}}]}\n"
    )
    folder = write_folder(tmp_path, {"Cluster.YML": cluster_yaml(), "Rules.YAML": rules})
    (report,) = validate_paths([folder])
    assert report.rules == 1
    assert [f.file for f in report.findings] == [str(folder / "Rules.YAML")]
    assert "host 'kvm-09' does not exist" in report.findings[0].message


def test_one_file_says_it_checked_one_file(tmp_path: Path) -> None:
    folder = write_folder(
        tmp_path, {"cluster.yaml": cluster_yaml(), "policy.yaml": policy_yaml("batch: 2")}
    )
    (report,) = validate_paths([folder / "policy.yaml"])
    assert (
        report.summary()
        == f"{folder}/policy.yaml: 1 file checked in cluster lab (3 hosts, 0 rules): valid"
    )


def test_only_yaml_files_are_read(tmp_path: Path) -> None:
    folder = write_folder(
        tmp_path,
        {"cluster.yml": cluster_yaml(), "README.md": "- not yaml", "x.json": "{"},
    )
    (report,) = validate_paths([folder])
    assert report.findings == []
    assert report.name == "lab"


def test_an_unreadable_folder_is_a_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_folder(tmp_path, {"cluster.yaml": cluster_yaml()})

    def refuse(self: Path) -> Iterator[Path]:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "iterdir", refuse)
    (report,) = validate_paths([folder])
    assert [f.message for f in report.findings] == ["cannot list the folder: Permission denied"]
