"""A plan as one rolling pull request per cluster, the way Renovate keeps one per branch.

The branch ``reconciler/<cluster>`` holds exactly one commit on top of the base branch: the
minimal edit of the cluster's placement file, with the moves in its message and trailers
``Reconciler-Plan`` and ``Reconciler-Source``. The same plan id again changes nothing; an
empty plan closes the pull request with a comment and deletes the branch. What counts as the
reconciler's is decided from what it writes, not from a trailer a person can carry: a commit
with our trailer *and* committed with the reconciler's identity. Anything else on the branch
(a person's commit, or the proposal amended or rebased by a person) is never overwritten
(comment once, blocked, exit 3).
Talks to git and the forge only through the StateRepo and Forge ports.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from reconciler.engine.ports import Forge, StateRepo
from reconciler.model.audit import PullRequest, RepoCommit, short_id
from reconciler.model.placement import Placement
from reconciler.model.plan import Move, Plan

PLAN_TRAILER = "Reconciler-Plan"
POWER_TRAILER = "Reconciler-Power"
"""The key of the power plan a proposal shows (mode: propose), when it shows one."""
SOURCE_TRAILER = "Reconciler-Source"
BLOCKED_MARKER = "<!-- reconciler-blocked -->"


def proposal_branch(cluster: str) -> str:
    return f"reconciler/{cluster}"


class Outcome(StrEnum):
    NOTHING = "nothing"
    """No change to propose; any open proposal was closed and its branch deleted."""
    CREATED = "created"
    UPDATED = "updated"
    CURRENT = "current"
    """The open proposal already holds this plan: nothing pushed."""
    BLOCKED = "blocked"
    """A person committed on the branch: left alone."""


@dataclass(frozen=True)
class Proposal:
    """What to propose: rendered by the caller (the report layer) from one plan."""

    cluster: str
    base: str
    """The base branch, e.g. main."""
    source: str
    """The base branch's commit the plan was computed from."""
    plan_id: str
    placement_path: str
    """The placement file, relative to the repository root."""
    placement_text: str | None
    """The edited placement file, or None when the plan changes nothing."""
    title: str
    body: str
    message: str
    power_key: str | None = None
    """The power plan the proposal shows (None: none). A proposal with a power plan and no
    placement change is written too: one commit that changes no file, for review."""


@dataclass(frozen=True)
class ProposeResult:
    outcome: Outcome
    branch: str
    pull_request: PullRequest | None = None
    commit: str | None = None
    detail: str = ""


def commit_message(cluster: str, plan: Plan, placement: Placement | None = None) -> str:
    """The subject, then every move and its reason, one a line, then every placement entry
    that changes without a move (adopted drift); trailers are added later."""
    moves = [*plan.moves, *plan.deferred]
    moving = {m.vm for m in moves}
    current = placement.spec.vms if placement is not None else {}
    adopted = {
        vm: host
        for vm, host in sorted(plan.placement.items())
        if vm not in moving and vm in current and current[vm] != host
    }
    subject = f"Placement of cluster {cluster}: {len(moves)} move(s)"
    if adopted:
        subject += f", {len(adopted)} entr{'y' if len(adopted) == 1 else 'ies'} adopted"
    lines = [subject, ""]
    lines += [move_line(m) for m in moves]
    lines += [adopted_line(vm, current[vm], host) for vm, host in adopted.items()]
    if not moves and not adopted:
        lines.append("Placement entries updated without moves.")
    return "\n".join(lines)


ADOPTED = "Adopted"
"""The reason of a placement entry changed to where a VM runs, without a migration."""


def adopted_line(vm: str, old: str, new: str) -> str:
    """A placement entry that follows where the VM runs: a move line history reads too."""
    return f"- {vm}: {old} -> {new} ({ADOPTED}): placement follows where the VM runs, no migration"


def move_line(m: Move) -> str:
    """``- web-1: kvm-01 -> kvm-02 (Balance, rule spread-web): detail``: history parses this."""
    why = f"{m.reason}, rule {m.rule}" if m.rule else str(m.reason)
    return f"- {m.vm}: {m.source} -> {m.target} ({why}): {m.detail}"


def _ours(repo: StateRepo, commit: RepoCommit) -> bool:
    """Made by the reconciler: its trailer, and committed with its identity. A person's amend
    or rebase keeps the trailer but makes the commit theirs: that is never overwritten."""
    committed = (commit.committer, commit.committer_email)
    return commit.trailer(PLAN_TRAILER) is not None and committed == tuple(repo.author)


def propose(repo: StateRepo, forge: Forge | None, p: Proposal) -> ProposeResult:
    """Bring the branch and pull request of ``p.cluster`` in line with ``p``; see the module."""
    branch = proposal_branch(p.cluster)
    head = repo.head(branch)
    pr = forge.find_open(branch) if forge is not None else None
    if head is not None:
        foreign = [c for c in repo.commits(f"{p.source}..{head}") if not _ours(repo, c)]
        if foreign:
            who = ", ".join(sorted({c.committer or c.author for c in foreign}))
            detail = (
                f"{branch} has {len(foreign)} commit(s) by {who} (e.g. {foreign[0].sha[:12]}); "
                "the proposal is no longer updated"
            )
            if forge is not None and pr is not None and BLOCKED_MARKER not in pr.body:
                forge.comment(
                    pr.number,
                    f"The reconciler stopped updating this proposal: {detail}. Merge or close "
                    "it; after it is closed and the branch deleted, the next run proposes anew.",
                )
                forge.update(pr.number, title=pr.title, body=pr.body + "\n" + BLOCKED_MARKER)
            return ProposeResult(Outcome.BLOCKED, branch, pr, head, detail)
    if p.placement_text is None and p.power_key is None:
        if forge is not None and pr is not None:
            forge.comment(
                pr.number,
                f"Closed by the reconciler: plan {short_id(p.plan_id)} from {p.source[:12]} has "
                "nothing to change; the cluster matches its desired state as far as the "
                "rules allow.",
            )
            forge.close(pr.number)
        if head is not None:
            repo.push(branch, None, expected=head)
        return ProposeResult(Outcome.NOTHING, branch, pr, None, "nothing to propose")
    current = head is not None and _plan_of(repo, p.source, head) == (p.plan_id, p.power_key)
    commit = head
    if not current:
        trailers = {PLAN_TRAILER: p.plan_id, SOURCE_TRAILER: p.source}
        if p.power_key is not None:
            trailers[POWER_TRAILER] = p.power_key
        files = {} if p.placement_text is None else {p.placement_path: p.placement_text}
        commit = repo.commit_files(
            parent=p.source, files=files, message=p.message, trailers=trailers
        )
        repo.push(branch, commit, expected=head)
    if forge is None:
        return ProposeResult(Outcome.CURRENT if current else Outcome.UPDATED, branch, None, commit)
    if pr is None:
        pr = forge.create(head=branch, base=p.base, title=p.title, body=p.body)
        return ProposeResult(Outcome.CREATED, branch, pr, commit)
    if current:
        return ProposeResult(Outcome.CURRENT, branch, pr, commit)
    forge.update(pr.number, title=p.title, body=p.body)
    return ProposeResult(Outcome.UPDATED, branch, pr, commit)


def _plan_of(repo: StateRepo, source: str, head: str) -> tuple[str | None, str | None] | None:
    """The plan id and power key on the branch, when it is one commit of ours on
    ``source``."""
    commits = repo.commits(f"{source}..{head}")
    if len(commits) != 1:
        return None  # the base moved on: rebuild the commit on the new base
    return commits[0].trailer(PLAN_TRAILER), commits[0].trailer(POWER_TRAILER)
