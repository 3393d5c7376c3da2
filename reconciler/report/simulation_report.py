"""``reconciler simulate``: the policies side by side as text, Markdown (for a pull request) or
JSON, and a chart of the rounds as SVG (score spread, hot hosts and migrations over time, one
line per policy)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from html import escape

from reconciler.model.simulation import PolicyFigures, RolloutFigures, SimulationReport

Row = tuple[str, Callable[[PolicyFigures], str]]

ROWS: list[Row] = [
    ("migrations", lambda p: f"{p.migrations:,}"),
    ("migrations per day", lambda p: f"{p.migrations_per_day:,.1f}"),
    ("moved back", lambda p: f"{p.moved_back:,}"),
    ("aborted (would not converge)", lambda p: f"{p.aborted:,}"),
    ("SLATAH (time at 100% CPU)", lambda p: f"{100 * p.slatah:.2f}%"),
    ("PDM (lost to migrations)", lambda p: f"{100 * p.pdm:.3f}%"),
    ("SLAV", lambda p: f"{p.slav:.2e}"),
    ("hours over hostLimit", lambda p: f"{p.hours_over_limit:,.1f}"),
    ("peak spread", lambda p: f"{p.spread_peak:.1f}"),
    ("mean spread", lambda p: f"{p.spread_mean:.1f}"),
    ("energy", lambda p: f"{p.energy_kwh:,.1f} kWh"),
    ("host-hours powered", lambda p: f"{p.host_hours:,.1f}"),
    ("ESV", lambda p: f"{p.esv:.2e}"),
    ("rounds", lambda p: f"{p.rounds:,}"),
    ("rounds with unknown load", lambda p: f"{p.unknown_rounds:,}"),
]


def _rollout_rows(report: SimulationReport) -> list[Row]:
    """Per rollout any policy played: hosts rolled, from its first step to its last, and the
    moves it caused (none when no rollout was played: the table is as before)."""
    names = list(dict.fromkeys(r.rollout for p in report.policies for r in p.rollouts))

    def cell(name: str, show: Callable[[RolloutFigures], str]) -> Callable[[PolicyFigures], str]:
        def value(p: PolicyFigures) -> str:
            found = next((r for r in p.rollouts if r.rollout == name), None)
            return "-" if found is None else show(found)

        return value

    rows: list[Row] = []
    for name in names:
        rows += [
            (f"rollout {name}: hosts rolled", cell(name, _rolled)),
            (f"rollout {name}: hours", cell(name, _hours)),
            (f"rollout {name}: moves", cell(name, lambda r: f"{r.moves:,}")),
        ]
    return rows


def _rolled(r: RolloutFigures) -> str:
    done = f"{r.rolled} of {r.hosts}"
    return done if r.phase == "Done" else f"{done} ({r.phase})"


def _hours(r: RolloutFigures) -> str:
    """From its first step to its last, in hours; "-" when it never began."""
    return "-" if r.began is None else f"{r.seconds / 3600:,.2f}"


def _heading(report: SimulationReport) -> str:
    days = (report.end - report.start).total_seconds() / 86400
    return (
        f"{report.cluster}: {report.vms} VMs on {report.hosts} hosts, {days:.2f} days of "
        f"{report.source} ({report.mode} power), "
        f"{report.start.isoformat(timespec='minutes')} to "
        f"{report.end.isoformat(timespec='minutes')}"
    )


def simulation_text(report: SimulationReport) -> str:
    names = [p.policy for p in report.policies]
    rows = ROWS + _rollout_rows(report)
    width = max([len(r[0]) for r in rows] + [6])
    cols = [max(12, len(n)) for n in names]
    lines = [_heading(report), ""]
    lines.append(
        " " * width + "  " + "  ".join(n.rjust(c) for n, c in zip(names, cols, strict=True))
    )
    for label, value in rows:
        cells = [value(p).rjust(c) for p, c in zip(report.policies, cols, strict=True)]
        lines.append(label.ljust(width) + "  " + "  ".join(cells))
    return "\n".join(lines) + "\n"


SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 48) -> str:
    """``values`` as a line of block characters, at most ``width`` (each the peak of its
    share), scaled to their own peak: a chart every forge shows."""
    if not values:
        return ""
    n = min(width, len(values))
    cells = [
        max(
            values[i * len(values) // n : max((i + 1) * len(values) // n, i * len(values) // n + 1)]
        )
        for i in range(n)
    ]
    peak = max(cells)
    if peak <= 0:
        return SPARKS[0] * n
    return "".join(SPARKS[min(7, int(8 * v / peak))] if v > 0 else SPARKS[0] for v in cells)


def simulation_sparklines(report: SimulationReport) -> list[str]:
    """Per policy, the spread, hot hosts and migrations of its rounds, as text charts."""
    lines = []
    for p in report.policies:
        spread = [t.spread or 0.0 for t in p.timeline]
        hot = [float(t.hot) for t in p.timeline]
        moved = [float(t.migrations) for t in p.timeline]
        lines += [
            f"{p.policy}",
            f"  spread      {sparkline(spread)}  peak {max(spread, default=0):.1f}",
            f"  hot hosts   {sparkline(hot)}  peak {max(hot, default=0):.0f}",
            f"  migrations  {sparkline(moved)}  peak {max(moved, default=0):.0f} per round",
        ]
    return lines


def simulation_markdown(report: SimulationReport, chart: str | None = None) -> str:
    names = [p.policy for p in report.policies]
    lines = [f"**Simulation** {_heading(report)}", ""]
    lines.append("| | " + " | ".join(f"`{n}`" for n in names) + " |")
    lines.append("|---|" + "---:|" * len(names))
    for label, value in ROWS + _rollout_rows(report):
        lines.append(f"| {label} | " + " | ".join(value(p) for p in report.policies) + " |")
    lines += ["", "```text", *simulation_sparklines(report), "```"]
    if chart:
        lines += ["", f"![spread, hot hosts and migrations per round]({chart})"]
    return "\n".join(lines) + "\n"


def simulation_json(report: SimulationReport) -> str:
    data = report.model_dump(mode="json", by_alias=True)
    for p in data["policies"]:
        if not p["rollouts"]:  # no rollout played: the report reads as before rollouts were
            del p["rollouts"]
    return json.dumps(data, indent=2) + "\n"


COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
PANEL_H, WIDTH, LEFT, GAP = 150, 900, 60, 40


def simulation_svg(report: SimulationReport) -> str:
    """Three panels over time: score spread, hosts above hostLimit, migrations per round."""
    total = max(1.0, (report.end - report.start).total_seconds())
    panels: Sequence[tuple[str, Callable[[PolicyFigures], list[tuple[float, float]]]]] = (
        ("score spread", lambda p: [(t.at, t.spread or 0.0) for t in p.timeline]),
        ("hosts over hostLimit", lambda p: [(t.at, float(t.hot)) for t in p.timeline]),
        ("migrations per round", lambda p: [(t.at, float(t.migrations)) for t in p.timeline]),
    )
    height = len(panels) * (PANEL_H + GAP) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
    ]
    plot_w = WIDTH - LEFT - 20
    for i, (title, series) in enumerate(panels):
        top = 20 + i * (PANEL_H + GAP)
        points = [series(p) for p in report.policies]
        peak = max([v for s in points for _, v in s] + [1.0])
        out.append(f'<text x="{LEFT}" y="{top - 4}" font-weight="bold">{escape(title)}</text>')
        out.append(
            f'<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{PANEL_H}" fill="none" '
            'stroke="#bbb"/>'
        )
        out.append(f'<text x="{LEFT - 4}" y="{top + 10}" text-anchor="end">{peak:.3g}</text>')
        out.append(f'<text x="{LEFT - 4}" y="{top + PANEL_H}" text-anchor="end">0</text>')
        for k, s in enumerate(points):
            if not s:
                continue
            xy = " ".join(
                f"{LEFT + plot_w * t / total:.1f},{top + PANEL_H * (1 - v / peak):.1f}"
                for t, v in s
            )
            colour = COLOURS[k % len(COLOURS)]
            out.append(
                f'<polyline points="{xy}" fill="none" stroke="{colour}" stroke-width="1.2"/>'
            )
    legend_y = height - 12
    for k, p in enumerate(report.policies):
        x = LEFT + k * 180
        colour = COLOURS[k % len(COLOURS)]
        out.append(f'<rect x="{x}" y="{legend_y - 9}" width="12" height="3" fill="{colour}"/>')
        out.append(f'<text x="{x + 16}" y="{legend_y - 5}">{escape(p.policy)}</text>')
    hours = total / 3600
    out.append(
        f'<text x="{WIDTH - 20}" y="{legend_y - 5}" text-anchor="end">'
        f"{hours:.0f} h from {escape(report.start.isoformat(timespec='minutes'))}</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"
