"""The Grafana dashboard against a real Prometheus scraping a real ``reconciler run``.

Every panel's query (template variables substituted as Grafana would) is evaluated through
Prometheus's HTTP API and must parse and return finite numbers; the rule file loads on the
same server. With ``RECONCILER_DASHBOARD_PNG=docs/img/dashboard.png`` (and matplotlib
installed) the run's data is also drawn into that picture for the docs.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reconciler.cli import main
from tests.deploy import live
from tests.deploy.promtools import DASHBOARD, DEPLOY, RULES, binary
from tests.waiting import wait_for

pytestmark = pytest.mark.libvirt

CLUSTER = "lab"
RATE_INTERVAL = "15s"
"""What $__rate_interval stands for here: several scrapes (1 s) and rounds (every 2 s)."""
PICTURE = os.environ.get("RECONCILER_DASHBOARD_PNG")
PICTURE_SECONDS = float(os.environ.get("RECONCILER_DASHBOARD_SECONDS", "120"))
"""How long the run goes on before its data is drawn: long enough to show a few lines."""


@dataclass
class Live:
    api: live.PromApi
    run: live.Process
    prometheus: live.Process
    started: float


def _substitute(expr: str) -> str:
    text = expr.replace("$cluster", CLUSTER).replace("$__rate_interval", RATE_INTERVAL)
    assert "$" not in text, f"a template variable left in {text}"
    return text


def _panels() -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = json.loads(DASHBOARD.read_text())["panels"]
    return panels


def _queries() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in _panels() for t in p["targets"]]


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    pytest.importorskip("libvirt")
    prometheus_bin = binary("prometheus")
    directory = tmp_path_factory.mktemp("dashboard")
    folder, lab_prometheus = live.lab_folder(directory / "lab")
    run, run_port = live.start_run(folder, directory)
    prometheus, url = live.start_prometheus(prometheus_bin, run_port, directory)
    api = live.PromApi(url)
    started = time.time()
    try:
        wait_for(lambda: api.ready() or not prometheus.alive(), 30, "Prometheus ready")
        assert prometheus.alive(), prometheus.tail()
        query = f'sum(count_over_time(reconciler_reconciles_total{{cluster="{CLUSTER}"}}[1m]))'

        def scraped_enough() -> bool:
            assert run.alive(), run.tail()
            result = api.query(query)
            return bool(result) and float(result[0]["value"][1]) >= 2 * 8  # 8 scrapes, 2 series

        wait_for(scraped_enough, 60, "8 scrapes of reconciler run")
        # and a round that read every host's window (half of it covered in the lab's Prometheus)
        window = f'reconciler_host_cpu_percent{{cluster="{CLUSTER}",over="window"}}'
        wait_for(lambda: len(api.query(window)) == 3, 90, f"windows from {lab_prometheus}")
        yield Live(api, run, prometheus, started)
    finally:
        run.stop()
        prometheus.stop()
        main(["lab", "down", "--dir", str(directory / "lab")])


def test_the_dashboard_file_is_what_build_py_writes() -> None:
    done = subprocess.run(
        [sys.executable, str(DEPLOY / "grafana" / "build.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_every_panel_query_parses_and_returns_numbers(scraped: Live) -> None:
    queries = _queries()
    assert len(queries) >= 15
    empty = []
    for title, expr in queries:
        result = scraped.api.query(_substitute(expr))
        if not result:
            empty.append(f"{title}: {expr}")
            continue
        for sample in result:
            value = float(sample["value"][1])
            assert math.isfinite(value), f"{title}: {expr} gives {value} for {sample['metric']}"
    assert not empty, "queries without data:\n" + "\n".join(empty)


def test_the_run_shows_in_the_panels(scraped: Live) -> None:
    """Not only some data: the figures the lab must produce (3 hosts, failing moves)."""

    def one(expr: str) -> dict[str, float]:
        result = scraped.api.query(_substitute(expr))
        return {json.dumps(s["metric"], sort_keys=True): float(s["value"][1]) for s in result}

    by_title = {p["title"]: p["targets"] for p in _panels()}
    reachable, hosts = (t["expr"] for t in by_title["Hosts reachable"])
    assert list(one(reachable).values()) == [3.0]
    assert list(one(hosts).values()) == [3.0]
    scores = one(by_title["Host scores"][0]["expr"])
    assert len(scores) == 3
    assert all(0 <= v <= 100 for v in scores.values())
    spread_targets = by_title["Spread per architecture and its threshold"]
    spread, threshold = (one(t["expr"]) for t in spread_targets)
    assert max(spread.values()) > max(threshold.values())  # the lab starts unbalanced
    window, now = (one(t["expr"]) for t in by_title["Host CPU over the load window and now"])
    assert len(window) == len(now) == 3
    assert all(v > 0 for v in [*window.values(), *now.values()])
    unknown = one(by_title["Load unknown over the window"][0]["expr"])
    assert sorted(json.loads(k)["kind"] for k in unknown) == ["host", "vm"]
    leader = one(by_title["Active instance"][0]["expr"])
    assert list(leader.values()) == [1.0]
    failed = one(by_title["Migrations failed, last hour"][0]["expr"])
    assert next(iter(failed.values())) > 0  # the test driver cannot migrate


def test_the_cluster_variable_lists_the_cluster(scraped: Live) -> None:
    variables = json.loads(DASHBOARD.read_text())["templating"]["list"]
    (cluster,) = (v for v in variables if v["name"] == "cluster")
    match = re.fullmatch(r"label_values\((\w+), (\w+)\)", cluster["query"]["query"])
    assert match is not None, cluster["query"]
    metric, label = match.groups()
    values = scraped.api.get(f"/api/v1/label/{label}/values", **{"match[]": metric})
    assert values == [CLUSTER]


def test_the_alert_rules_load_and_evaluate_on_the_server(scraped: Live) -> None:
    data = scraped.api.get("/api/v1/rules")
    rules = [r for group in data["groups"] for r in group["rules"]]
    written = re.findall(r"^\s+- alert: (\w+)$", RULES.read_text(), re.MULTILINE)
    assert sorted(r["name"] for r in rules) == sorted(written)
    deadline = time.monotonic() + 10
    while any(r.get("lastEvaluation", "").startswith("0001") for r in rules):
        assert time.monotonic() < deadline, "rules never evaluated"
        time.sleep(0.5)
        rules = [r for g in scraped.api.get("/api/v1/rules")["groups"] for r in g["rules"]]
    bad = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
    assert not bad, bad


@pytest.mark.skipif(not PICTURE, reason="set RECONCILER_DASHBOARD_PNG to draw the docs' picture")
def test_draw_the_dashboard_from_the_run(scraped: Live) -> None:
    pytest.importorskip("matplotlib", reason="pip install matplotlib to draw the picture")
    spec = importlib.util.spec_from_file_location("render", DEPLOY / "grafana" / "render.py")
    assert spec is not None
    assert spec.loader is not None
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    left = PICTURE_SECONDS - (time.time() - scraped.started)
    if left > 0:
        time.sleep(left)
    end = time.time()
    data: dict[str, list[dict[str, Any]]] = {}
    for title, expr in _queries():
        found = scraped.api.query_range(_substitute(expr), scraped.started, end, 2)
        data.setdefault(title, []).append({"expr": expr, "result": found["result"]})
    out = Path(str(PICTURE))
    render.draw(json.loads(DASHBOARD.read_text()), data, out)
    assert out.stat().st_size > 10_000
