"""The audit trail: one commit per executed batch on the state repository.

The commit updates placement.yaml for VMs the reconciler moved on its own (so the desired
state follows what happened and the next plan has nothing to undo) and writes the cluster's
status file (where every VM runs now, the round's result). Its message names every move, from,
to and why, in the lines ``history`` parses, and ends with the trailers Reconciler-Plan,
Reconciler-Source, Reconciler-Trigger and Reconciler-Actor.

A rejected push means someone pushed first: fetch, re-read the files at the new head, edit
them again and retry. Only the record is retried; no move is ever repeated here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from reconciler.adapters import yaml_edit
from reconciler.engine.ports import StateRepo
from reconciler.engine.propose import PLAN_TRAILER, SOURCE_TRAILER
from reconciler.errors import GitError, PushRejected
from reconciler.model.status import TRIGGERS, MoveOutcome, MoveResult

TRIGGER_TRAILER = "Reconciler-Trigger"
ACTOR_TRAILER = "Reconciler-Actor"
STATUS_FILE = "reconciler-status.json"
"""In the cluster folder; not YAML, so the loader does not read it as a document."""


def audit_message(cluster: str, results: Sequence[MoveResult]) -> str:
    done = [r for r in results if r.outcome is MoveOutcome.SUCCEEDED]
    lines = [f"Reconciled cluster {cluster}: {len(done)} VM(s) moved", ""]
    lines += [
        f"- {r.vm}: {r.source} -> {r.target} ({r.reason}): {r.detail}".rstrip(": ") for r in done
    ]
    others = [r for r in results if r.outcome is not MoveOutcome.SUCCEEDED]
    if others:
        lines += ["", "Not moved:"]
        lines += [f"  {r.vm}: {r.source} -> {r.target} {r.outcome}: {r.detail}" for r in others]
    return "\n".join(lines)


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
    attempts: int = 5,
) -> str:
    """Commit and push the record of one executed batch on ``branch``; the commit's sha.

    ``folder`` is the cluster folder in the repository; ``own_moves`` (VM -> host) are the
    Placement entries to update for moves the reconciler made on its own.
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
    message = audit_message(cluster, results)
    for _ in range(attempts):
        repo.fetch()
        head = repo.head(branch)
        if head is None:
            raise GitError(f"the state repository has no branch {branch!r} to record on")
        files = {f"{folder}/{STATUS_FILE}": status_json}
        if own_moves:
            current = repo.show(head, placement_path)
            skeleton = (
                "apiVersion: placement/v1alpha1\nkind: Placement\n"
                f"metadata:\n  name: {cluster}\nspec: {{}}\n"
            )
            text = current if current is not None else skeleton
            edited = yaml_edit.set_placement(text, dict(own_moves), file=placement_path)
            if edited != current:
                files[placement_path] = edited
        commit = repo.commit_files(parent=head, files=files, message=message, trailers=trailers)
        try:
            repo.push(branch, commit, expected=head)
        except PushRejected:
            continue  # someone pushed first: read their head and record on top of it
        return commit
    raise PushRejected(
        f"could not record the batch on {branch}: the branch kept moving ({attempts} tries)",
        hint="the moves are done and in the status; record again with the next round",
    )
