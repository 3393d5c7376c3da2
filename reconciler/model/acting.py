"""What the acting path passes between the round and the desired state's source."""

from __future__ import annotations

from pydantic import AwareDatetime, Field

from reconciler.model.base import Frozen
from reconciler.model.desired import DesiredState
from reconciler.model.status import MoveResult, ReconcileStatus


class Loaded(Frozen):
    """The desired state as read, and the revision it was read at (a commit, or None)."""

    desired: DesiredState
    revision: str | None = None
    merge: bool = Field(
        default=False, description="The revision is a merge commit (an approved proposal)."
    )
    placement_changed_at: AwareDatetime | None = Field(
        default=None,
        description="When placement.yaml was last changed (commit or file time); None: unknown. "
        "A move the reconciler made after it, whose record is missing, is recorded, not reverted.",
    )


class Record(Frozen):
    """What a round that acted leaves in the desired state's source."""

    cluster: str
    plan_id: str
    revision: str | None = Field(
        description="The revision the round read its desired state at: the three-way base."
    )
    results: list[MoveResult]
    placement: dict[str, str] = Field(
        description="Placement entries that follow what happened (VM -> host)."
    )
    adopted: dict[str, str] = Field(
        default_factory=dict,
        description="Of placement: entries adopted from where VMs run (drift kept), no move.",
    )
    status: ReconcileStatus | None = None
    trigger: str = "manual"
    files: dict[str, str] = Field(
        default_factory=dict,
        description="More files for the record, by path in the cluster folder (a recovery: "
        "the definitions it started, secrets removed); a folder source does not write them.",
    )
    power: list[str] = Field(
        default_factory=list,
        description="Power actions the round took, one line each (host, action, why, the "
        "demand): the record of a power step.",
    )


class Recorded(Frozen):
    """What the source wrote: a commit (repository) or a file (folder), and any conflicts."""

    where: str | None = Field(
        default=None, description="A commit id or the file written; None: nothing written."
    )
    written: dict[str, str] = Field(default_factory=dict)
    conflicts: list[str] = Field(
        default_factory=list,
        description="Entries a person changed meanwhile, kept as written: one line each.",
    )


class QueuedRecord(Frozen):
    """A round's record waiting to be written to the state repository."""

    id: str = Field(
        description="Names the record on every attempt (trailer Reconciler-Record), so one "
        "that reached the branch before its queue entry was removed is not written twice."
    )
    record: Record


class PendingRecords(Frozen):
    """The records of one cluster not written yet, oldest first (``pending-records.json``)."""

    records: list[QueuedRecord] = Field(default_factory=list)
