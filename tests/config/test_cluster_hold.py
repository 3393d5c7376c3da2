"""spec.hold of a Cluster: one of a repository and an etcd endpoint, no credential in it, an
etcd URL tooz can use; each refused on its line with what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.clusters import cluster_yaml, findings_text


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def findings(root: Path, hold: str) -> list[str]:
    text = cluster_yaml().replace("spec:\n", f"spec:\n  hold: {hold}\n", 1)
    return findings_text(root, {"cluster.yaml": text})


def test_a_repository_or_an_etcd_endpoint_is_accepted(tmp_path: Path) -> None:
    assert findings(tmp_path, "{repository: https://git.example.com/infra/state.git}") == []
    assert findings(tmp_path, "{repository: 'git@github.com:infra/state.git'}") == []
    assert findings(tmp_path, "{etcd: 'etcd3+https://etcd-1:2379'}") == []


def test_a_credential_in_the_repository_url_is_refused_and_not_repeated(tmp_path: Path) -> None:
    [line] = findings(tmp_path, "{repository: 'https://bob:S3cret@git.example.com/x.git'}")
    assert line.startswith("lab/cluster.yaml:5:22: error: ")
    assert "spec.hold.repository: holds a credential, and cluster.yaml goes into git" in line
    assert "S3cret" not in line


def test_both_or_neither_is_refused(tmp_path: Path) -> None:
    [both] = findings(tmp_path, "{repository: x, etcd: 'etcd3+http://e:2379'}")
    assert "give exactly one of repository (a git lease) and etcd (an etcd lease)" in both
    [neither] = findings(tmp_path, "{}")
    assert "give exactly one of repository" in neither


def test_an_etcd_endpoint_names_its_scheme(tmp_path: Path) -> None:
    [line] = findings(tmp_path, "{etcd: 'http://e:2379'}")
    assert "spec.hold.etcd: 'http://e:2379' is not an etcd endpoint: write etcd3+http://" in line
