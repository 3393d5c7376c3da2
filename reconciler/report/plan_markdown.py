"""A plan as Markdown: ``plan --format markdown`` for pull-request comments, and the body of
a proposal's pull request (the same plan, plus the JSON Patch, the source commit and a hidden
marker holding the plan id), kept within the forge's body limit."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from reconciler.model.audit import short_id
from reconciler.model.placement import Placement
from reconciler.model.plan import AheadMove, HostLoad, Move, Plan, Unsatisfiable
from reconciler.model.quantity import format_size
from reconciler.report.plan_patch import plan_patch_ops
from reconciler.report.plan_table import (
    BACKOFF_TITLE,
    _bar,
    ahead_by_move,
    ahead_text,
    backoff_text,
    busy_line,
    host_figures,
    load_texts,
    placement_updates,
    summary_line,
)

MARKER = "reconciler-plan"


def plan_marker(plan_id: str) -> str:
    return f"<!-- {MARKER}: {plan_id} -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _move_rows(
    moves: Sequence[Move], ahead: Mapping[tuple[str, str, str], AheadMove] | None = None
) -> list[str]:
    rows = [
        "| VM | from → to | size | reason | rule | wave |",
        "|---|---|---|---|---|---|",
    ]
    for m in moves:
        size = f"{format_size(m.memory)}, {m.vcpus} vCPU"
        busy = busy_line(m)
        detail = f"{m.detail} ({busy})" if busy else m.detail
        early = ahead.get((m.vm, m.source, m.target)) if ahead else None
        if early is not None:  # made before the load arrives: what the forecast expected
            detail = f"{detail}; {ahead_text(early)}"
        rows.append(
            f"| `{_cell(m.vm)}` | {_cell(m.source)} → {_cell(m.target)} | {size} | "
            f"{m.reason}: {_cell(detail)} | {_cell(m.rule or '')} | {m.wave} |"
        )
    return rows


def _host_rows(hosts: Sequence[HostLoad]) -> list[str]:
    # the CPU the short sample, the window and the forecast show, where the plan has them
    known = [
        any(v is not None for v in col) for col in zip(*map(host_figures, hosts), strict=False)
    ]
    shown = [k for k, has in enumerate(known) if has]
    labels = ("now", "window", "forecast")  # as HOST_FIGURE_NAMES, in a column's title
    extra = "".join(f" CPU {labels[k]} |" for k in shown)
    rows = [
        f"| host | CPU before → after | memory before → after | VMs |{extra}",
        "|---|---|---|---|" + "---|" * len(shown),
    ]
    for h in hosts:
        if not h.known:
            rows.append(f"| {_cell(h.host)} | unknown (unreachable) | | |" + " |" * len(shown))
            continue
        cpu = f"`{_bar(h.cpu_before, h.cpu_after)}` {h.cpu_before:.0f}% → {h.cpu_after:.0f}%"
        mem = (
            f"`{_bar(h.memory_before, h.memory_after)}` "
            f"{h.memory_before:.0f}% → {h.memory_after:.0f}%"
        )
        values = host_figures(h)
        figures = "".join(
            f" {value:.0f}% |" if (value := values[k]) is not None else " |" for k in shown
        )
        rows.append(
            f"| {_cell(h.host)} | {cpu} | {mem} | {h.vms_before} → {h.vms_after} |{figures}"
        )
    return rows


def _unsatisfiable_rows(items: Sequence[Unsatisfiable]) -> list[str]:
    return [
        f"- **{u.code}**{f' ({_cell(u.rule)})' if u.rule else ''}: {u.message}"
        + (f" — {', '.join(f'`{v}`' for v in u.vms)}" if u.vms else "")
        for u in items
    ]


def _sections(
    plan: Plan, current: Mapping[str, str] | None, max_moves: int | None
) -> list[list[str]]:
    moves = plan.moves if max_moves is None else plan.moves[:max_moves]
    changes = placement_updates(plan, current) if current is not None else []
    out: list[list[str]] = [[f"**{summary_line(plan, len(changes))}**"]]
    if changes:
        out.append(
            [
                "### Placement entries changed without a move",
                "",
                *(
                    f"- `{vm}`: {old or '(unlisted)'} → {new or '(removed)'}"
                    for vm, old, new in changes
                ),
            ]
        )
    ahead = ahead_by_move(plan)
    if plan.moves:
        block = ["### Moves", "", *_move_rows(moves, ahead)]
        if len(moves) < len(plan.moves):
            block.append(f"\n… and {len(plan.moves) - len(moves)} more (see the commit message)")
        out.append(block)
    if plan.deferred:
        shown = plan.deferred if max_moves is None else plan.deferred[:max_moves]
        block = ["### Deferred to later rounds (batch limit)", "", *_move_rows(shown)]
        if len(shown) < len(plan.deferred):
            block.append(f"\n… and {len(plan.deferred) - len(shown)} more")
        out.append(block)
    if plan.unsatisfiable:
        out.append(["### Cannot be satisfied", "", *_unsatisfiable_rows(plan.unsatisfiable)])
    load = load_texts(plan.load)
    if load is not None:
        out.append(
            ["### Load", "", load[0], *([""] if load[1] else []), *(f"- {t}" for t in load[1])]
        )
    if plan.backoff:
        held = [f"- {backoff_text(b, plan.created_at)}" for b in plan.backoff]
        out.append(["### Balance backoff", "", BACKOFF_TITLE, "", *held])
    if plan.hosts:
        out.append(
            [
                "### Load per host",
                "",
                "`#` stays, `+` arrives, `-` leaves, `.` free",
                "",
                *_host_rows(plan.hosts),
            ]
        )
    return out


def plan_markdown(plan: Plan, current: Mapping[str, str] | None = None) -> str:
    """The plan for a pull-request comment."""
    head = f"## Placement plan for cluster `{plan.cluster}`\n\nPlan `{short_id(plan.plan_id)}`"
    if plan.desired_revision:
        head += f" from `{plan.desired_revision[:12]}`"
    blocks = [head, *("\n".join(s) for s in _sections(plan, current, None))]
    return "\n\n".join(blocks) + "\n"


def pr_body(plan: Plan, placement: Placement, *, source: str, limit: int) -> str:
    """The proposal's pull-request body, at most ``limit`` characters.

    Too long: the JSON Patch goes first (it is in the commit), then the move tables shrink;
    the hidden marker with the plan id always stays.
    """
    ops = plan_patch_ops(placement, plan)
    patch = ["### JSON Patch of the Placement", "", "```json", json.dumps(ops, indent=2), "```"]
    intro = (
        f"This pull request changes `placement.yaml` of cluster `{plan.cluster}`. "
        "Merging it approves the moves; `reconciler apply` carries them out, each admitted "
        "against a fresh look at the hosts first.\n\n"
        f"Source commit: `{source}` · plan `{plan.plan_id}`"
    )
    footer = (
        "This proposal is updated by the reconciler while the plan changes. A commit pushed "
        "to this branch by a person stops the updates.\n\n" + plan_marker(plan.plan_id)
    )
    current = placement.spec.vms
    max_moves: int | None = None
    with_patch = True
    while True:
        sections = _sections(plan, current, max_moves)
        blocks = [intro, *("\n".join(s) for s in sections)]
        if with_patch:
            blocks.append("\n".join(patch))
        else:
            blocks.append(f"_The JSON Patch ({len(ops)} operations) is left out for length._")
        body = "\n\n".join([*blocks, footer]) + "\n"
        if len(body) <= limit:
            return body
        if with_patch:
            with_patch = False
        elif max_moves is None or max_moves > 0:
            count = max(len(plan.moves), len(plan.deferred))
            max_moves = (count if max_moves is None else max_moves) // 2
        else:
            return (intro + "\n\n" + footer)[:limit]
