"""``reconciler simulate --rollout FILE``: a rollout not merged yet played on the cluster a
snapshot saw, checked with the cluster folder as ``validate`` checks it, and its figures in
every format; the folder's own rollouts played with every policy compared."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from reconciler.cli.common import EXIT_ERROR, EXIT_OK
from reconciler.model.snapshot import Snapshot
from tests.core.builders import NOW, host_state, vm
from tests.e2e.test_plan_cli import reconciler
from tests.gitrepos import ROOT

HOSTS = ["kvm-01", "kvm-02", "kvm-03", "kvm-04"]
VMS = {f"app-{i}": HOSTS[i % 4] for i in range(8)}
ROLLOUT = """\
apiVersion: placement/v1alpha1
kind: Rollout
metadata:
  name: kernel-next
spec:
  hosts: [kvm-02, kvm-01, kvm-03]
  eachHost:
    commands:
      - name: upgrade
        argv: [ssh, "root@{host}", apt-get, -y, dist-upgrade]
        timeout: 1h
        safeToRepeat: true
    reboot: {argv: [ssh, "root@{host}", systemctl, reboot], timeout: 30m, safeToRepeat: false}
"""


def cluster_folder(where: Path) -> tuple[Path, Path, Path]:
    """A cluster of four hosts, its snapshot, and four hours of steady load."""
    folder = where / "cluster-state"
    folder.mkdir()
    hosts = [{"name": h, "uri": f"qemu+ssh://root@{h}/system"} for h in HOSTS]
    docs = {
        "cluster": {"kind": "Cluster", "metadata": {"name": "lab"}, "spec": {"hosts": hosts}},
        "policy": {
            "kind": "BalancePolicy",
            "metadata": {"name": "default"},
            "spec": {"mode": "apply", "interval": "5m", "threshold": 100},
        },
    }
    for name, doc in docs.items():
        (folder / f"{name}.yaml").write_text(
            yaml.safe_dump({"apiVersion": "placement/v1alpha1", **doc}, sort_keys=False)
        )
    snap = Snapshot(
        cluster="lab",
        taken_at=NOW,
        hosts=[host_state(h, cpus=8, memory_gib=32) for h in HOSTS],
        vms=[vm(name, on) for name, on in VMS.items()],
    )
    snapshot = where / "snapshot.json"
    snapshot.write_text(snap.model_dump_json(by_alias=True))
    rows = ["time,vm,cpu"]
    for k in range(48):
        rows += [f"{1_767_571_200 + 300 * k},{name},0.5" for name in VMS]
    trace = where / "load.csv"
    trace.write_text("\n".join(rows) + "\n")
    return folder, snapshot, trace


def test_a_rollout_not_merged_yet_is_played_and_reported(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder, snapshot, trace = cluster_folder(tmp_path)
    rollout = tmp_path / "proposed.yaml"  # not named after the rollout: it is not in the folder
    rollout.write_text(ROLLOUT)
    args: list[str | Path] = ["simulate", folder, "--trace", trace, "--snapshot", snapshot]
    done = reconciler(capsys, *args, "--rollout", rollout, "--format", "json")
    assert done.code == EXIT_OK, done.err
    report = json.loads(done.out)
    jsonschema.validate(report, json.loads((ROOT / "schemas" / "simulation.json").read_text()))
    (figures,) = report["policies"]
    (played,) = figures["rollouts"]
    assert played["rollout"] == "kernel-next"
    assert (played["phase"], played["hosts"], played["rolled"]) == ("Done", 3, 3)
    maintenance = [m for m in figures["moves"] if m["reason"] == "Maintenance"]
    assert played["moves"] == len(maintenance) == figures["migrations"] > 0
    assert {m["source"] for m in maintenance} == {"kvm-01", "kvm-02", "kvm-03"}
    # two steps of 10m (the default) per host, one host after the other
    assert played["seconds"] >= 3 * 2 * 600
    first = [m["source"] for m in maintenance]
    assert sorted(set(first), key=first.index) == ["kvm-02", "kvm-01", "kvm-03"]

    quicker = reconciler(
        capsys, *args, "--rollout", rollout, "--rollout-step", "1m", "--format", "json"
    )
    assert json.loads(quicker.out)["policies"][0]["rollouts"][0]["seconds"] < played["seconds"]
    text = reconciler(capsys, *args, "--rollout", rollout)
    assert text.code == EXIT_OK
    assert "rollout kernel-next: hosts rolled" in text.out
    assert "3 of 3" in text.out
    markdown = reconciler(capsys, *args, "--rollout", rollout, "--format", "markdown")
    assert "| rollout kernel-next: moves |" in markdown.out

    plain = reconciler(capsys, *args, "--format", "json")
    assert plain.code == EXIT_OK
    assert "rollouts" not in plain.out
    assert json.loads(plain.out)["policies"][0]["migrations"] == 0


def test_the_folders_rollouts_are_played_with_every_policy_compared(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder, snapshot, trace = cluster_folder(tmp_path)
    (folder / "rollouts").mkdir()
    (folder / "rollouts" / "kernel-next.yaml").write_text(ROLLOUT)
    other = tmp_path / "eager.yaml"
    other.write_text(
        (folder / "policy.yaml").read_text().replace("threshold: 100", "threshold: 50")
    )
    done = reconciler(
        capsys, "simulate", folder, "--trace", trace, "--snapshot", snapshot, "--policy", other,
        "--format", "json",
    )  # fmt: skip
    assert done.code == EXIT_OK, done.err
    policies = json.loads(done.out)["policies"]
    assert [p["policy"] for p in policies] == ["current", "eager"]
    assert [p["rollouts"][0]["rolled"] for p in policies] == [3, 3]


def test_a_bad_rollout_is_named_in_the_file_given(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder, snapshot, trace = cluster_folder(tmp_path)
    rollout = tmp_path / "proposed.yaml"
    rollout.write_text(ROLLOUT.replace("kvm-03]", "kvm-3]"))
    args: list[str | Path] = ["simulate", folder, "--trace", trace, "--snapshot", snapshot]
    done = reconciler(capsys, *args, "--rollout", rollout)
    assert done.code == EXIT_ERROR
    assert f"{rollout}:" in done.err
    assert "kvm-03" in done.err  # the closest name
    policy = reconciler(capsys, *args, "--rollout", folder / "policy.yaml")
    assert policy.code == EXIT_ERROR
    assert "not one Rollout" in policy.err
    shaped = reconciler(
        capsys, "simulate", folder, "--trace", trace, "--hosts", "4xG5", "--rollout", rollout
    )
    assert shaped.code == EXIT_ERROR
    assert "--snapshot FILE instead of --hosts" in shaped.err
