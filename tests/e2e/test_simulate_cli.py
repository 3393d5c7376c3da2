"""``reconciler simulate`` from the command line: a PlanetLab-format folder (file names with
spaces) and a CSV trace, a what-if shape from a kinds file, policies side by side, every
format and the chart, and bad input named where it is."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from reconciler.cli.common import EXIT_ERROR, EXIT_OK
from tests.e2e.test_plan_cli import reconciler
from tests.gitrepos import ROOT

KINDS = """\
apiVersion: placement/v1alpha1
kind: HostKinds
kinds:
  - name: box
    cpus: 8
    memory: 32GiB
    power: {idle: 100, peak: 200}
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "cluster-state"
    shutil.copytree(ROOT / "cluster-state", out)
    return out


def planetlab(where: Path, vms: int = 12, steps: int = 36) -> Path:
    """A day folder as published: one file per VM, one percentage per line; the first VMs
    busy, the others idle, and names with spaces."""
    day = where / "day"
    day.mkdir(parents=True)
    for i in range(vms):
        busy = 90 if i < vms // 3 else 5
        (day / f"planet lab node {i:02d}").write_text("".join(f"{busy}\n" for _ in range(steps)))
    return day


def test_a_planetlab_day_on_a_what_if_cluster_in_every_format(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    kinds = tmp_path / "kinds.yaml"
    kinds.write_text(KINDS)
    chart = tmp_path / "chart.svg"
    eager = tmp_path / "eager.yaml"
    eager.write_text((folder / "policy.yaml").read_text().replace("threshold: 20", "threshold: 2"))
    args: list[str | Path] = [
        "simulate",
        folder,
        "--trace",
        planetlab(tmp_path),
        "--hosts",
        "3xbox",
        "--kinds",
        kinds,
        "--policy",
        eager,
    ]
    done = reconciler(capsys, *args, "--format", "json", "--chart", chart)
    assert done.code == EXIT_OK, done.err
    report = json.loads(done.out)
    schema = json.loads((ROOT / "schemas" / "simulation.json").read_text())
    jsonschema.validate(report, schema)
    assert [p["policy"] for p in report["policies"]] == ["current", "eager"]
    assert report["vms"] == 12
    assert report["hosts"] == 3
    assert all(p["rounds"] >= 1 for p in report["policies"])
    assert all(p["energyKwh"] > 0 for p in report["policies"])
    svg = ET.parse(chart).getroot()
    assert svg.tag.endswith("svg")
    assert len(svg.findall("{http://www.w3.org/2000/svg}polyline")) == 6  # 3 panels x 2
    text = reconciler(capsys, *args)
    assert text.code == EXIT_OK
    assert "SLATAH" in text.out
    assert "eager" in text.out
    markdown = reconciler(capsys, *args, "--format", "markdown", "--chart", chart)
    assert "| SLAV |" in markdown.out
    assert "](chart.svg)" in markdown.out


def test_a_csv_trace_replays_on_the_cluster_a_snapshot_saw(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    from tests.e2e.test_plan_cli import write_scenario

    scenario, snapshot = write_scenario("batch_deferral", tmp_path / "scenario")
    data = json.loads(snapshot.read_text())
    rows = ["time,vm,cpu"]
    for k in range(12):
        for vm in data["vms"]:
            rows.append(f"{1_700_000_000 + 300 * k},{vm['name']},{vm.get('cpuUsed') or 0.5}")
    csv = tmp_path / "load.csv"
    csv.write_text("\n".join(rows) + "\n")
    done = reconciler(
        capsys, "simulate", scenario, "--trace", csv, "--snapshot", snapshot, "--format", "json"
    )
    assert done.code == EXIT_OK, done.err
    report = json.loads(done.out)
    assert report["vms"] == len(data["vms"])
    assert report["hosts"] == len(data["hosts"])


@pytest.mark.parametrize(
    ("line", "said"),
    [("ninety\n", "is not a CPU percentage"), ("140\n", "is not a CPU percentage")],
)
def test_a_bad_trace_line_is_named_with_its_file_and_line(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path, line: str, said: str
) -> None:
    day = planetlab(tmp_path, vms=2, steps=3)
    bad = day / "planet lab node 01"
    bad.write_text("10\n" + line)
    done = reconciler(capsys, "simulate", folder, "--trace", day, "--hosts", "2xG5")
    assert done.code == EXIT_ERROR
    assert f"{bad}:2: " in done.err
    assert said in done.err


def test_without_a_shape_the_hosts_must_have_been_observed(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    done = reconciler(capsys, "simulate", folder, "--trace", planetlab(tmp_path))
    assert done.code == EXIT_ERROR
    assert "--snapshot FILE" in done.err
    unknown = reconciler(
        capsys, "simulate", folder, "--trace", planetlab(tmp_path / "b"), "--hosts", "3xG9"
    )
    assert unknown.code == EXIT_ERROR
    assert "no host kind 'G9'" in unknown.err


def test_a_bad_host_kind_is_named_on_its_line(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    kinds = tmp_path / "kinds.yaml"
    kinds.write_text(KINDS.replace("cpus: 8", "cpus: many"))
    done = reconciler(
        capsys,
        "simulate",
        folder,
        "--trace",
        planetlab(tmp_path),
        "--hosts",
        "3xbox",
        "--kinds",
        kinds,
    )
    assert done.code == EXIT_ERROR
    assert f"{kinds}:5:11: error: kinds[0].cpus" in done.err


def test_last_hours_of_prometheus_replay_in_pages_on_the_observed_cluster(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that answers as Prometheus's HTTP API does (each VM's series labelled with its
    name and UUID, one VM absent); two hours at five minutes read in pages of ten points."""
    import time

    from tests.e2e.test_plan_cli import write_scenario
    from tests.promhttp import FakePrometheus, matrix

    scenario, snapshot = write_scenario("batch_deferral", tmp_path / "scenario")
    vms = json.loads(snapshot.read_text())["vms"]
    now = time.time()
    points = [now - 7200 + 300 * k for k in range(25)]
    series = [
        ({"domain": vm["name"], "uuid": vm["uuid"]}, [(t, 0.25 * (i % 4)) for t in points])
        for i, vm in enumerate(vms[1:])
    ]
    server = FakePrometheus(lambda query: matrix(*series))
    server.start()
    monkeypatch.setattr("reconciler.adapters.traces.prometheus.PAGE_POINTS", 10)
    try:
        done = reconciler(
            capsys, "simulate", scenario, "--prometheus", server.url, "--since", "2h",
            "--snapshot", snapshot, "--format", "json",
        )  # fmt: skip
    finally:
        server.stop()
    assert done.code == EXIT_OK, done.err
    report = json.loads(done.out)
    assert report["vms"] == len(vms) - 1  # the one Prometheus has nothing of is left out
    assert report["source"] == f"Prometheus at {server.url}"
    assert len(server.queries) == 3  # 24 steps in pages of 10
    assert report["policies"][0]["rounds"] >= 1


def test_prometheus_needs_a_period_and_the_observed_vms(
    capsys: pytest.CaptureFixture[str], folder: Path
) -> None:
    done = reconciler(capsys, "simulate", folder, "--prometheus", "--since", "7d")
    assert done.code == EXIT_ERROR
    assert "--snapshot FILE" in done.err
