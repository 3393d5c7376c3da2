"""``reconciler impact``: the comparison as text, as Markdown for a pull-request comment (with
a hidden marker naming the cluster folder, so a later run updates the same comment), or JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence

from reconciler.model.impact import Backtest, Impact, SideTotals
from reconciler.model.plan import Move, Plan, Unsatisfiable
from reconciler.model.quantity import format_size
from reconciler.model.simulation import SimulationReport
from reconciler.report.plan_json import plan_document
from reconciler.report.rollout_text import plan_text

MARKER = "reconciler-impact"
MAX_LISTED = 50
"""Moves listed per section of the Markdown; the rest are counted."""


def comment_marker(path: str) -> str:
    return f"<!-- {MARKER}: {path} -->"


def impact_json(impact: Impact, simulation: SimulationReport | None = None) -> str:
    data = impact.model_dump(mode="json", by_alias=True)
    data["base"], data["head"] = plan_document(impact.base), plan_document(impact.head)
    if simulation is not None:
        data["simulation"] = simulation.model_dump(mode="json", by_alias=True)
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _short(rev: str | None) -> str:
    return rev[:12] if rev else "?"


def _move(m: Move) -> str:
    return f"{m.vm} {m.source} -> {m.target} ({format_size(m.memory)}, {m.reason})"


def _count(plan: Plan) -> str:
    text = f"{len(plan.moves)} moves"
    if plan.deferred:
        text += f" + {len(plan.deferred)} deferred"
    return text


def _unsat(u: Unsatisfiable) -> str:
    rule = f" ({u.rule})" if u.rule else ""
    return f"{u.code}{rule}: {u.message}"


def headline(impact: Impact) -> str:
    if not impact.differs:
        return "No difference: the head plans what the base plans."
    parts = [
        f"moves {len(impact.base.moves) + len(impact.base.deferred)} -> "
        f"{len(impact.head.moves) + len(impact.head.deferred)}",
        f"bytes {format_size(impact.base_bytes)} -> {format_size(impact.head_bytes)}",
    ]
    if impact.only_head:
        parts.append(f"{len(impact.only_head)} VMs only the head moves")
    if impact.no_longer:
        parts.append(f"{len(impact.no_longer)} no longer moved")
    if impact.new_unsatisfiable:
        parts.append(f"{len(impact.new_unsatisfiable)} new unsatisfiable")
    for r in impact.rollouts:
        blocked = ", blocked" if r.blocked else ""
        parts.append(f"rollout {r.rollout} ({len(r.hosts)} hosts{blocked})")
    return "Difference: " + ", ".join(parts) + "."


def impact_text(impact: Impact) -> str:
    base, head = impact.base, impact.head
    lines = [
        f"Impact on cluster {impact.cluster} ({impact.path}): base {_short(impact.base_revision)}"
        f" -> head {_short(impact.head_revision)}",
        f"  planned on {impact.snapshot_source}, observed {_when(base)}",
        f"  base: {_count(base)}, {format_size(impact.base_bytes)} to move, "
        f"{len(base.unsatisfiable)} unsatisfiable",
        f"  head: {_count(head)}, {format_size(impact.head_bytes)} to move, "
        f"{len(head.unsatisfiable)} unsatisfiable",
        "Spread (before -> after base | after head, thresholds):",
    ]
    for s in impact.spreads:
        lines.append(
            f"  {s.arch:<8} {s.before:5.1f} -> {s.base_after:5.1f} | {s.head_after:5.1f}"
            f"  thresholds {s.base_threshold:g} | {s.head_threshold:g}"
        )
    sections: list[tuple[str, Sequence[str]]] = [
        ("Only the head moves:", [_move(m) for m in impact.only_head]),
        ("No longer moved:", [_move(m) for m in impact.no_longer]),
        (
            "Moved differently:",
            [f"{c.vm}: base {_move(c.base)}; head {_move(c.head)}" for c in impact.changed],
        ),
        ("New unsatisfiable:", [_unsat(u) for u in impact.new_unsatisfiable]),
        ("No longer unsatisfiable:", [_unsat(u) for u in impact.resolved_unsatisfiable]),
    ]
    for title, items in sections:
        if items:
            lines += ["", title, *(f"  {x}" for x in items)]
    if impact.backtest is not None:
        lines += ["", *_backtest_text(impact.backtest)]
    for r in impact.rollouts:
        lines += ["", *plan_text(r).splitlines()]
    lines += ["", headline(impact)]
    return "\n".join(lines) + "\n"


def _when(plan: Plan) -> str:
    return plan.observed_at.isoformat() if plan.observed_at else "at an unknown time"


def _totals_rows(b: SideTotals, h: SideTotals) -> list[tuple[str, str, str]]:
    rows = [
        ("rounds replayed", str(b.rounds), str(h.rounds)),
        ("rounds that acted", str(b.acted), str(h.acted)),
        ("moves", str(b.moves), str(h.moves)),
        ("moves per day", f"{b.moves_per_day:g}", f"{h.moves_per_day:g}"),
        ("moved back", str(b.moved_back), str(h.moved_back)),
        ("bytes moved", format_size(b.bytes), format_size(h.bytes)),
    ]
    for arch in sorted(set(b.peak_spread) | set(h.peak_spread)):
        rows.append(
            (
                f"peak spread {arch}",
                f"{b.peak_spread.get(arch, 0.0):.1f}",
                f"{h.peak_spread.get(arch, 0.0):.1f}",
            )
        )
    return rows


def _backtest_text(bt: Backtest) -> list[str]:
    lines = [
        f"Backtest: {bt.snapshots} recorded snapshots from {bt.since.isoformat()} to "
        f"{bt.until.isoformat()}",
        f"  {'':<22} {'base':>12} {'head':>12}",
    ]
    for name, b, h in _totals_rows(bt.base, bt.head):
        lines.append(f"  {name:<22} {b:>12} {h:>12}")
    return lines


def _md_moves(title: str, moves: Sequence[Move]) -> list[str]:
    if not moves:
        return []
    out = [
        f"**{title}** ({len(moves)})",
        "",
        "| VM | from → to | size | reason |",
        "|---|---|---|---|",
    ]
    for m in moves[:MAX_LISTED]:
        detail = m.detail.replace("|", "\\|").replace("\n", " ")
        out.append(
            f"| `{m.vm}` | {m.source} → {m.target} | {format_size(m.memory)} | "
            f"{m.reason}: {detail} |"
        )
    if len(moves) > MAX_LISTED:
        out.append(f"| … {len(moves) - MAX_LISTED} more | | | |")
    return [*out, ""]


def impact_markdown(impact: Impact, *, since: str | None = None) -> str:
    """The comment: a summary table, what changes, the backtest; the marker first."""
    base, head = impact.base, impact.head
    out = [
        comment_marker(impact.path),
        f"### Placement impact: cluster `{impact.cluster}` (`{impact.path}`)",
        "",
        f"Base `{_short(impact.base_revision)}` → head `{_short(impact.head_revision)}`, "
        f"both planned on {impact.snapshot_source} (observed {_when(base)}).",
        "",
        f"**{headline(impact)}**",
        "",
        "| now | base | head |",
        "|---|---|---|",
        f"| moves (+ deferred) | {_count(base)} | {_count(head)} |",
        f"| bytes to move | {format_size(impact.base_bytes)} | {format_size(impact.head_bytes)} |",
        f"| unsatisfiable | {len(base.unsatisfiable)} | {len(head.unsatisfiable)} |",
    ]
    for s in impact.spreads:
        out.append(
            f"| spread {s.arch} (now {s.before:.1f}) | {s.base_after:.1f} after, threshold "
            f"{s.base_threshold:g} | {s.head_after:.1f} after, threshold {s.head_threshold:g} |"
        )
    out.append("")
    out += _md_moves("Only the head moves", impact.only_head)
    out += _md_moves("No longer moved", impact.no_longer)
    if impact.changed:
        out += [f"**Moved differently** ({len(impact.changed)})", ""]
        out += [
            f"- `{c.vm}`: base {c.base.source} → {c.base.target}, head "
            f"{c.head.source} → {c.head.target}"
            for c in impact.changed[:MAX_LISTED]
        ]
        out.append("")
    for title, items in (
        ("New unsatisfiable", impact.new_unsatisfiable),
        ("No longer unsatisfiable", impact.resolved_unsatisfiable),
    ):
        if items:
            out += [f"**{title}** ({len(items)})", "", *(f"- {_unsat(u)}" for u in items), ""]
    bt = impact.backtest
    if bt is not None:
        period = f"the last {since}" if since else "the recorded period"
        out += [
            f"#### Over {period}: {bt.snapshots} recorded snapshots replayed",
            "",
            "| replay | base | head |",
            "|---|---|---|",
            *(f"| {n} | {b} | {h} |" for n, b, h in _totals_rows(bt.base, bt.head)),
            "",
        ]
    for r in impact.rollouts:
        out += [
            f"#### Rollout `{r.rollout}`" + (": blocked" if r.blocked else ""),
            "",
            "```",
            *plan_text(r).splitlines(),
            "```",
            "",
        ]
    out.append(
        "<sub>`reconciler impact`: both revisions planned on the same observation, with the "
        "imbalance taken as lasting (holdRounds reached); see docs/review.md.</sub>"
    )
    return "\n".join(out) + "\n"
