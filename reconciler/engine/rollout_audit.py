"""A rollout's records in the state repository: one commit per step begun or ended.

Each record is a commit on the branch (the audit branch where one is given) that writes
``<cluster folder>/rollouts/<name>.progress.json`` with the record added; its message says
what happened (the host, the step, the outcome, what the command said, the end of its output
and where its whole log is) and its trailers name them for tools:

    Reconciler-Rollout: kernel-2026-12
    Reconciler-Rollout-Host: kvm-02
    Reconciler-Rollout-Step: command/upgrade
    Reconciler-Rollout-Outcome: failed
    Reconciler-Trigger: rollout
    Reconciler-Actor: run@ops-1

The push is a compare-and-swap on the head the records were read from, one transaction
(``engine.transaction.commit_on_branch``): someone else's commit in between (a person's, or
another cluster's record on the same branch) is built upon, after a jittered wait; records
changed by someone else (another instance) are an error, never overwritten.
"""

from __future__ import annotations

import json
from typing import Final

from pydantic import ValidationError

from reconciler.core.rollout_steps import step_title
from reconciler.engine.audit import ACTOR_TRAILER, TRIGGER_TRAILER
from reconciler.engine.ports import StateRepo
from reconciler.engine.transaction import Change, RetryPolicy, commit_on_branch
from reconciler.errors import TerminalError
from reconciler.model.rollout_progress import PROGRESS_SUFFIX, RolloutProgress, StepRecord
from reconciler.redact import scrub

ROLLOUT_TRAILER: Final = "Reconciler-Rollout"
HOST_TRAILER: Final = "Reconciler-Rollout-Host"
STEP_TRAILER: Final = "Reconciler-Rollout-Step"
OUTCOME_TRAILER: Final = "Reconciler-Rollout-Outcome"
OUTPUT_LINES: Final = 40
"""Lines of a command's output kept in its commit message, at most..."""
OUTPUT_CHARS: Final = 4000
"""...and characters."""


def progress_path(folder: str, rollout: str) -> str:
    return f"{folder}/rollouts/{rollout}{PROGRESS_SUFFIX}"


def _tail(output: str) -> str:
    lines = scrub(output).rstrip().splitlines()[-OUTPUT_LINES:]
    text = "\n".join(lines)
    return text[-OUTPUT_CHARS:]


def step_message(cluster: str, rollout: str, record: StepRecord, output: str = "") -> str:
    """The commit message of one record: subject, what happened, the end of the output."""
    title = step_title(record.host, record.step)
    lines = [f"Rollout {rollout} of cluster {cluster}: {title} {record.outcome.value}"]
    body = []
    if record.detail:
        body.append(scrub(record.detail))
    if record.vms:
        body.append("VMs: " + ", ".join(record.vms))
    if record.log:
        body.append(f"Log: {record.log}" + (f" on {record.by}" if record.by else ""))
    tail = _tail(output) if output else ""
    if tail:
        body += ["Output (end):", *("    " + line for line in tail.splitlines())]
    if body:
        lines += ["", *body]
    return "\n".join(lines)


class RepoRolloutRecords:
    """``RolloutRecords`` in the state repository, on ``branch`` (the audit branch if any)."""

    def __init__(
        self,
        repo: StateRepo,
        *,
        branch: str,
        folder: str,
        cluster: str,
        actor: str,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.repo = repo
        self.branch = branch
        self.folder = folder
        self.cluster = cluster
        self.actor = actor
        self.retry = retry
        """How a record whose push lost its race is tried again (``engine.transaction``)."""

    def _read(self, head: str | None, rollout: str) -> RolloutProgress:
        empty = RolloutProgress(cluster=self.cluster, rollout=rollout)
        if head is None:
            return empty
        path = progress_path(self.folder, rollout)
        text = self.repo.show(head, path)
        if text is None:
            return empty
        try:
            return RolloutProgress.model_validate(json.loads(text))
        except (json.JSONDecodeError, ValidationError) as err:
            raise TerminalError(
                f"the rollout records {path} at {head[:12]} cannot be read: "
                f"{type(err).__name__}",
                hint="restore the file from the branch's history; a rollout never starts over "
                "from records it cannot read",
            ) from err

    def load(self, rollout: str) -> RolloutProgress:
        self.repo.fetch()
        return self._read(self.repo.head(self.branch), rollout)

    def append(
        self, progress: RolloutProgress, record: StepRecord, *, output: str = ""
    ) -> RolloutProgress:
        new = progress.add(record)
        path = progress_path(self.folder, progress.rollout)
        text = new.model_dump_json(by_alias=True, indent=2) + "\n"
        trailers = {
            ROLLOUT_TRAILER: progress.rollout,
            HOST_TRAILER: record.host or "-",
            STEP_TRAILER: record.step,
            OUTCOME_TRAILER: record.outcome.value,
            TRIGGER_TRAILER: "rollout",
            ACTOR_TRAILER: self.actor,
        }
        message = step_message(self.cluster, progress.rollout, record, output)

        def edit(head: str) -> Change[None]:
            stored = self._read(head, progress.rollout)
            if stored != progress:
                raise TerminalError(
                    f"the records of rollout {progress.rollout} on {self.branch} changed "
                    f"meanwhile ({len(stored.records)} records there, {len(progress.records)} "
                    f"read): another instance acts on it",
                    hint="only the instance holding the cluster writes them; check the lease",
                )
            return Change({path: text}, message, trailers, None)

        commit_on_branch(
            self.repo,
            self.branch,
            edit,
            retry=self.retry,
            what=f"record {step_title(record.host, record.step)} of rollout {progress.rollout}",
            hint="no step runs whose start is not recorded; a step whose outcome is not "
            "recorded counts as interrupted",
        )
        return new


__all__ = [
    "HOST_TRAILER",
    "OUTCOME_TRAILER",
    "ROLLOUT_TRAILER",
    "STEP_TRAILER",
    "RepoRolloutRecords",
    "progress_path",
    "step_message",
]
