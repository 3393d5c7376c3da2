"""The fleet on fakes: which workers run as folders and members change, and what stalls alone."""

from __future__ import annotations

import threading

from reconciler.core.assignment import assign
from reconciler.engine.fleet import Fleet
from reconciler.errors import ConfigError, TransientError


class FakeWorker:
    def __init__(self, folder: str) -> None:
        self.cluster = folder
        self.stopped = threading.Event()
        self.woken: list[str] = []

    def run(self) -> None:
        self.stopped.wait(10)

    def stop(self) -> None:
        self.stopped.set()

    def wake(self, reason: str) -> None:
        self.woken.append(reason)

    def report(self) -> dict[str, object]:
        return {"cluster": self.cluster, "held": not self.stopped.is_set()}


class FakeMembers:
    def __init__(self, members: set[str]) -> None:
        self.members = members
        self.down = False
        self.left = False

    def beat(self) -> frozenset[str]:
        if self.down:
            raise TransientError("etcd unreachable")
        return frozenset(self.members)

    def leave(self) -> None:
        self.left = True


def look(fleet: Fleet, reasons: list[str] | None = None) -> None:
    """One look, then until every worker it started is built (each in its own thread)."""
    fleet.look(reasons or [])
    for running in list(fleet._running.values()):
        while running.worker is None and running.thread.is_alive():
            threading.Event().wait(0.005)


def make_fleet(folders: list[str], members: FakeMembers | None, me: str = "a") -> Fleet:
    made: dict[str, FakeWorker] = {}

    def make(folder: str) -> FakeWorker:
        if folder.startswith("broken"):
            raise ConfigError(f"{folder}/cluster.yaml: kind: unknown kind")
        made[folder] = FakeWorker(folder)
        return made[folder]

    fleet = Fleet(me=me, discover=lambda: list(folders), make=make, membership=members)
    if members is not None:
        fleet.look()  # the first look in a group only joins it
    return fleet


def test_alone_it_serves_every_folder_and_a_broken_one_stalls_alone() -> None:
    folders = ["c1", "c2", "broken-1"]
    fleet = make_fleet(folders, None)
    look(fleet)
    assert set(fleet.workers()) == {"c1", "c2"}
    assert list(fleet.invalid) == ["broken-1"]
    report = fleet.report()
    assert report["held"] == ["c1", "c2"]
    folders.remove("c1")
    look(fleet, ["desired-state-changed"])  # a change: the folders are read again
    assert set(fleet.workers()) == {"c2"}
    fleet.stop()


def test_folders_are_read_again_only_when_woken_by_a_change() -> None:
    folders = ["c1"]
    fleet = make_fleet(folders, None)
    look(fleet)
    folders.append("c2")
    look(fleet, ["schedule"])
    assert set(fleet.workers()) == {"c1"}
    look(fleet, ["desired-state-changed"])
    assert set(fleet.workers()) == {"c1", "c2"}
    worker = fleet.workers()["c1"]
    assert isinstance(worker, FakeWorker)
    assert worker.woken == ["desired-state-changed"]
    fleet.stop()


def test_members_share_the_folders_and_a_leaving_member_hands_its_share_over() -> None:
    folders = [f"c{i}" for i in range(20)]
    members = FakeMembers({"a", "b", "c"})
    fleets = {m: make_fleet(folders, members, me=m) for m in ("a", "b", "c")}
    for fleet in fleets.values():
        look(fleet)
    served = [set(f.workers()) for f in fleets.values()]
    assert set().union(*served) == set(folders)
    assert sum(len(s) for s in served) == len(folders)  # each folder tried by one member
    before = {m: set(f.workers()) for m, f in fleets.items()}
    members.members = {"a", "b"}  # c is gone
    for m in ("a", "b"):
        look(fleets[m])
    after = {m: set(fleets[m].workers()) for m in ("a", "b")}
    assert after["a"] | after["b"] == set(folders)
    assert before["a"] <= after["a"]
    assert before["b"] <= after["b"]
    assert dict(assign(folders, {"a", "b"})) == after
    for fleet in fleets.values():
        fleet.stop()


def test_a_member_no_longer_assigned_stops_its_worker_before_anyone_else_starts() -> None:
    members = FakeMembers({"a"})
    fleet = make_fleet(["c1", "c2", "c3", "c4"], members, me="a")
    look(fleet)
    workers = dict(fleet.workers())
    members.members = {"a", "b"}
    look(fleet)
    gone = set(workers) - set(fleet.workers())
    assert gone == set(assign(workers, {"a", "b"})["b"])
    for folder in gone:
        worker = workers[folder]
        assert isinstance(worker, FakeWorker)
        assert worker.stopped.is_set()
    fleet.stop()


def test_unreadable_members_keep_the_last_assignment_and_say_so() -> None:
    members = FakeMembers({"a", "b"})
    fleet = make_fleet([f"c{i}" for i in range(8)], members, me="a")
    look(fleet)
    served = set(fleet.workers())
    members.down = True
    look(fleet)
    assert set(fleet.workers()) == served
    assert fleet.problem is not None
    assert "etcd unreachable" in fleet.problem


def test_run_stops_every_worker_and_leaves_the_group() -> None:
    members = FakeMembers({"a"})
    fleet = make_fleet(["c1", "c2"], members, me="a")
    fleet.every = 0.05
    thread = threading.Thread(target=fleet.run)
    thread.start()
    while len(fleet.workers()) < 2:
        threading.Event().wait(0.01)
    workers = list(fleet.workers().values())
    fleet.stop()
    thread.join(5)
    assert not thread.is_alive()
    assert members.left
    assert all(isinstance(w, FakeWorker) and w.stopped.is_set() for w in workers)
