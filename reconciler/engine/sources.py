"""Where the desired state comes from, and where a round's record goes.

Every command that reads desired state reads it through one of these (``cli/desired.py``
builds it from the command's request): ``plan``, ``place``, ``observe`` and ``propose`` load
it; the commands that act also record through it.

``FolderSource``: a plain folder, read as it is; the record is the minimal edit of its
placement.yaml, three-way against the text the round read (kept as text at ``load``, parsed
only when a record is written: a look never pays for the YAML editor).

``RepoSource``: a git repository, read at the branch head, recorded as audit commits; a
record that cannot be written stays queued in the state directory (``queue``) and is written
by a later round (``engine.audit_queue``).

``load`` fetches, checks out the head of the branch (``engine.transaction.checkout_head``: a
tree of its own per commit, read only) and reads the cluster folder; the commit is the
revision. ``record`` writes the round's audit
commit on the branch (or the audit branch) three-way against that revision, while the caller
still holds the cluster. The clone and its trees are never written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.engine.transaction import Checkout, checkout_head, repo_folder
from reconciler.errors import ConfigError, ReconcilerError
from reconciler.model.acting import Loaded, QueuedRecord, Record, Recorded
from reconciler.model.desired import DesiredState
from reconciler.model.status import status_json

if TYPE_CHECKING:  # the ports of everything else a look never needs
    from reconciler.engine.audit import AuditCommit
    from reconciler.engine.ports import RecordQueue, StateRepo, TextFile


class FolderSource:
    """A ``DesiredSource`` over one cluster folder; ``placement`` is its placement.yaml."""

    def __init__(
        self, folder: Path, *, read: Callable[[Path], DesiredState], placement: TextFile
    ) -> None:
        self.folder = folder
        self.read = read
        self.placement = placement
        self._read: str | None = None
        self._loaded = False

    def describe(self) -> str:
        return str(self.folder)

    def load(self) -> Loaded:
        desired = self.read(self.folder)
        self._read, self._loaded = self.placement.read(), True
        return Loaded(desired=desired, placement_changed_at=self.placement.modified_at())

    def record(self, record: Record) -> Recorded:
        now = self.placement.read()
        if not record.placement or now is None:
            return Recorded()
        from reconciler.config import yaml_edit  # ruamel.yaml: only when a record is written

        name = self.placement.describe()
        base = yaml_edit.placement_entries(self._read if self._loaded else now, file=name)
        write, kept = yaml_edit.three_way(
            base, yaml_edit.placement_entries(now, file=name), record.placement
        )
        changed = bool(write) and self.placement.replace(
            lambda text: yaml_edit.set_placement(text, write, file=name)
        )
        conflicts = [
            f"{vm}: {name} was changed to {host!r} meanwhile; kept as written"
            for vm, host in sorted(kept.items())
        ]
        return Recorded(
            where=name if changed else None,
            written=write if changed else {},
            conflicts=conflicts,
        )


class RepoSource:
    """A ``DesiredSource`` over the cluster folder ``folder`` of ``branch`` in ``repo``."""

    def __init__(
        self,
        repo: StateRepo,
        *,
        branch: str,
        folder: str,
        read: Callable[[Path], DesiredState],
        actor: str,
        audit_branch: str | None = None,
        display: str = "the state repository",
    ) -> None:
        self.repo = repo
        self.branch = branch
        self.folder = repo_folder(folder)
        self.read = read
        self.actor = actor
        self.audit_branch = audit_branch or branch
        self.display = display
        self.checkout: Checkout | None = None
        """What the last ``load`` read; None before it."""
        self.queue: RecordQueue | None = None
        """Where records wait that could not be written yet (the state directory's); None:
        a record that cannot be written is an error and nothing more."""

    def describe(self) -> str:
        return f"{self.display} ({self.branch}, {self.folder})"

    def load(self) -> Loaded:
        return self.load_checkout()[0]

    def load_checkout(self) -> tuple[Loaded, Checkout]:
        """``load``, and the commit and files it read (``propose`` edits a copy of them)."""
        checkout = checkout_head(self.repo, self.branch, self.folder, display=self.display)
        desired = self.read(checkout.folder)
        self.checkout, commit = checkout, checkout.commit
        merge = len(self.repo.parents(commit)) > 1
        changed = self.repo.changed_at(commit, f"{self.folder}/placement.yaml")
        loaded = Loaded(desired=desired, revision=commit, merge=merge, placement_changed_at=changed)
        return loaded, checkout

    def queued(self) -> bool:
        """Records of earlier rounds wait in the queue (``engine.audit_queue``)."""
        if self.queue is None:
            return False
        try:
            return bool(self.queue.load())
        except ReconcilerError:  # said when the round's record tries it
            return False

    def record(self, record: Record) -> Recorded:
        from reconciler.engine.audit_queue import write_in_order  # the YAML editor: to record

        if self.queue is None and not (record.results or record.placement or record.power):
            return Recorded()
        audit = write_in_order(
            record, queue=self.queue, write=self._write, on_branch=self._on_branch
        )
        if audit is None:
            return Recorded()
        conflicts = [
            f"{vm}: placement.yaml was changed to {host!r} by a person meanwhile; kept as written"
            for vm, host in sorted(audit.conflicts.items())
        ]
        return Recorded(where=audit.commit, written=audit.written, conflicts=conflicts)

    def _write(self, record: Record, record_id: str) -> AuditCommit:
        """One record as one audit commit on the recording branch."""
        from reconciler.engine.audit import record_batch

        source = record.revision or (self.checkout.commit if self.checkout else None)
        if source is None:
            raise ConfigError("nothing was loaded from the state repository to record against")
        return record_batch(
            self.repo,
            branch=self.audit_branch,
            cluster=record.cluster,
            folder=self.folder,
            results=record.results,
            own_moves=record.placement,
            adopted=record.adopted,
            status_json=status_json(record.status) if record.status is not None else "{}\n",
            plan_id=record.plan_id,
            source=source,
            trigger=record.trigger,
            actor=self.actor,
            files={f"{self.folder}/{path}": text for path, text in record.files.items()},
            record_id=record_id,
            power=record.power,
        )

    def _on_branch(self, queued: QueuedRecord) -> bool:
        """Whether the recording branch has a commit of ``queued`` since the revision it was
        made against (a push that landed before the queue was updated)."""
        from reconciler.engine.audit import RECORD_TRAILER

        base = queued.record.revision
        self.repo.fetch()
        head = self.repo.head(self.audit_branch)
        if base is None or head is None:
            return False
        try:
            since = self.repo.commits(f"{base}..{head}")
        except ReconcilerError:  # the base is not in the clone: write it (twice beats never)
            return False
        return any(c.trailer(RECORD_TRAILER) == queued.id for c in since)
