"""A plan and a placement answer as plain text for people, readable at 100 columns.

No colour and no terminal queries: the same text goes to a terminal, a log or a pull request.

A plan reads top to bottom: the header (cluster, plan id, the load spread of each CPU
architecture before and after against the threshold, and how many rounds in a row it was over
the threshold against ``holdRounds``), the moves of this reconcile grouped by wave, the moves
deferred to later rounds by the batch limit, changes to the Placement document that need no
migration (adopted drift), what cannot be satisfied and why, every host's load before and after,
and one summary line.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from itertools import groupby

from reconciler.model.load import ForecastView
from reconciler.model.plan import (
    AheadMove,
    Assist,
    Backoff,
    Candidate,
    HostLoad,
    Move,
    PlaceResult,
    Plan,
    PlanLoad,
    Unsatisfiable,
)
from reconciler.model.quantity import format_duration, format_size
from reconciler.model.snapshot import MigrationClass

WIDTH = 100
BAR_WIDTH = 10
INDENT = "  "


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _pct(value: float) -> str:
    return f"{value:3.0f}%"


def _bar(before: float, after: float, width: int = BAR_WIDTH) -> str:
    """``[###++-....]``: ``#`` load that stays, ``+`` arrives, ``-`` leaves, ``.`` free.

    Values are percentages; cells are rounded to the nearest tenth of the bar and clamped.
    """

    def cells(value: float) -> int:
        return max(0, min(width, round(value * width / 100)))

    b, a = cells(before), cells(after)
    kept = min(b, a)
    body = "#" * kept + "+" * (a - kept) + "-" * (b - kept)
    return "[" + body + "." * (width - len(body)) + "]"


def _size(move: Move) -> str:
    size = f"{format_size(move.memory)} {_plural(move.vcpus, 'vCPU')}"
    if move.migration_class is MigrationClass.SHARED:
        return size
    disks = ",".join(move.disks)
    return f"{size} {move.migration_class}: {disks or 'no disks'} {format_size(move.disk_bytes)}"


def _reason(move: Move) -> str:
    return f"{move.reason} ({move.rule})" if move.rule else str(move.reason)


class _Columns:
    """Column widths shared by every move line of one plan, so waves line up."""

    def __init__(self, moves: Sequence[Move]) -> None:
        self.vm = max((len(m.vm) for m in moves), default=0)
        self.route = max((len(_route(m)) for m in moves), default=0)
        self.size = max((len(_size(m)) for m in moves), default=0)
        self.reason = max((len(_reason(m)) for m in moves), default=0)


def _route(move: Move) -> str:
    return f"{move.source} -> {move.target}"


def _move_lines(
    moves: Sequence[Move],
    cols: _Columns,
    indent: str,
    ahead: Mapping[tuple[str, str, str], AheadMove] | None = None,
) -> list[str]:
    """One line per move in aligned columns; the detail follows, wrapped when it does not fit;
    a move made ahead of time says what the forecast expected."""
    lines: list[str] = []
    for move in moves:
        head = (
            f"{indent}{move.vm:<{cols.vm}}  {_route(move):<{cols.route}}  "
            f"{_size(move):<{cols.size}}  {_reason(move):<{cols.reason}}"
        )
        single = f"{head}  {move.detail}".rstrip()
        if len(single) <= WIDTH or not move.detail:
            lines.append(single)
        else:
            lines.append(head.rstrip())
            lines.extend(_wrapped(move.detail, indent))
        busy = busy_line(move)
        if busy:
            lines.extend(_wrapped(busy, indent))
        early = ahead.get((move.vm, move.source, move.target)) if ahead else None
        if early is not None:
            lines.extend(_wrapped(ahead_text(early), indent))
    return lines


def ahead_text(a: AheadMove) -> str:
    """``ahead of time: forecast 86% at 08:00-08:30 vs window 61% (kvm-01)``."""
    return (
        f"ahead of time: forecast {a.forecast:.0f}% at {a.start:%H:%M}-{a.end:%H:%M} UTC vs "
        f"window {a.window:.0f}% ({a.host})"
    )


def _wrapped(text: str, indent: str) -> list[str]:
    return textwrap.wrap(
        text, WIDTH, initial_indent=indent + "    ", subsequent_indent=indent + "    "
    )


def busy_line(move: Move) -> str | None:
    """The forecast of a guest that writes memory, when it needs help or would not converge:
    ``busy: writes 20 MiB/s, 4 MiB/s allowed: with postCopy, about 64s and 256 MiB; post-copy:
    ...``."""
    c = move.convergence
    if c is None or (c.converges and c.assist is Assist.NONE):
        return None
    allowed = f"{format_size(c.bandwidth)}/s {'assumed' if c.bandwidth_assumed else 'allowed'}"
    head = f"busy: writes {format_size(c.dirty_rate)}/s, {allowed}"
    if c.converges and c.seconds is not None and c.bytes is not None:
        head += f": with {c.assist.value}, about {c.seconds:.0f}s and {format_size(c.bytes)}"
    return f"{head}; {c.risk}" if c.risk else head


def _waves(moves: Iterable[Move]) -> list[tuple[int, list[Move]]]:
    ordered = sorted(moves, key=lambda m: m.wave)
    return [(wave, list(group)) for wave, group in groupby(ordered, key=lambda m: m.wave)]


def _unsatisfiable_lines(items: Sequence[Unsatisfiable]) -> list[str]:
    lines: list[str] = []
    for item in items:
        head = f"{INDENT}{item.code}"
        if item.rule:
            head += f" (rule {item.rule})"
        if item.vms:
            head += ": " + ", ".join(item.vms)
        lines.extend(textwrap.wrap(head, WIDTH, subsequent_indent=INDENT + "    "))
        lines.extend(
            textwrap.wrap(
                item.message,
                WIDTH,
                initial_indent=INDENT + "    ",
                subsequent_indent=INDENT + "    ",
            )
        )
    return lines


HOST_FIGURE_NAMES = ("cpu now", "window", "forecast")
"""A host's CPU figures besides the plan's own, as :func:`host_figures` gives them."""


def host_figures(h: HostLoad) -> tuple[float | None, float | None, float | None]:
    """The host's CPU now (the short sample), over the window and as forecast, where known."""
    return h.cpu_now, h.cpu_window, h.cpu_forecast


def ahead_by_move(plan: Plan) -> dict[tuple[str, str, str], AheadMove] | None:
    """The moves made ahead of time, by (VM, source, target)."""
    return {(a.vm, a.source, a.target): a for a in plan.load.ahead} if plan.load else None


def _host_lines(hosts: Sequence[HostLoad]) -> list[str]:
    if not hosts:
        return []
    name_w = max(len(h.host) for h in hosts)
    arch_w = max(len(h.arch or "?") for h in hosts)
    lines: list[str] = []
    for h in hosts:
        head = f"{INDENT}{h.host:<{name_w}}  {h.arch or '?':<{arch_w}}"
        if not h.known:
            lines.append(f"{head}  unknown: unreachable, no figures; nothing moves to or from it")
            continue
        cpu = f"cpu {_bar(h.cpu_before, h.cpu_after)} {_pct(h.cpu_before)} -> {_pct(h.cpu_after)}"
        mem = (
            f"mem {_bar(h.memory_before, h.memory_after)} "
            f"{_pct(h.memory_before)} -> {_pct(h.memory_after)}"
        )
        vms = f"vms {h.vms_before} -> {h.vms_after}"
        figures = [
            f"{what} {value:.0f}%"
            for what, value in zip(HOST_FIGURE_NAMES, host_figures(h), strict=True)
            if value is not None
        ]
        now = f"  ({', '.join(figures)})" if figures else ""
        unknown = "" if h.load_known else "  load unknown: no balance move"
        lines.append(f"{head}  {cpu}  {mem}  {vms}{now}{unknown}")
    return lines


def load_texts(load: PlanLoad | None) -> tuple[str, list[str]] | None:
    """What the CPU figures were read on (a title), and what of it to say (sentences)."""
    if load is None:
        return None
    window = format_duration(timedelta(seconds=load.window))
    texts = [t for t in (load.problem, load.hold) if t]
    if load.basis == "sample":
        title = f"Load: the observation's own short CPU sample, not the {window} window"
        if load.note:
            title = f"Load: {load.note}"
    else:
        title = f"Load: {load.statistic} over {window}, from {load.source}"
        texts[:0] = [load.note] if load.note else []
    if load.unknown_vms or load.unknown_hosts:
        what = f"unknown, left out of balance: hosts {', '.join(load.unknown_hosts) or 'none'}"
        if load.unknown_vms:
            shown = load.unknown_vms[:20]
            what += f"; VMs {', '.join(shown)}" + (", ..." if len(load.unknown_vms) > 20 else "")
        texts.append(what)
    if load.out_of_range:
        named = [f"{vm}: {why}" for vm, why in list(load.out_of_range.items())[:20]]
        more = "; ..." if len(load.out_of_range) > 20 else ""
        texts.append(f"out of range, not used: {'; '.join(named)}{more}")
    if load.duplicates:
        seen = [f"{vm}: {which}" for vm, which in list(load.duplicates.items())[:20]]
        more = "; ..." if len(load.duplicates) > 20 else ""
        texts.append(f"seen in several series at once, counted once: {'; '.join(seen)}{more}")
    if load.forecast is not None:
        texts.extend(_forecast_texts(load.forecast))
    return title, texts


def _forecast_texts(f: ForecastView) -> list[str]:
    """What the forecast made of the figures: how many VMs, and which kept their window."""
    ahead = format_duration(f.horizon)
    out = [
        f"forecast {ahead} ahead ({f.model.value}, weight {f.weight:g}) blended into "
        f"{len(f.used)} VM(s)"
    ]
    if f.no_history:
        shown = ", ".join(f.no_history[:20]) + (", ..." if len(f.no_history) > 20 else "")
        out.append(f"too little history to forecast, the window's mean stands: {shown}")
    if f.ignored:
        named = [f"{vm}: {why}" for vm, why in list(f.ignored.items())[:20]]
        more = "; ..." if len(f.ignored) > 20 else ""
        out.append(f"forecast not used, the window's mean stands: {'; '.join(named)}{more}")
    if f.error is not None and f.window_error is not None:
        worst = sorted(f.errors.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        largest = ", ".join(f"{vm} {e:.3g}" for vm, e in worst)
        out.append(
            f"forecast error over the last day: {f.error:.3g} cores per VM on average "
            f"(the window's mean held: {f.window_error:.3g}) over {len(f.errors)} VM(s); "
            f"largest: {largest}"
        )
    return out


def _when(at: datetime) -> str:
    return at.isoformat(timespec="seconds").replace("+00:00", "Z")


def backoff_text(b: Backoff, now: datetime) -> str:
    """One VM the balance backoff holds, and until when."""
    line = f"{b.vm} on {b.host}: moved {_when(b.moved_at)}"
    if b.until > now:
        line += f"; until {_when(b.until)}"
    if b.left:
        line += f"; back to {b.left} not before {_when(b.back_until)}"
    if b.doublings:
        line += f" (doubled {_plural(b.doublings, 'time')})"
    return line


BACKOFF_TITLE = "Balance backoff: moved for balance, not moved for balance again"


def placement_updates(
    plan: Plan, current: Mapping[str, str]
) -> list[tuple[str, str | None, str | None]]:
    """(vm, current host, proposed host) of Placement entries that change without a move."""
    moved = {m.vm for m in (*plan.moves, *plan.deferred)}
    return [
        (vm, current.get(vm), plan.placement.get(vm))
        for vm in sorted(set(current) | set(plan.placement))
        if vm not in moved and current.get(vm) != plan.placement.get(vm)
    ]


def summary_line(plan: Plan, updates: int = 0) -> str:
    """``N moves in W waves, D deferred, U unsatisfiable`` or ``No changes.``.

    ``updates`` counts Placement entries that change without a move; they are changes too.
    """
    unsat = len(plan.unsatisfiable)
    tail = f", {_plural(updates, 'placement update')}" if updates else ""
    if not plan.has_changes:
        if updates:
            return f"No moves; {_plural(updates, 'placement update')}, {unsat} unsatisfiable"
        return f"No changes; {unsat} unsatisfiable (see above)." if unsat else "No changes."
    waves = len({m.wave for m in plan.moves})
    return (
        f"{_plural(len(plan.moves), 'move')} in {_plural(waves, 'wave')}, "
        f"{len(plan.deferred)} deferred, {unsat} unsatisfiable{tail}"
    )


def plan_table(plan: Plan, current: Mapping[str, str] | None = None) -> str:
    """The whole plan as text, ending with a newline.

    ``current`` is the folder's ``Placement.spec.vms``: given, entries the plan changes without
    a move (drift adopted) are listed and counted.
    """
    updates = placement_updates(plan, current) if current is not None else []
    out: list[str] = [
        f"Plan for cluster {plan.cluster} at {plan.created_at.isoformat().replace('+00:00', 'Z')}",
        f"{INDENT}id {plan.plan_id}",
    ]
    if plan.spreads:
        arch_w = max(len(s.arch) for s in plan.spreads)
        out.append("Spread (max - min host score per architecture):")
        for s in plan.spreads:
            state = "balancing" if s.balancing else "not balancing"
            out.append(
                f"{INDENT}{s.arch:<{arch_w}}  {s.before:5.1f} -> {s.after:5.1f}  "
                f"threshold {s.threshold:g}  rounds over {s.rounds_over}/{s.hold_rounds} "
                f"holdRounds  {state}"
            )
    load = load_texts(plan.load)
    if load is not None:
        out.extend(textwrap.wrap(load[0], WIDTH, subsequent_indent=INDENT))
        for text in load[1]:  # names and labels whole: never wrapped at a hyphen in them
            out.extend(
                textwrap.wrap(
                    text,
                    WIDTH,
                    initial_indent=INDENT,
                    subsequent_indent=INDENT,
                    break_on_hyphens=False,
                )
            )

    cols = _Columns([*plan.moves, *plan.deferred])
    ahead = ahead_by_move(plan)
    out.append("")
    if plan.moves:
        out.append(
            f"Moves ({_plural(len(plan.moves), 'move')}, {format_size(plan.copy_bytes)} to copy; "
            "moves of one wave run together):"
        )
        for wave, moves in _waves(plan.moves):
            out.append(f"{INDENT}wave {wave}")
            out.extend(_move_lines(moves, cols, INDENT * 2, ahead))
    else:
        out.append("Moves: none")

    if plan.deferred:
        out.append("")
        out.append(f"Deferred to later rounds by the batch limit ({len(plan.deferred)}):")
        out.extend(_move_lines(plan.deferred, cols, INDENT * 2, ahead))

    if updates:
        out.append("")
        out.append(f"Placement updates without a migration ({len(updates)}):")
        vm_w = max(len(vm) for vm, _, _ in updates)
        for vm, old, new in updates:
            out.append(f"{INDENT * 2}{vm:<{vm_w}}  {old or '(unlisted)'} -> {new or '(unlisted)'}")

    if plan.unsatisfiable:
        out.append("")
        out.append(f"Unsatisfiable ({len(plan.unsatisfiable)}); no move can fix these:")
        out.extend(_unsatisfiable_lines(plan.unsatisfiable))

    if plan.backoff:
        out.append("")
        out.append(f"{BACKOFF_TITLE} ({len(plan.backoff)}):")
        for b in plan.backoff:
            out.extend(
                textwrap.wrap(
                    backoff_text(b, plan.created_at),
                    WIDTH,
                    initial_indent=INDENT,
                    subsequent_indent=INDENT * 3,
                )
            )

    if plan.hosts:
        out.append("")
        out.append("Hosts (load before -> after; bars: # stays, + arrives, - leaves, . free):")
        out.extend(_host_lines(plan.hosts))

    out.append("")
    out.append(summary_line(plan, len(updates)))
    return "\n".join(out) + "\n"


def _candidate_line(c: Candidate, name_w: int) -> str:
    score = "-" if c.score_after is None else f"{c.score_after:5.1f}"
    verdict = "fits" if c.fits else "no"
    line = f"{INDENT}{c.host:<{name_w}}  {verdict:<4}  {score:>5}"
    if c.reasons:
        line += "  " + "; ".join(c.reasons)
    if len(line) <= WIDTH:
        return line
    return "\n".join(textwrap.wrap(line, WIDTH, subsequent_indent=" " * (len(INDENT) + 4)))


def place_table(result: PlaceResult) -> str:
    """The answer to "where would a new VM go?" as text, ending with a newline."""
    out = [f"Best host: {result.host}" if result.host else "No host fits."]
    out.extend(textwrap.wrap(result.message, WIDTH))
    if result.candidates:
        name_w = max(len("host"), *(len(c.host) for c in result.candidates))
        out.append("")
        out.append(
            f"{INDENT}{'host':<{name_w}}  {'fit':<4}  {'score':>5}  (after placing; why not)"
        )
        out.extend(_candidate_line(c, name_w) for c in result.candidates)
    return "\n".join(out) + "\n"
