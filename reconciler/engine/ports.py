"""The engine's only ways to reach the world: one boundary type per external system.

Every port is here, and only here: the observation and the load, moves and their records, the
stores of the state directory, recovery's fence and restarts, power, the hold on a cluster,
the desired state and the state repository, a forge, a rollout's records, commands and hosts,
and a fleet's workers and members. Adapters implement these for real (libvirt, files, git, a
forge's HTTP API, etcd); ``tests/fakes`` implements them in memory, with injectable faults, so
the engine's logic is tested in milliseconds. Every method raises only the project's errors
(``reconciler.errors``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from reconciler.model.acting import Loaded, QueuedRecord, Record, Recorded
from reconciler.model.migration import MigrationProgress, MigrationResult

if TYPE_CHECKING:  # only named in signatures: a command imports the models it uses itself
    from reconciler.core.load_history import LoadHistory
    from reconciler.core.load_samples import HostSample
    from reconciler.model.audit import Comment, PullRequest, RepoCommit
    from reconciler.model.load import LoadSamples, LoadSpec
    from reconciler.model.plan import Move
    from reconciler.model.power import HostPower, PowerBook
    from reconciler.model.recovery import (
        Fence,
        FenceResult,
        PowerStatus,
        RecordedSighting,
        RecoveryState,
    )
    from reconciler.model.rollout import Command
    from reconciler.model.rollout_progress import (
        CommandOutcome,
        RolloutProgress,
        StepRecord,
        Target,
    )
    from reconciler.model.snapshot import LibvirtAnswer, ReconcilerState, Snapshot
    from reconciler.model.status import ReconcileStatus

# MigrationProgress and MigrationResult live in the model, where adapters can reach them too
__all__ = [
    "Answers",
    "CheckedLease",
    "Clock",
    "CommentThread",
    "DesiredSource",
    "DomainRecorder",
    "Fencer",
    "Forge",
    "Hold",
    "HostControl",
    "Lease",
    "LoadReader",
    "LoadHistoryStore",
    "LoadSampleStore",
    "LoadSampler",
    "Loaded",
    "Membership",
    "MigrationProgress",
    "MigrationResult",
    "Migrator",
    "ObservedBranch",
    "Observer",
    "PowerStore",
    "PowerSwitch",
    "QueuedRecords",
    "Record",
    "RecordQueue",
    "Recorded",
    "RecoveryStore",
    "Restarter",
    "RolloutCommands",
    "RolloutRecords",
    "StateRepo",
    "StatusStore",
    "TextFile",
    "Worker",
]


class Observer(Protocol):
    def observe(self) -> Snapshot:
        """Every host of the cluster and its VMs; an unreachable host is in it, unknown."""
        ...

    def observe_hosts(self, hosts: Sequence[str]) -> Snapshot:
        """A fresh look at only ``hosts`` (the two ends of a move), as a Snapshot of them."""
        ...


class LoadSampler(Protocol):
    def sample(self) -> list[HostSample]:
        """One CPU reading of every host's running VMs; a host that failed or did not answer
        in time has its ``error`` (never raises for one host)."""
        ...


class LoadSampleStore(Protocol):
    def load(self) -> LoadSamples | None:
        """The samples kept, None when there are none (or they cannot be read, a warning)."""
        ...

    def save(self, samples: LoadSamples) -> None:
        """Replace them, atomically; TerminalError when they cannot be written."""
        ...


class LoadHistoryStore(Protocol):
    def load(self) -> LoadHistory | None:
        """The history kept (``statistic: forecast``), None when there is none (or it cannot
        be read, a warning)."""
        ...

    def save(self, history: LoadHistory) -> None:
        """Replace it, atomically; TerminalError when it cannot be written."""
        ...


class LoadReader(Protocol):
    """Where the load over the window comes from: ``run``'s samples, or Prometheus."""

    def window(self, snapshot: Snapshot, spec: LoadSpec, now: datetime) -> Snapshot:
        """``snapshot`` with its VMs' load over ``spec.window`` ending ``now``; a source that
        fails gives unknown load, said in the snapshot (never raises)."""
        ...


class Migrator(Protocol):
    def migrate(
        self,
        move: Move,
        *,
        on_progress: Callable[[MigrationProgress], None],
        abort: threading.Event,
        uuid: str | None = None,
    ) -> MigrationResult:
        """Live-migrate ``move.vm`` from its source to its target and verify where it runs.

        The domain is looked up by ``uuid`` when given (a name can be reused), else by name.

        Blocks until the job ends; setting ``abort`` aborts the job (the VM stays on the
        source). Never raises: a failed migration, and one that could not start (a host not in
        the cluster or not answering, the VM not found there), is a result that says what
        happened, ``succeeded`` False.
        """
        ...

    def discard_copy(self, host: str, vm: str, *, uuid: str) -> None:
        """Remove the shut-off copy of ``vm`` (definition and copied volumes) that a cold move
        stopped midway left on ``host``; ReconcilerError when it cannot be removed."""
        ...


class DomainRecorder(Protocol):
    def record(
        self, host: str, vm: str, state: ReconcilerState, *, uuid: str | None = None
    ) -> None:
        """Write the reconciler's record on domain ``vm`` of ``host``, keeping its labels.

        The domain is looked up by ``uuid`` when given, else by name.
        """
        ...


class StatusStore(Protocol):
    def load(self) -> ReconcileStatus | None:
        """The status written by the last round, or None before the first round."""
        ...

    def save(self, status: ReconcileStatus) -> None:
        """Replace the status, atomically."""
        ...


class Fencer(Protocol):
    """Powers a dead host off (its fence agent) before its VMs are started elsewhere."""

    def fence(self, host: str, fence: Fence) -> FenceResult:
        """Run ``fence`` for ``host``; never raises: the result says what happened."""
        ...

    def status(self, host: str, fence: Fence) -> PowerStatus:
        """The power state of ``host`` as the status action of ``fence`` reports it (asked
        only of a fence that has one); never raises: ``unknown``, with why, when it cannot
        tell."""
        ...


class Answers(Protocol):
    """Whether libvirt on a host answers now. Asked by a fence's confirmation (a fenced host
    must not answer at all) and by a rollout's readiness check (a host back must answer in
    full), through the ports that extend this one."""

    def answers(self, host: str) -> LibvirtAnswer:
        """What libvirt on ``host`` answers now: one connection and its calls, each within
        the connection's timeouts. Never raises for a host that does not answer: the answer
        says why."""
        ...


class Restarter(Answers, Protocol):
    """Defines and starts the VMs of a fenced host on the others; ``answers`` confirms a
    fence (a host whose libvirt says its version is not off)."""

    def definitions(self, host: str) -> dict[str, str]:
        """UUID -> inactive domain XML of every domain on ``host``."""
        ...

    def start(self, host: str, uuid: str, xml: str) -> None:
        """Define ``xml`` on ``host`` unless a domain with ``uuid`` is there, then start it
        unless it runs; ReconcilerError when it does not end up running."""
        ...

    def undefine(self, host: str, uuid: str) -> None:
        """Remove the definition of the shut-off domain ``uuid`` from ``host``."""
        ...


class PowerSwitch(Protocol):
    """Switches hosts' power through their BMCs (``Cluster.spec.hosts[].power``): Redfish,
    IPMI, Wake-on-LAN or a command. Every call has the host's ``timeout``; credentials come
    from the reconciler's environment and never reach an error message."""

    def power_state(self, host: str, power: HostPower) -> PowerStatus:
        """What the BMC says now: on, off or unknown (with why)."""
        ...

    def power_on(self, host: str, power: HostPower) -> None:
        """Ask the BMC to power the host on; ReconcilerError when it refuses or does not
        answer. Returns once asked: the boot is watched by the caller."""
        ...

    def power_off(self, host: str, power: HostPower) -> None:
        """Ask the BMC for a graceful shutdown (forced when the driver has no other); the
        caller reads ``power_state`` until it says off."""
        ...


class PowerStore(Protocol):
    """The power state of one cluster (standby hosts, boots, intents), between rounds."""

    def load(self) -> PowerBook | None: ...

    def save(self, book: PowerBook) -> None: ...


class RolloutCommands(Protocol):
    def run(
        self, rollout: str, step: str, command: Command, *, target: Target | None
    ) -> CommandOutcome:
        """Run ``command`` ({host} and {uri} replaced from ``target``) within its timeout,
        output kept; never raises for the command's own failure."""
        ...


class HostControl(Answers, Protocol):
    """What a rollout asks of a host's libvirt: shut VMs down, start them, and ``answers``
    (a host is ready again when the answer has no ``why``)."""

    def shut_down(self, host: str, vms: Sequence[str], timeout: timedelta) -> dict[str, str]:
        """Shut ``vms`` down gracefully (ACPI) and wait up to ``timeout`` for them to be off;
        the VMs not off then, each with why. Never forces a VM off."""
        ...

    def start(self, host: str, vms: Sequence[str]) -> dict[str, str]:
        """Start ``vms`` (defined on ``host``); those that did not start, each with why. A VM
        running already counts as started."""
        ...


class RolloutRecords(Protocol):
    """Where a cluster's rollouts record their steps: the state directory, or the state
    repository's recording branch."""

    def load(self, rollout: str) -> RolloutProgress:
        """The records of ``rollout`` (none yet: empty)."""
        ...

    def append(
        self, progress: RolloutProgress, record: StepRecord, *, output: str = ""
    ) -> RolloutProgress:
        """``progress`` with ``record`` added, written durably before returning (a step's
        start is its intent: the step runs only after this returned). ``output`` is the end
        of a command's output, kept with the record where the records say so (the message of
        its commit). ReconcilerError when it could not be written, or when the stored records
        are not ``progress`` (another instance wrote meanwhile)."""
        ...


class RecoveryStore(Protocol):
    """The recovery state of one cluster, kept between rounds and restarts."""

    def load(self) -> RecoveryState | None:
        """The state saved last, or None before the first (or when it cannot be read as one)."""
        ...

    def save(self, state: RecoveryState) -> None:
        """Replace the state, atomically."""
        ...


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware."""
        ...


class Lease(Protocol):
    def acquire(self) -> bool:
        """Take or renew the right to act on the cluster; False when another holder has it."""
        ...

    def holder(self) -> str | None:
        """Who holds it now, for messages."""
        ...

    def release(self) -> None: ...


class CheckedLease(Lease, Protocol):
    """A lease that can be read back: the git lease, an etcd lease, this machine's lock."""

    def confirm(self) -> bool:
        """Re-read the lease: True only while this instance still holds it, unexpired."""
        ...


class Hold(Protocol):
    """The right to act on one cluster, held for the length of an acting command or round."""

    def valid(self) -> bool:
        """Held and confirmed within the renew deadline, by this process's monotonic clock.

        No I/O: it answers at once whatever a renewal call is doing, so a hung remote cannot
        keep a migration starting after the deadline.
        """
        ...

    def holder(self) -> str | None:
        """Who holds it, for messages."""
        ...


class ObservedBranch(Protocol):
    """What ``run --repo`` recorded on ``reconciler/observed/<cluster>``, read back."""

    def last_sighting(self, host: str) -> RecordedSighting | None:
        """The newest recorded snapshot in which ``host`` was reachable, with the definitions
        recorded beside it; None when none is recorded. ReconcilerError when it cannot be
        read (a git call that outlives its timeout, a file that is not what it should be)."""
        ...


class DesiredSource(Protocol):
    """Where the desired state comes from: a folder, or a checkout of the state repository."""

    def load(self) -> Loaded:
        """The desired state now (a repository is fetched first); ConfigError when invalid."""
        ...

    def record(self, record: Record) -> Recorded:
        """Leave the round's record: a minimal placement edit (folder) or an audit commit
        (repository), three-way against ``record.revision``: a person's change to the same
        entry made meanwhile is kept and returned as a conflict. The cache is never written."""
        ...

    def describe(self) -> str:
        """Where it is, for messages (credentials removed)."""
        ...


class RecordQueue(Protocol):
    """A cluster's records not yet written to the state repository, kept across restarts."""

    def load(self) -> list[QueuedRecord]:
        """The queued records, oldest first; [] when none."""
        ...

    def save(self, records: list[QueuedRecord]) -> None:
        """Replace the queue with ``records``, atomically; ReconcilerError when it cannot."""
        ...

    def describe(self) -> str:
        """Where it is kept, for messages."""
        ...


@runtime_checkable
class QueuedRecords(Protocol):
    """A source that may hold records of earlier rounds still to be written."""

    def queued(self) -> bool:
        """Records are waiting: a round that holds the cluster writes them."""
        ...


class TextFile(Protocol):
    """One file of a cluster folder that a round edits (placement.yaml)."""

    def read(self) -> str | None:
        """The text, None when the file does not exist."""
        ...

    def replace(self, edit: Callable[[str], str]) -> bool:
        """Apply ``edit`` to the text and replace the file atomically; True if it changed."""
        ...

    def describe(self) -> str: ...

    def modified_at(self) -> datetime | None:
        """When the file was last written, None when it does not exist."""
        ...


class StateRepo(Protocol):
    """The git repository holding the desired state; fetched before every round."""

    author: tuple[str, str]
    """(name, email) the reconciler's commits are made with, as author and committer."""

    def fetch(self) -> None:
        """Bring every remote branch up to date."""
        ...

    def head(self, branch: str) -> str | None:
        """The last fetched commit of ``branch``, None when the branch does not exist."""
        ...

    def remote_head(self, branch: str) -> str:
        """The commit of ``branch`` on the remote now (no fetch), "" when absent."""
        ...

    def checkout(self, commit: str) -> Path:
        """The files of ``commit`` in a folder of their own, to read only."""
        ...

    def parents(self, commit: str) -> list[str]:
        """The parents of ``commit`` (two or more: a merge)."""
        ...

    def changed_at(self, commit: str, path: str) -> datetime | None:
        """When ``path`` last changed in the history of ``commit`` (merges count from their
        merge), None when it never existed."""
        ...

    def show(self, commit: str, path: str) -> str | None:
        """The text of ``path`` at ``commit``, None when it is not there."""
        ...

    def commits(self, rev: str) -> list[RepoCommit]:
        """The commits of a revision range (``base..tip``), newest first."""
        ...

    def commit_files(
        self, *, parent: str, files: dict[str, str], message: str, trailers: dict[str, str]
    ) -> str:
        """A new commit on ``parent`` with ``files`` (path -> text) replaced; not pushed."""
        ...

    def push(self, branch: str, commit: str | None, *, expected: str | None) -> None:
        """Compare-and-swap ``branch`` from ``expected`` (None: absent) to ``commit`` (None:
        delete); raises PushRejected when the branch moved."""
        ...


class Forge(Protocol):
    """The pull-request side of a forge; every method raises ForgeError on failure."""

    body_limit: int
    """The longest body the forge accepts, in characters."""

    def find_open(self, head: str) -> PullRequest | None:
        """The open pull request from branch ``head``, if any."""
        ...

    def create(self, *, head: str, base: str, title: str, body: str) -> PullRequest: ...

    def update(self, number: int, *, title: str, body: str) -> None: ...

    def comment(self, number: int, body: str) -> None: ...

    def close(self, number: int) -> None: ...

    def set_status(
        self, commit: str, *, state: str, context: str, description: str, url: str | None = None
    ) -> None:
        """A commit status: state is success, failure, pending or error."""
        ...


class CommentThread(Protocol):
    """The comments of a pull request on a forge; every method raises ForgeError on failure."""

    body_limit: int

    def comments(self, number: int) -> list[Comment]:
        """Every comment of pull request ``number``, oldest first."""
        ...

    def comment(self, number: int, body: str) -> None: ...

    def update_comment(self, number: int, comment_id: int, body: str) -> None: ...


class Worker(Protocol):
    """One cluster of a fleet: its loop, run in a thread by the fleet."""

    cluster: str
    """The cluster's name (``metadata.name``)."""

    def run(self) -> None:
        """Run rounds until ``stop()``; releases the cluster's lease on the way out."""
        ...

    def stop(self) -> None: ...

    def wake(self, reason: str) -> None:
        """A round now (the desired state changed)."""
        ...

    def report(self) -> dict[str, object]:
        """What /status says of the cluster: held, its loop's health, its rounds."""
        ...


class Membership(Protocol):
    """The live instances of a fleet's group (etcd through a coordination service)."""

    def beat(self) -> frozenset[str]:
        """Stay a member; the live members now (TransientError: not known now)."""
        ...

    def leave(self) -> None: ...
