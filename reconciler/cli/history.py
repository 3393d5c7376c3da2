"""``reconciler history``: who moved what, when, why, from which commit, read from git."""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta

from reconciler.cli.common import (
    EXIT_OK,
    StateCheckout,
    Subparsers,
    add_path_argument,
    add_repo_arguments,
    checkout_state,
)
from reconciler.cli.requests import repo_of
from reconciler.engine.propose import PLAN_TRAILER, SOURCE_TRAILER
from reconciler.engine.rollout_audit import (
    HOST_TRAILER,
    OUTCOME_TRAILER,
    ROLLOUT_TRAILER,
    STEP_TRAILER,
)
from reconciler.model.audit import (
    AuditEntry,
    AuditMove,
    AuditRolloutStep,
    MoveHistory,
    RepoCommit,
    short_id,
)
from reconciler.model.quantity import parse_duration

TRIGGER_TRAILER = "Reconciler-Trigger"
ACTOR_TRAILER = "Reconciler-Actor"
_MOVE = re.compile(
    r"^- (?P<vm>\S+): (?P<source>\S+) -> (?P<target>\S+) "
    r"\((?P<reason>[A-Za-z]+)(?:, rule (?P<rule>[^)]+))?\)(?:: (?P<detail>.*))?$"
)


def duration(text: str) -> timedelta:
    match = re.fullmatch(r"(\d+)([smhdw])", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration; write e.g. 90s, 30m, 12h, 7d or 2w"
        )
    try:
        return parse_duration(text.strip())  # at most ten years, never an overflow
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).replace("; ", " (", 1) + ")") from None


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "history",
        help="the audit trail: every proposed and executed move and rollout step, from the git "
        "log",
        description="Read the Reconciler-* trailers and move lines of the state repository's\n"
        "commits: who, what, when, why, and the desired-state commit of every move; and each\n"
        "step a rollout began or ended.",
    )
    add_path_argument(p)
    add_repo_arguments(p)
    p.add_argument("--vm", metavar="NAME", help="only the moves of this VM")
    p.add_argument("--since", type=duration, metavar="AGE", help="only newer commits, e.g. 7d")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(handler=run)


def parse_moves(body: str) -> list[AuditMove]:
    out = []
    for line in body.splitlines():
        match = _MOVE.match(line.strip())
        if match:
            out.append(AuditMove(**{k: v for k, v in match.groupdict().items() if v is not None}))
    return out


def audit_entry(commit: RepoCommit) -> AuditEntry:
    trigger = commit.trailer(TRIGGER_TRAILER)
    rollout = commit.trailer(ROLLOUT_TRAILER)
    if rollout is not None:
        host = commit.trailer(HOST_TRAILER)
        return AuditEntry(
            commit=commit.sha,
            author=commit.author,
            email=commit.email,
            date=commit.date,
            subject=commit.subject,
            kind="rollout",
            trigger=trigger,
            actor=commit.trailer(ACTOR_TRAILER),
            rollout=AuditRolloutStep(
                rollout=rollout,
                host=None if host in (None, "-") else host,
                step=commit.trailer(STEP_TRAILER) or "?",
                outcome=commit.trailer(OUTCOME_TRAILER) or "?",
            ),
        )
    return AuditEntry(
        commit=commit.sha,
        author=commit.author,
        email=commit.email,
        date=commit.date,
        subject=commit.subject,
        kind="executed" if trigger else "proposed",
        plan_id=commit.trailer(PLAN_TRAILER),
        source=commit.trailer(SOURCE_TRAILER),
        trigger=trigger,
        actor=commit.trailer(ACTOR_TRAILER),
        moves=parse_moves(commit.body),
    )


def read_history(
    checkout: StateCheckout, *, vm: str | None, since: timedelta | None
) -> MoveHistory:
    after = datetime.now(UTC) - since if since is not None else None
    # git's own order (several records may share a second); commits with neither trailer
    # are a person's
    commits = [
        c
        for c in checkout.repo.log(checkout.commit, paths=[checkout.path], since=after)
        if c.trailer(PLAN_TRAILER) is not None or c.trailer(ROLLOUT_TRAILER) is not None
    ]
    entries = []
    for commit in commits:
        entry = audit_entry(commit)
        if vm is not None and entry.rollout is not None:
            continue  # a rollout step names hosts, not VMs
        if vm is not None:
            moves = [m for m in entry.moves if m.vm == vm]
            if not moves:
                continue
            entry = entry.model_copy(update={"moves": moves})
        entries.append(entry)
    return MoveHistory(
        repository=checkout.repo.display_url, branch=checkout.branch, entries=entries
    )


def history_text(history: MoveHistory) -> str:
    if not history.entries:
        return "no reconciler commits found\n"
    lines = []
    for e in history.entries:
        who = e.actor or f"{e.author} <{e.email}>"
        what = f"{e.kind}" + (f" ({e.trigger})" if e.trigger else "")
        lines.append(f"{e.date.isoformat()}  {e.commit[:12]}  {what} by {who}")
        if e.rollout is not None:
            lines.append(f"  {e.subject}")
            continue
        lines.append(
            f"  plan {short_id(e.plan_id or '?')}, source {(e.source or '?')[:12]}: {e.subject}"
        )
        for m in e.moves:
            why = f"{m.reason}" + (f", rule {m.rule}" if m.rule else "")
            lines.append(f"    {m.vm}: {m.source} -> {m.target} ({why}) {m.detail}".rstrip())
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    checkout = checkout_state(repo_of(args))
    history = read_history(checkout, vm=args.vm, since=args.since)
    if args.format == "json":
        print(history.model_dump_json(by_alias=True, indent=2))
    else:
        print(history_text(history), end="")
    return EXIT_OK
