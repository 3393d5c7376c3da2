"""Recorded observations: files in the state directory, and the branch
``reconciler/observed/<cluster>`` of the state repository.

Locally: ``<state dir>/<cluster>/observations/<UTC time>.json``, one compact snapshot a file
(defaults left out, one line), written atomically; which to keep is decided by
:mod:`reconciler.core.observations`. In git: ``snapshot.json`` on its own branch with no
common history with the desired state, a commit per push; ``git log`` of that branch is the
recorded sequence a backtest replays. Beside it ``definitions.json``: VM name -> the domain
XML the reconciler last saw of it, secrets removed (what a dead host's VMs are restarted
from), when there are any; :class:`ObservedBranch` reads them back for an instance that never
saw the dead host reachable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from reconciler.adapters.git.repo import GitStateRepo
from reconciler.core import observations
from reconciler.errors import PushRejected, SnapshotError
from reconciler.model.recovery import RecordedSighting
from reconciler.model.snapshot import Snapshot

FOLDER = "observations"
BRANCH_PREFIX = "reconciler/observed/"
FILE = "snapshot.json"
DEFINITIONS = "definitions.json"
TRAILER = "Reconciler-Observed"
SIGHTING_DEPTH = 500
"""Commits of the branch searched, newest first, for one in which a host was reachable: a
standby that took over keeps pushing while the host is dead, with the host unreachable."""


def observed_branch(cluster: str) -> str:
    return f"{BRANCH_PREFIX}{cluster}"


def _stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def _parse_stamp(name: str) -> datetime | None:
    try:
        return datetime.strptime(name, "%Y%m%dT%H%M%S.%fZ.json").replace(tzinfo=UTC)
    except ValueError:
        return None


def recorded_json(snapshot: Snapshot) -> str:
    """The compact text of a recorded snapshot (``Snapshot`` by alias, defaults left out)."""
    return observations.compact(snapshot).model_dump_json(by_alias=True, exclude_defaults=True)


class ObservationStore:
    """The recorded snapshots of one cluster in ``<state_dir>/<cluster>/observations/``."""

    def __init__(self, state_dir: Path, cluster: str) -> None:
        self.folder = state_dir / cluster / FOLDER

    def _files(self) -> list[tuple[datetime, Path]]:
        if not self.folder.is_dir():
            return []
        found = [(_parse_stamp(p.name), p) for p in self.folder.iterdir()]
        return sorted((t, p) for t, p in found if t is not None)

    def latest(self) -> Snapshot | None:
        files = self._files()
        return self._read(files[-1][1]) if files else None

    def snapshots(self, since: datetime | None = None) -> Iterator[Snapshot]:
        """The recorded snapshots, oldest first (from ``since`` on)."""
        for taken, path in self._files():
            if since is None or taken >= since:
                yield self._read(path)

    @staticmethod
    def _read(path: Path) -> Snapshot:
        try:
            return Snapshot.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValidationError) as err:
            raise SnapshotError(f"recorded snapshot {path} cannot be read: {err}") from err

    def record(self, snapshot: Snapshot, now: datetime) -> bool:
        """Keep ``snapshot`` when it differs beyond noise from the last one kept; remove
        what retention lets go. True when it was written."""
        files = self._files()
        last = self._read(files[-1][1]) if files else None
        written = False
        if observations.change(last, snapshot) is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / f"{_stamp(snapshot.taken_at)}.json"
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(recorded_json(snapshot) + "\n", encoding="utf-8")
            tmp.replace(path)
            files.append((_parse_stamp(path.name) or snapshot.taken_at, path))
            written = True
        by_time = dict(files)
        for taken in observations.expired(list(by_time), now):
            by_time[taken].unlink(missing_ok=True)
        return written


# --- the branch reconciler/observed/<cluster> -----------------------------------------------


def pushed_at(repo: GitStateRepo, cluster: str) -> datetime | None:
    """When the branch was last written (its head's commit date), None when it does not exist.
    Reads the clone as last fetched."""
    head = repo.head(observed_branch(cluster))
    if head is None:
        return None
    commits = repo.log(f"{head}^!")
    return commits[0].date if commits else None


def push_snapshot(
    repo: GitStateRepo, snapshot: Snapshot, definitions: Mapping[str, str] | None = None
) -> str | None:
    """One commit with ``snapshot.json`` on ``reconciler/observed/<cluster>`` (a root commit
    when the branch does not exist), pushed with a lease on the head it was built on. Returns
    the commit, or None when another instance pushed first (nothing overwritten).

    ``definitions`` (VM name -> domain XML, already stripped of secrets) replace
    ``definitions.json`` as a whole."""
    branch = observed_branch(snapshot.cluster)
    head = repo.head(branch)
    taken = snapshot.taken_at.astimezone(UTC).isoformat().replace("+00:00", "Z")
    text = observations.compact(snapshot).model_dump_json(
        by_alias=True, exclude_defaults=True, indent=1
    )
    files = {FILE: text + "\n"}
    if definitions:
        files[DEFINITIONS] = json.dumps(dict(sorted(definitions.items())), indent=1) + "\n"
    commit = repo.commit_files_on(
        parent=head,
        files=files,
        message=f"Observed cluster {snapshot.cluster} at {taken}",
        trailers={TRAILER: taken},
    )
    try:
        repo.push(branch, commit, expected=head)
    except PushRejected:
        return None
    return commit


def observed_snapshots(
    repo: GitStateRepo, cluster: str, *, since: datetime | None, latest_only: bool = False
) -> list[tuple[str, Snapshot]]:
    """The snapshots recorded on the branch as (commit, snapshot), oldest first: those taken
    from ``since`` on, or only the newest with ``latest_only``. Reads the clone as last
    fetched; an empty list when the branch does not exist."""
    head = repo.head(observed_branch(cluster))
    if head is None:
        return []
    out: list[tuple[str, Snapshot]] = []
    for commit in repo.log(head, paths=[FILE]):
        snapshot = _snapshot_at(repo, commit.sha, observed_branch(cluster))
        if snapshot is None:
            continue
        if since is not None and snapshot.taken_at < since:
            break  # newest first: the rest is older
        out.append((commit.sha, snapshot))
        if latest_only:
            break
    out.reverse()
    return out


def last_sighting(
    repo: GitStateRepo, cluster: str, host: str, *, depth: int = SIGHTING_DEPTH
) -> RecordedSighting | None:
    """The newest snapshot on the branch (within ``depth`` commits) in which ``host`` was
    reachable, with ``definitions.json`` of the same commit; None when there is none. Reads
    the clone as last fetched; SnapshotError when a file there is not what it should be."""
    branch = observed_branch(cluster)
    head = repo.head(branch)
    if head is None:
        return None
    for commit in repo.log(head, paths=[FILE, DEFINITIONS], max_count=depth):
        snapshot = _snapshot_at(repo, commit.sha, branch)
        if snapshot is None:
            continue
        if not any(h.name == host and h.reachable for h in snapshot.hosts):
            continue
        return RecordedSighting(
            commit=commit.sha,
            snapshot=snapshot,
            definitions=_definitions(repo.show(commit.sha, DEFINITIONS), commit.sha, branch),
        )
    return None


def _snapshot_at(repo: GitStateRepo, sha: str, branch: str) -> Snapshot | None:
    """``snapshot.json`` of commit ``sha``; None when the commit has none."""
    text = repo.show(sha, FILE)
    if text is None:
        return None
    try:
        return Snapshot.model_validate_json(text)
    except ValidationError as err:
        raise SnapshotError(
            f"{FILE} at {sha[:12]} of {branch} is not a snapshot: {err.error_count()} problem(s)"
        ) from err


def _definitions(text: str | None, commit: str, branch: str) -> dict[str, str]:
    if text is None:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise SnapshotError(
            f"{DEFINITIONS} at {commit[:12]} of {branch} is not JSON: {err}"
        ) from err
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise SnapshotError(
            f"{DEFINITIONS} at {commit[:12]} of {branch} is not an object of VM name -> XML"
        )
    return data


class ObservedBranch:
    """The recorded sightings of one cluster's hosts on its observed branch (the clone as the
    round's fetch left it; each git call has the repository's timeout). A sighting is read
    again only when the branch moved."""

    def __init__(self, repo: GitStateRepo, cluster: str) -> None:
        self.repo = repo
        self.cluster = cluster
        self._cache: dict[str, tuple[str, RecordedSighting | None]] = {}

    def last_sighting(self, host: str) -> RecordedSighting | None:
        head = self.repo.head(observed_branch(self.cluster)) or ""
        cached = self._cache.get(host)
        if cached is not None and cached[0] == head:
            return cached[1]
        found = last_sighting(self.repo, self.cluster, host) if head else None
        self._cache[host] = (head, found)
        return found
