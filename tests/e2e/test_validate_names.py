"""``reconciler validate`` across cluster folders: one cluster name per folder, and the files of
``rollouts/`` it does not read."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.cli import main
from tests.config.clusters import cluster_yaml, write_folder

SHARED = (
    "{folder}/cluster.yaml:3:18: error: metadata.name: cluster name 'lab' is also the name of "
    "the cluster in {other}/ ({other}/cluster.yaml:3): two cluster folders with one "
    "metadata.name would share one lease, one state folder and one observed branch, and only "
    "one of them would be reconciled (give each cluster folder a metadata.name of its own)"
)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_two_cluster_folders_with_one_name_are_both_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for folder in ("east", "west"):
        write_folder(tmp_path / "clusters", {"cluster.yaml": cluster_yaml()}, name=folder)
    north = cluster_yaml().replace("name: lab", "name: north")
    write_folder(tmp_path / "clusters", {"cluster.yaml": north}, name="north")
    code, out, err = _run(capsys, "validate", "clusters")
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        SHARED.format(folder="clusters/east", other="clusters/west"),
        SHARED.format(folder="clusters/west", other="clusters/east"),
        "clusters/east/: cluster lab: 3 hosts, 0 rules: 1 error",
        "clusters/north/: cluster north: 3 hosts, 0 rules: valid",
        "clusters/west/: cluster lab: 3 hosts, 0 rules: 1 error",
    ]
    # the same when the folders are given one by one; one alone, or one twice, is valid
    code, out, _ = _run(capsys, "validate", "clusters/west", "clusters/east")
    assert code == 1
    assert SHARED.format(folder="clusters/east", other="clusters/west") in out.splitlines()
    assert _run(capsys, "validate", "clusters/east")[0] == 0
    assert _run(capsys, "validate", "clusters/east", "clusters/east/")[0] == 0


def test_a_hidden_file_in_rollouts_is_not_read_and_said_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_folder(tmp_path, {"cluster.yaml": cluster_yaml()}, name="lab")
    (folder / "rollouts").mkdir()
    (folder / "rollouts" / ".kernel.yaml").write_text("kind: Rollout\n")
    (folder / "rollouts" / ".notes.txt").write_text("not YAML: not a rollout\n")
    code, out, err = _run(capsys, "validate", "lab")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "lab/rollouts/.kernel.yaml: warning: a hidden file is not read: no rollout is carried "
        "out from it (to carry it out, name it kernel.yaml; otherwise move it out of rollouts/)",
        "lab/: cluster lab: 3 hosts, 0 rules: valid, 1 warning",
    ]
