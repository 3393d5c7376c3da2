"""Draws the dashboard's panels from Prometheus range-query results, for the docs' picture.

Not Grafana: a matplotlib sketch of the same layout (gridPos), titles, legends and units, so
the picture shows the real data of a run. tests/deploy/test_dashboard.py calls ``draw`` when
``RECONCILER_DASHBOARD_PNG`` is set; it needs ``pip install matplotlib``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.dates as mdates
import matplotlib.pyplot as plt

BACKGROUND = "#181b1f"
PANEL = "#22252b"
TEXT = "#ccccdc"
COLOURS = ["#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9", "#8ab8ff"]
ROW_INCHES = 0.5
CLOCK = mdates.DateFormatter("%H:%M:%S")  # type: ignore[no-untyped-call]
WIDTH_INCHES = 18.0

Series = tuple[str, list[datetime], list[float]]


def _legend(template: str, labels: dict[str, str]) -> str:
    def label(match: re.Match[str]) -> str:
        return labels.get(match.group(1), "")

    return re.sub(r"\{\{\s*(\w+)\s*\}\}", label, template) or "value"


def _series(panel: dict[str, Any], results: list[dict[str, Any]]) -> list[Series]:
    out: list[Series] = []
    for target, found in zip(panel["targets"], results, strict=True):
        for item in found["result"]:
            times = [datetime.fromtimestamp(float(t), UTC) for t, _ in item["values"]]
            values = [float(v) for _, v in item["values"]]
            out.append((_legend(target["legendFormat"], item["metric"]), times, values))
    return out


def _mapping(panel: dict[str, Any]) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for mapping in panel["fieldConfig"]["defaults"]["mappings"]:
        found.update(mapping["options"])
    return found


def _stat(ax: Any, panel: dict[str, Any], series: list[Series]) -> None:
    names = _mapping(panel)
    parts = []
    for name, _, values in series:
        last = values[-1] if values else float("nan")
        shown = names.get(f"{last:g}", {}).get("text", f"{last:.4g}")
        parts.append(shown if len(series) == 1 else f"{name}: {shown}")
    ax.text(0.5, 0.4, "\n".join(parts), ha="center", va="center", fontsize=20, color="#73bf69")
    ax.set_axis_off()


def _timeseries(ax: Any, panel: dict[str, Any], series: list[Series]) -> None:
    bars = panel["fieldConfig"]["defaults"]["custom"].get("drawStyle") == "bars"
    for index, (name, times, values) in enumerate(series):
        dashed = "threshold" in name or "holdRounds" in name
        colour = "#f2495c" if dashed else COLOURS[index % len(COLOURS)]
        if bars:
            ax.plot(times, values, color=colour, label=name, drawstyle="steps-mid")
        else:
            ax.plot(times, values, color=colour, label=name, linestyle="--" if dashed else "-")
    unit = panel["fieldConfig"]["defaults"]["unit"]
    ax.set_ylabel({"percent": "%", "s": "seconds"}.get(unit, ""), color=TEXT)
    ax.xaxis.set_major_formatter(CLOCK)
    if series:
        ax.legend(fontsize=7, loc="upper left", facecolor=PANEL, labelcolor=TEXT, framealpha=0.6)


def _timeline(ax: Any, panel: dict[str, Any], series: list[Series]) -> None:
    names = _mapping(panel)
    for row, (_, times, values) in enumerate(series):
        for start, end, value in zip(times, times[1:], values, strict=False):
            colour = names.get(f"{value:g}", {}).get("color", "grey")
            ax.barh(row, end - start, left=start, color=colour, height=0.8)
    ax.set_yticks(range(len(series)), [s[0] for s in series], color=TEXT, fontsize=8)
    ax.xaxis.set_major_formatter(CLOCK)


def _bars(ax: Any, panel: dict[str, Any], series: list[Series]) -> None:
    labels = [s[0] for s in series]
    values = [s[2][-1] if s[2] else 0.0 for s in series]
    ax.barh(labels, values, color=COLOURS[0])
    ax.set_xlabel(panel["fieldConfig"]["defaults"]["unit"], color=TEXT)


DRAW = {"stat": _stat, "timeseries": _timeseries, "state-timeline": _timeline, "bargauge": _bars}


def draw(dashboard: dict[str, Any], data: dict[str, list[dict[str, Any]]], out: Path) -> None:
    """``data``: per panel title, one range-query answer per target, in the targets' order."""
    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    figure = plt.figure(figsize=(WIDTH_INCHES, rows * ROW_INCHES + 0.6), facecolor=BACKGROUND)
    grid = figure.add_gridspec(rows, 24, hspace=9, wspace=2.5)
    for panel in panels:
        pos = panel["gridPos"]
        y, x, h, w = pos["y"], pos["x"], pos["h"], pos["w"]
        ax = figure.add_subplot(grid[y : y + h, x : x + w], facecolor=PANEL)
        ax.set_title(panel["title"], color=TEXT, fontsize=10, loc="left")
        ax.tick_params(colors=TEXT, labelsize=7)
        for side in ax.spines.values():
            side.set_color("#444")
        DRAW[panel["type"]](ax, panel, _series(panel, data[panel["title"]]))
    figure.text(
        0.01,
        0.995,
        f"{dashboard['title']}: cluster lab (libvirt test driver), {len(panels)} panels",
        color=TEXT,
        fontsize=12,
        va="bottom",
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=80, facecolor=BACKGROUND, bbox_inches="tight")
    plt.close(figure)
