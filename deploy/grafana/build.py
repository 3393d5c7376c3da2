"""Writes deploy/grafana/reconciler.json, the Grafana dashboard of ``reconciler run``.

    python deploy/grafana/build.py           # rewrite reconciler.json
    python deploy/grafana/build.py --check   # exit 1 when reconciler.json is not up to date

Plain JSON in Grafana's dashboard model (schemaVersion 39), no library: every panel is one
function call below. Queries read only the metrics of ``reconciler/engine/metrics.py``;
tests/deploy/test_dashboard.py evaluates each of them on a real Prometheus.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("reconciler.json")
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
C = 'cluster="$cluster"'
ACTIVE = "and on (instance, cluster) reconciler_leader == 1"
"""Figures a process observed: only the active instance's count (a standby's are stale)."""

Panel = dict[str, Any]


def target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref}


def panel(
    kind: str,
    title: str,
    grid: tuple[int, int, int, int],
    targets: list[tuple[str, str]],
    *,
    unit: str = "short",
    description: str = "",
    custom: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
    overrides: list[dict[str, Any]] | None = None,
    mappings: list[dict[str, Any]] | None = None,
) -> Panel:
    x, y, w, h = grid
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": [target(e, legend, chr(ord("A") + i)) for i, (e, legend) in enumerate(targets)],
        "fieldConfig": {
            "defaults": {"unit": unit, "custom": custom or {}, "mappings": mappings or []},
            "overrides": overrides or [],
        },
        "options": options or {},
    }


UP_DOWN = [
    {
        "type": "value",
        "options": {
            "0": {"text": "unreachable", "color": "red"},
            "1": {"text": "reachable", "color": "green"},
        },
    }
]
ROLE = [
    {
        "type": "value",
        "options": {
            "0": {"text": "standby", "color": "blue"},
            "1": {"text": "active", "color": "green"},
        },
    }
]
DASHED = {"matcher": {"id": "byRegexp", "options": ".*threshold|.*holdRounds"}}


def panels() -> list[Panel]:
    rate = "$__rate_interval"
    return [
        panel(
            "stat",
            "Active instance",
            (0, 0, 6, 4),
            [(f"reconciler_leader{{{C}}}", "{{instance}}")],
            description="1 on the instance that holds the cluster's lease, 0 on standbys.",
            mappings=ROLE,
            options={"colorMode": "background", "textMode": "value_and_name"},
        ),
        panel(
            "stat",
            "Hosts reachable",
            (6, 0, 6, 4),
            [
                (f"sum(reconciler_host_reachable{{{C}}} {ACTIVE})", "reachable"),
                (f"count(reconciler_host_reachable{{{C}}} {ACTIVE})", "hosts"),
            ],
            options={"textMode": "value_and_name"},
        ),
        panel(
            "stat",
            "Rounds failed, last hour",
            (12, 0, 6, 4),
            [(f'sum(increase(reconciler_reconciles_total{{{C},result="error"}}[1h]))', "")],
            options={"colorMode": "value", "graphMode": "none"},
        ),
        panel(
            "stat",
            "Migrations failed, last hour",
            (18, 0, 6, 4),
            [(f'sum(increase(reconciler_migrations_total{{{C},outcome="failed"}}[1h]))', "")],
            options={"colorMode": "value", "graphMode": "none"},
        ),
        panel(
            "timeseries",
            "Spread per architecture and its threshold",
            (0, 4, 12, 8),
            [
                (f"max by (arch) (reconciler_spread{{{C}}} {ACTIVE})", "{{arch}} spread"),
                (
                    f"max by (arch) (reconciler_spread_threshold{{{C}}} {ACTIVE})",
                    "{{arch}} threshold",
                ),
            ],
            unit="percent",
            description="Max - min host score within one CPU architecture; the planner "
            "balances once it has been over the threshold for holdRounds rounds.",
            overrides=[
                {
                    **DASHED,
                    "properties": [
                        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                        {"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}},
                    ],
                }
            ],
        ),
        panel(
            "timeseries",
            "Host scores",
            (12, 4, 12, 8),
            [(f"max by (host) (reconciler_host_score{{{C}}} {ACTIVE})", "{{host}}")],
            unit="percent",
            description="Load score of each reachable host (cpu and memory, weighted by the "
            "policy).",
        ),
        panel(
            "timeseries",
            "Migrations by outcome",
            (0, 12, 12, 8),
            [
                (
                    f"sum by (outcome) (increase(reconciler_migrations_total{{{C}}}[{rate}]))",
                    "{{outcome}}",
                )
            ],
            custom={"drawStyle": "bars", "stacking": {"mode": "normal"}, "fillOpacity": 80},
        ),
        panel(
            "timeseries",
            "Round duration quantiles",
            (12, 12, 12, 8),
            [
                (
                    f"histogram_quantile({q}, sum by (le) "
                    f"(rate(reconciler_reconcile_duration_seconds_bucket{{{C}}}[{rate}])))",
                    f"p{round(q * 100)}",
                )
                for q in (0.5, 0.9, 0.99)
            ],
            unit="s",
            description="Wall time of a round: observe, plan and the migrations it ran.",
        ),
        panel(
            "timeseries",
            "Rounds by result",
            (0, 20, 12, 8),
            [
                (
                    f"sum by (result) (increase(reconciler_reconciles_total{{{C}}}[{rate}]))",
                    "{{result}}",
                )
            ],
            custom={"drawStyle": "bars", "stacking": {"mode": "normal"}, "fillOpacity": 80},
        ),
        panel(
            "timeseries",
            "Rounds over threshold and holdRounds",
            (12, 20, 12, 8),
            [
                (f"max by (arch) (reconciler_spread_rounds_over{{{C}}} {ACTIVE})", "{{arch}}"),
                (
                    f"max by (arch) (reconciler_spread_hold_rounds{{{C}}} {ACTIVE})",
                    "{{arch}} holdRounds",
                ),
            ],
            overrides=[
                {
                    **DASHED,
                    "properties": [
                        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}
                    ],
                }
            ],
        ),
        panel(
            "state-timeline",
            "Leader",
            (0, 28, 12, 6),
            [(f"reconciler_leader{{{C}}}", "{{instance}}")],
            mappings=ROLE,
        ),
        panel(
            "state-timeline",
            "Host reachability",
            (12, 28, 12, 6),
            [(f"max by (host) (reconciler_host_reachable{{{C}}} {ACTIVE})", "{{host}}")],
            mappings=UP_DOWN,
        ),
        panel(
            "bargauge",
            "Since a host was last observed",
            (0, 34, 24, 6),
            [
                (
                    "time() - max by (host) "
                    f"(reconciler_host_last_observed_timestamp_seconds{{{C}}} {ACTIVE})",
                    "{{host}}",
                )
            ],
            unit="s",
            options={"orientation": "horizontal", "displayMode": "basic"},
        ),
        panel(
            "timeseries",
            "Host CPU over the load window and now",
            (0, 40, 16, 8),
            [
                (
                    f'max by (host) (reconciler_host_cpu_percent{{{C},over="window"}} {ACTIVE})',
                    "{{host}} window",
                ),
                (
                    f'max by (host) (reconciler_host_cpu_percent{{{C},over="sample"}} {ACTIVE})',
                    "{{host}} now",
                ),
            ],
            unit="percent",
            description="basis used: each host's CPU over the policy's load window (what "
            "balance decides on; absent while the window is unknown) beside the observation's "
            "own short sample (dashed).",
            overrides=[
                {
                    "matcher": {"id": "byRegexp", "options": ".* now"},
                    "properties": [
                        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [4, 4]}}
                    ],
                }
            ],
        ),
        panel(
            "timeseries",
            "Hosts in standby",
            (0, 48, 8, 6),
            [(f"max(reconciler_hosts_standby{{{C}}} {ACTIVE})", "standby")],
            description="Hosts power saving has powered off (spec.power, docs/power.md): "
            "they count as capacity that costs a power-on; the status names each with why.",
            custom={"drawStyle": "bars", "fillOpacity": 80},
        ),
        panel(
            "timeseries",
            "Power actions failed",
            (8, 48, 8, 6),
            [
                (
                    "sum by (host, action) "
                    f"(increase(reconciler_power_failures_total{{{C}}}[$__rate_interval])) "
                    "or on () vector(0)",
                    "{{host}} {{action}}",
                )
            ],
            description="Boots (on) and power-offs (off) power saving asked for that failed: "
            "the BMC refused or did not answer, a boot longer than bootTimeout, a host that "
            "never said off (0 while none failed). The alerts ReconcilerPowerOnFailed and "
            "ReconcilerPowerOffFailed fire on them.",
            custom={"drawStyle": "bars", "fillOpacity": 80},
        ),
        panel(
            "timeseries",
            "Load unknown over the window",
            (16, 40, 8, 8),
            [(f"max by (kind) (reconciler_load_unknown{{{C}}} {ACTIVE})", "{{kind}}")],
            description="Running VMs and hosts whose load over the window the last plan did "
            "not know (a new VM, a gap in sampling, Prometheus not answering): balance leaves "
            "them alone. The alert ReconcilerLoadUnknown fires after 15 minutes of it.",
            custom={"drawStyle": "bars", "fillOpacity": 80},
        ),
    ]


def dashboard() -> dict[str, Any]:
    items = panels()
    for number, item in enumerate(items, start=1):
        item["id"] = number
    return {
        "uid": "reconciler",
        "title": "reconciler",
        "description": "reconciler run: spread, hosts, migrations, rounds, leader, load",
        "tags": ["reconciler", "libvirt"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "1m",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "cluster",
                    "label": "Cluster",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "definition": "label_values(reconciler_leader, cluster)",
                    "query": {
                        "query": "label_values(reconciler_leader, cluster)",
                        "refId": "cluster",
                    },
                    "refresh": 2,
                    "sort": 1,
                    "current": {},
                    "hide": 0,
                },
            ]
        },
        "annotations": {"list": []},
        "links": [],
        "panels": items,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if argv[1:] == ["--check"]:
        if OUT.read_text() != text:
            print(f"{OUT} is not up to date: run python {__file__}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
