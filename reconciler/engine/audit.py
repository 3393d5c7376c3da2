"""The audit trail: one commit per acting round on the state repository.

The commit updates placement.yaml for VMs the reconciler moved (so the desired state follows
what happened and the next plan has nothing to undo) and writes the cluster's status file
(where every VM runs now, the round's result). Its message names every move and every
placement entry it changes, from, to and why, in the lines ``history`` parses, and ends with
the trailers Reconciler-Plan, Reconciler-Source, Reconciler-Trigger and Reconciler-Actor.

The edit is three-way against the commit the round read (``source``): an entry a person
changed since then is kept as the person wrote it and reported as a conflict. The commit is
one transaction (``engine.transaction.commit_on_branch``): a push that lost its race to
another writer (in whatever form the remote says it) fetches, re-reads the files at the new
head, edits them again and retries after a jittered wait. Only the record is retried; no move
is ever repeated here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from reconciler.config import yaml_edit
from reconciler.engine.ports import StateRepo
from reconciler.engine.propose import PLAN_TRAILER, SOURCE_TRAILER, adopted_line
from reconciler.engine.transaction import Change, RetryPolicy, commit_on_branch
from reconciler.model.status import TRIGGERS, MoveOutcome, MoveResult

TRIGGER_TRAILER = "Reconciler-Trigger"
ACTOR_TRAILER = "Reconciler-Actor"
RECORD_TRAILER = "Reconciler-Record"
"""The id of a round's record: the same on every attempt to write it, across restarts."""
STATUS_FILE = "reconciler-status.json"
"""In the cluster folder; not YAML, so the loader does not read it as a document."""


@dataclass(frozen=True)
class AuditCommit:
    commit: str
    written: dict[str, str] = field(default_factory=dict)
    """Placement entries the commit set (VM -> host)."""
    conflicts: dict[str, str] = field(default_factory=dict)
    """Entries a person changed meanwhile, kept as they are (VM -> the person's host)."""


def audit_message(
    cluster: str,
    results: Sequence[MoveResult],
    *,
    adopted: Mapping[str, tuple[str, str]] | None = None,
    conflicts: Mapping[str, str] | None = None,
    trigger: str | None = None,
    power: Sequence[str] = (),
) -> str:
    """``adopted``: VM -> (old entry, new entry) for placement entries changed without a move;
    ``power``: the power actions of a power step, one line each."""
    done = [r for r in results if r.outcome is MoveOutcome.SUCCEEDED]
    if trigger == "power":
        subject = f"Power saving in cluster {cluster}: " + "; ".join(
            line.split(":", 1)[0] for line in power
        )
        return "\n".join([subject, "", *(f"- {line}" for line in power)])
    if trigger == "recovery":
        subject = recovery_subject(cluster, results)
    else:
        subject = f"Reconciled cluster {cluster}: {len(done)} VM(s) moved"
    if adopted:
        subject += f", {len(adopted)} placement entr{'y' if len(adopted) == 1 else 'ies'} adopted"
    lines = [subject, ""]
    lines += [
        f"- {r.vm}: {r.source} -> {r.target} ({r.reason}): {r.detail}".rstrip(": ") for r in done
    ]
    lines += [adopted_line(vm, old, new) for vm, (old, new) in sorted((adopted or {}).items())]
    others = [r for r in results if r.outcome is not MoveOutcome.SUCCEEDED]
    if others:
        lines += ["", "Not restarted:" if trigger == "recovery" else "Not moved:"]
        lines += [f"  {r.vm}: {r.source} -> {r.target} {r.outcome}: {r.detail}" for r in others]
    if conflicts:
        lines += ["", "Changed by a person meanwhile, kept as written:"]
        lines += [f"  {vm}: {host}" for vm, host in sorted(conflicts.items())]
    return "\n".join(lines)


def recovery_subject(cluster: str, results: Sequence[MoveResult]) -> str:
    """'Recovered fenced host kvm-01 of cluster lab: 3 VM(s) restarted elsewhere, 1 not
    restarted' (a recovery is recorded only once its host was fenced)."""
    hosts = ", ".join(sorted({r.source for r in results}))
    done = sum(r.outcome is MoveOutcome.SUCCEEDED for r in results)
    subject = f"Recovered fenced host {hosts} of cluster {cluster}: {done} VM(s) restarted"
    subject += " elsewhere"
    if len(results) > done:
        subject += f", {len(results) - done} not restarted"
    return subject


def record_batch(
    repo: StateRepo,
    *,
    branch: str,
    cluster: str,
    folder: str,
    results: Sequence[MoveResult],
    own_moves: Mapping[str, str],
    status_json: str,
    plan_id: str,
    source: str,
    trigger: str,
    actor: str,
    adopted: Mapping[str, str] | None = None,
    files: Mapping[str, str] | None = None,
    retry: RetryPolicy | None = None,
    record_id: str | None = None,
    power: Sequence[str] = (),
) -> AuditCommit:
    """Commit and push the record of one acting round on ``branch``.

    ``folder`` is the cluster folder in the repository; ``own_moves`` (VM -> host) are the
    Placement entries to update (``adopted``: those of them that follow drift, not a move);
    ``files`` (path in the repository -> text) are written as they are. ``record_id`` names
    the record (trailer Reconciler-Record), so a record queued after an attempt whose outcome
    is unknown is found on the branch rather than written twice. A lost race is retried under
    ``retry`` (``engine.transaction``).
    """
    if trigger not in TRIGGERS:
        raise ValueError(f"trigger {trigger!r} is not one of {', '.join(TRIGGERS)}")
    placement_path = f"{folder}/placement.yaml"
    trailers = {
        PLAN_TRAILER: plan_id,
        SOURCE_TRAILER: source,
        TRIGGER_TRAILER: trigger,
        ACTOR_TRAILER: actor,
    }
    if record_id is not None:
        trailers[RECORD_TRAILER] = record_id
    base_text = repo.show(source, placement_path) if own_moves else None
    base = yaml_edit.placement_entries(base_text, file=placement_path)
    skeleton = (
        "apiVersion: placement/v1alpha1\nkind: Placement\n"
        f"metadata:\n  name: {cluster}\nspec: {{}}\n"
    )

    def edit(head: str) -> Change[tuple[dict[str, str], dict[str, str]]]:
        """The record made on ``head``: placement three-way against what the round read."""
        written = {**(files or {}), f"{folder}/{STATUS_FILE}": status_json}
        write: dict[str, str] = {}
        kept: dict[str, str] = {}
        theirs: dict[str, str] = {}
        if own_moves:
            current = repo.show(head, placement_path)
            theirs = yaml_edit.placement_entries(current, file=placement_path)
            write, kept = yaml_edit.three_way(base, theirs, own_moves)
            text = current if current is not None else skeleton
            edited = yaml_edit.set_placement(text, write, file=placement_path) if write else text
            if edited != current:
                written[placement_path] = edited
        message = audit_message(
            cluster,
            results,
            trigger=trigger,
            adopted={
                vm: (theirs.get(vm, "(unlisted)"), h)
                for vm, h in (adopted or {}).items()
                if vm in write
            },
            conflicts=kept,
            power=power,
        )
        return Change(written, message, trailers, (write, kept))

    done = commit_on_branch(
        repo,
        branch,
        edit,
        retry=retry,
        what="record the batch",
        hint="the moves are done and in the status; the record stays queued and is written "
        "by a later round",
    )
    assert done is not None  # the edit always makes a record
    write, kept = done.value
    return AuditCommit(commit=done.commit, written=write, conflicts=kept)
