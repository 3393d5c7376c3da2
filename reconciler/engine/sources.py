"""Where the desired state comes from, and where a round's record goes.

``FolderSource``: a plain folder, read as it is; the record is the minimal edit of its
placement.yaml, three-way against the text the round read.

``RepoSource``: a git repository, read at the branch head, recorded as audit commits.

``load`` fetches, checks out the head of the branch (a tree of its own per commit, read only)
and reads the cluster folder; the commit is the revision. ``record`` writes the round's audit
commit on the branch (or the audit branch) three-way against that revision, while the caller
still holds the cluster. The clone and its trees are never written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePosixPath

from reconciler.config import yaml_edit
from reconciler.engine.audit import record_batch
from reconciler.engine.ports import Loaded, Record, Recorded, StateRepo, TextFile
from reconciler.errors import ConfigError
from reconciler.model.desired import DesiredState
from reconciler.model.status import status_json


class FolderSource:
    """A ``DesiredSource`` over one cluster folder; ``placement`` is its placement.yaml."""

    def __init__(
        self, folder: Path, *, read: Callable[[Path], DesiredState], placement: TextFile
    ) -> None:
        self.folder = folder
        self.read = read
        self.placement = placement
        self._read: dict[str, str] | None = None

    def describe(self) -> str:
        return str(self.folder)

    def _entries(self) -> dict[str, str]:
        return yaml_edit.placement_entries(self.placement.read(), file=self.placement.describe())

    def load(self) -> Loaded:
        desired = self.read(self.folder)
        self._read = self._entries()
        return Loaded(desired=desired, placement_changed_at=self.placement.modified_at())

    def record(self, record: Record) -> Recorded:
        if not record.placement or self.placement.read() is None:
            return Recorded()
        base = self._read if self._read is not None else self._entries()
        write, kept = yaml_edit.three_way(base, self._entries(), record.placement)
        name = self.placement.describe()
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
        rel = PurePosixPath(folder)
        if rel.is_absolute() or ".." in rel.parts:
            raise ConfigError(
                f"PATH {folder} must be a folder inside the repository",
                hint="write it relative to the repository root, e.g. cluster-state",
            )
        self.repo = repo
        self.branch = branch
        self.folder = str(rel)
        self.read = read
        self.actor = actor
        self.audit_branch = audit_branch or branch
        self.display = display
        self.commit: str | None = None
        self.root: Path | None = None

    def describe(self) -> str:
        return f"{self.display} ({self.branch}, {self.folder})"

    def load(self) -> Loaded:
        self.repo.fetch()
        commit = self.repo.head(self.branch)
        if commit is None:
            raise ConfigError(
                f"{self.display} has no branch {self.branch!r}",
                hint="pass the branch that holds the cluster folders with --branch",
            )
        root = self.repo.checkout(commit)
        path = root / self.folder
        if not path.is_dir():
            raise ConfigError(
                f"{self.display} has no folder {self.folder} at {self.branch} ({commit[:12]})",
                hint="pass the cluster folder inside the repository as PATH",
            )
        desired = self.read(path)
        self.commit, self.root = commit, root
        merge = len(self.repo.parents(commit)) > 1
        changed = self.repo.changed_at(commit, f"{self.folder}/placement.yaml")
        return Loaded(desired=desired, revision=commit, merge=merge, placement_changed_at=changed)

    @property
    def path(self) -> Path | None:
        """The cluster folder in the files of the last loaded commit (read only)."""
        return None if self.root is None else self.root / self.folder

    def record(self, record: Record) -> Recorded:
        if not record.results and not record.placement:
            return Recorded()
        source = record.revision or self.commit
        if source is None:
            raise ConfigError("nothing was loaded from the state repository to record against")
        audit = record_batch(
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
        )
        conflicts = [
            f"{vm}: placement.yaml was changed to {host!r} by a person meanwhile; kept as written"
            for vm, host in sorted(audit.conflicts.items())
        ]
        return Recorded(where=audit.commit, written=audit.written, conflicts=conflicts)
