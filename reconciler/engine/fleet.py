"""A fleet: one process serving many clusters of one repository, shared with other instances.

Every ``every`` seconds (and at once when woken: a new commit, a webhook) the fleet looks at the
repository's cluster folders (``discover``) and the live instances of its group
(``membership``, none without a coordination service), and asks the pure assignment
(``core.assignment.mine``) which folders are this instance's. Each of those gets a worker (one
cluster's own loop, lease and connection pool, run in a thread of its own); a folder that is
no longer assigned, or no longer in the repository, has its worker stopped: no new move starts,
the round in flight settles, and only then is the cluster's lease released, so the instance
now assigned can take it; until then the report lists it as leaving, and as held while it is.
The assignment decides who tries a cluster; the cluster's lease decides who acts.

A folder whose worker cannot be built (its desired state invalid at the start: the cluster's
name is needed for its lease) is reported as invalid and tried again at the next look; the
others go on. Folders that declare one cluster name (which keys the cluster's lease, state
folder and observed branch) are refused as they are found: none of them is assigned or
served, each is reported as invalid naming the others, by every instance alike. A membership
that cannot be read (etcd unreachable) keeps the last one read: the leases, which can no
longer be renewed either, stop every action on their own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from reconciler.config.fleet_checks import shared_name_why, sharing
from reconciler.core.assignment import mine
from reconciler.engine import triggers
from reconciler.engine.ports import Membership, Worker
from reconciler.errors import ReconcilerError

log = logging.getLogger(__name__)


class _Running:
    """A folder's thread: it builds the worker, then runs it until stopped."""

    def __init__(self, fleet: Fleet, folder: str) -> None:
        self.fleet = fleet
        self.folder = folder
        self.worker: Worker | None = None
        self.stopped = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._serve, name=f"cluster-{folder}", daemon=True)

    def _serve(self) -> None:
        try:
            worker = self.fleet.make(self.folder)
        except ReconcilerError as err:
            self.fleet._invalid(self.folder, str(err))
            return
        with self.lock:
            if self.stopped:
                return
            self.worker = worker
        self.fleet.invalid.pop(self.folder, None)
        log.info("serving cluster %s (folder %s)", worker.cluster, self.folder)
        worker.run()

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            worker = self.worker
        if worker is not None:
            worker.stop()


@dataclass
class Fleet:
    me: str
    """This instance's name in the group."""
    discover: Callable[[], Iterable[str]]
    """The cluster folders of the repository now (ReconcilerError: not readable now); a
    mapping gives each one's cluster name as its files declare it too (None: not known), and
    folders that declare one name are refused."""
    make: Callable[[str], Worker]
    """A folder's worker, built in the folder's own thread (ReconcilerError: its desired state
    cannot be served)."""
    membership: Membership | None = None
    every: float = 5.0
    """Seconds between looks at the members (a third of their etcd lease, or less)."""
    wakeup: triggers.Wakeup = field(default_factory=triggers.Wakeup)
    folders: tuple[str, ...] = ()
    members: frozenset[str] = frozenset()
    assigned: frozenset[str] = frozenset()
    invalid: dict[str, str] = field(default_factory=dict)
    """Folders whose worker could not be built, or that are refused: why."""
    refused: dict[str, str] = field(default_factory=dict)
    """Folders refused as they were found (they share a cluster name): why."""
    problem: str | None = None
    """Why the last look could not read the folders or the members; None when it could."""
    _read: bool = False
    """The folders were read once, and are current until woken by a change."""
    _looks: int = 0
    _running: dict[str, _Running] = field(default_factory=dict)
    _leaving: list[_Running] = field(default_factory=list)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        """Look, start and stop workers until ``stop()``; then stop them all and leave."""
        try:
            while not self._stopping.is_set():
                reasons = self.wakeup.take()
                self.look(reasons)
                self.wakeup.event.wait(self.every)
        finally:
            self._shutdown()

    def stop(self) -> None:
        self._stopping.set()
        self.wakeup.event.set()
        with self._lock:
            for running in self._running.values():
                running.stop()

    def look(self, reasons: Iterable[str] = ()) -> None:
        """One look: the folders (read again when woken by a change, e.g. a new commit), the
        members, the assignment; workers started and stopped.

        In a group, the first look only joins: the members starting at the same time have
        not all joined yet, and a cluster tried now would move again at the next look."""
        problems = []
        reasons = list(reasons)
        changed = any(r != triggers.SCHEDULE for r in reasons)
        if not self._read or changed:
            try:
                found = self.discover()
                self.folders = tuple(sorted(set(found)))
                self._refuse(found if isinstance(found, Mapping) else {})
                self._read = True
            except ReconcilerError as err:
                self._read = False  # read again at the next look
                problems.append(f"the cluster folders could not be read: {err}")
        if self.membership is not None:
            try:
                self.members = self.membership.beat()
            except ReconcilerError as err:
                problems.append(f"the fleet's members could not be read: {err}")
        self.problem = "; ".join(problems) or None
        if self.problem:
            log.warning("%s; going on with what was read last", self.problem)
        self._looks += 1
        if self.membership is not None and self._looks == 1:
            return
        served = tuple(f for f in self.folders if f not in self.refused)
        self.assigned = mine(served, self.members, self.me)
        with self._lock:
            self._leaving = [r for r in self._leaving if r.thread.is_alive()]
            for folder, running in list(self._running.items()):
                if not running.thread.is_alive():  # its folder was invalid
                    del self._running[folder]
            for folder in sorted(set(self._running) - self.assigned):
                log.info("cluster folder %s is no longer this instance's: letting it go", folder)
                running = self._running.pop(folder)
                running.stop()
                self._leaving.append(running)
            for folder in sorted(self.assigned - set(self._running)):
                if self._stopping.is_set() or any(r.folder == folder for r in self._leaving):
                    continue  # its previous worker is still settling: next look
                if folder in self.invalid and not changed:
                    continue  # tried again when the folders change
                running = _Running(self, folder)
                self._running[folder] = running
                running.thread.start()
            for running in self._running.values():
                for reason in reasons:
                    if reason != triggers.SCHEDULE and running.worker is not None:
                        running.worker.wake(reason)
            for folder in list(self.invalid):
                if folder not in self.assigned and folder not in self.refused:
                    del self.invalid[folder]

    def _refuse(self, names: Mapping[str, str | None]) -> None:
        """Refuse the folders that share a cluster name (``names``: folder -> its name)."""
        shared = sharing(names)
        refused = {}
        for folder, others in shared.items():
            refused[folder] = shared_name_why(str(names[folder]), others)
        with self._lock:
            for folder in set(self.refused) - set(refused):
                self.invalid.pop(folder, None)
            self.refused = refused
        for folder, why in sorted(refused.items()):
            self._invalid(folder, why)

    def _invalid(self, folder: str, why: str) -> None:
        if self.invalid.get(folder) != why:
            log.error("cluster folder %s stalls, the others go on: %s", folder, why)
        self.invalid[folder] = why

    def _shutdown(self) -> None:
        with self._lock:
            running = list(self._running.values()) + self._leaving
            self._running.clear()
        for r in running:
            r.stop()
        for r in running:
            r.thread.join()
        if self.membership is not None:
            self.membership.leave()

    def workers(self) -> Mapping[str, Worker]:
        """The workers of the folders this instance serves now, by folder."""
        with self._lock:
            return {f: r.worker for f, r in self._running.items() if r.worker is not None}

    def report(self) -> dict[str, object]:
        """/status: this instance, its group, the folders assigned to it and what each does.

        A folder let go whose round in flight is still settling keeps its lease until then:
        it is listed (``leaving``), and in ``held`` while its lease is, so ``held`` is every
        cluster whose lease this instance holds."""
        with self._lock:
            serving = {f: r.worker for f, r in self._running.items() if r.worker is not None}
            leaving = {
                r.folder: r.worker
                for r in self._leaving
                if r.worker is not None and r.thread.is_alive()
            }
        clusters = {folder: w.report() for folder, w in serving.items()}
        for folder, worker in leaving.items():
            clusters.setdefault(folder, {**worker.report(), "leaving": True})
        return {
            "instance": self.me,
            "members": sorted(self.members),
            "folders": list(self.folders),
            "assigned": sorted(self.assigned),
            "held": sorted(f for f, r in clusters.items() if r.get("held")),
            "clusters": dict(sorted(clusters.items())),
            "invalid": dict(sorted(self.invalid.items())),
            "problem": self.problem,
        }
