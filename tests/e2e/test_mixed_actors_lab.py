"""Three actors on one cluster at once, on a real lab, with the hold the cluster declares: a
``run --repo`` and a folder ``apply`` of a clone started together, and ``drain --apply --repo``
from a third shell. Whichever holds the declared lease acts; the others are refused naming it
(or, once it is free, act in their turn). Judged from libvirt (every 200 ms: where each VM runs,
and who its own record says moved it) and from git (the audit commits):

- no VM ever runs on two hosts;
- no two actors move VMs at the same time, and no VM is moved one way by one actor and back by
  another;
- every move in git is its actor's: a move listed by an audit commit was made by the actor of
  that commit, and a move recorded late names the actor that made it.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import libvirt
import pytest

from reconciler.adapters.files.text import rewrite_file
from reconciler.adapters.lab import Lab
from reconciler.adapters.libvirt.domain_metadata import parse_metadata
from tests.adapters.test_lease_tooz import ETCD, Etcd
from tests.e2e.test_apply_cli import assert_settled
from tests.e2e.test_run_lab import metric, mode_apply, settled
from tests.gitrepos import ROOT, git, state_remote
from tests.net import free_port

pytestmark = [pytest.mark.lab, pytest.mark.long]

HOST = subprocess.run(["hostname"], capture_output=True, text=True, check=True).stdout.strip()
MIGRATION_PAUSES = {
    libvirt.VIR_DOMAIN_PAUSED_MIGRATION,
    libvirt.VIR_DOMAIN_PAUSED_STARTING_UP,
    libvirt.VIR_DOMAIN_PAUSED_POSTCOPY,
    libvirt.VIR_DOMAIN_PAUSED_POSTCOPY_FAILED,
}


@dataclass
class Move:
    vm: str
    source: str
    target: str
    by: str | None
    at: float


@dataclass
class Timeline:
    """Where each VM runs, polled every 200 ms, and its moves with who made them."""

    lab: Lab
    where: dict[str, str] = field(default_factory=dict)
    moves: list[Move] = field(default_factory=list)
    twice: dict[str, set[str]] = field(default_factory=dict)
    polls: int = 0
    done: threading.Event = field(default_factory=threading.Event)

    def look(self) -> None:
        live: dict[str, list[tuple[str, str | None]]] = {}
        for host in self.lab.hosts:
            conn = libvirt.open(host.uri)
            try:
                for dom in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
                    try:
                        state, reason = dom.state()
                        if state == libvirt.VIR_DOMAIN_PAUSED and reason in MIGRATION_PAUSES:
                            continue
                        record = parse_metadata(dom.XMLDesc(0)).state
                        live.setdefault(dom.name(), []).append((host.name, record.last_moved_by))
                    except libvirt.libvirtError:
                        continue  # gone between the listing and the reading
            finally:
                conn.close()
        now = time.monotonic()
        for vm, seen in live.items():
            if len(seen) > 1:
                # Hosts are read one after another: a migration that ended between the reading
                # of its source and of its target shows it on both. Read the earlier hosts
                # again: a VM that still runs there ran on both at the target's reading.
                again = [h for h, _ in seen[:-1] if self.runs(h, vm)]
                if again:
                    self.twice.setdefault(vm, set()).update([*again, seen[-1][0]])
                    continue
            on, by = seen[-1]
            before = self.where.get(vm)
            if before is not None and before != on:
                self.moves.append(Move(vm, before, on, by, now))
            else:
                # the mover writes its record once libvirt has moved the VM: a poll in between
                # sees it on its target still naming its previous mover
                last = next((m for m in reversed(self.moves) if m.vm == vm), None)
                if last is not None and last.target == on and by is not None:
                    last.by = by
            self.where[vm] = on
        self.polls += 1

    def runs(self, host: str, vm: str) -> bool:
        """Whether ``vm`` runs on ``host`` now (paused by a migration does not count)."""
        (uri,) = (h.uri for h in self.lab.hosts if h.name == host)
        conn = libvirt.open(uri)
        try:
            dom = conn.lookupByName(vm)
            state, reason = dom.state()
            active = bool(dom.isActive())
        except libvirt.libvirtError:
            return False  # not there any more
        finally:
            conn.close()
        return active and not (state == libvirt.VIR_DOMAIN_PAUSED and reason in MIGRATION_PAUSES)

    def run(self) -> None:
        while not self.done.is_set():
            self.look()
            self.done.wait(0.2)


@pytest.fixture
def timeline(own_lab: Lab) -> Iterator[Timeline]:
    t = Timeline(own_lab)
    t.look()
    thread = threading.Thread(target=t.run, daemon=True)
    thread.start()
    yield t
    t.done.set()
    thread.join(30)


def launch(args: list[str], log: Path, actor: str, **env_vars: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RECONCILER_ACTOR": actor, **env_vars}
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "reconciler", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def audit_moves(person: Path) -> list[tuple[str, str, str, str, str]]:
    """(actor, vm, source, target, detail) of every move the audit commits on main list."""
    git(person, "fetch", "--quiet", "origin")
    out = []
    log = git(person, "log", "--format=%B%x00", "origin/main")
    for message in log.split("\x00"):
        actor = re.search(r"^Reconciler-Actor: (.+)$", message, re.MULTILINE)
        if actor is None:
            continue
        for m in re.finditer(r"^- (\S+): (\S+) -> (\S+) \((\w+)\)(?:: (.*))?$", message, re.M):
            vm, source, target, reason, detail = m.groups()
            out.append((actor[1], vm, source, target, f"{reason}: {detail or ''}"))
    return out


def declare(person: Path, hold: str) -> None:
    folder = person / "cluster-state"
    mode_apply(folder, interval="3s")
    rewrite_file(
        folder / "cluster.yaml", lambda t: t.replace("spec:\n", f"spec:\n  hold: {hold}\n", 1)
    )
    git(person, "add", ".")
    git(person, "commit", "--quiet", "-m", "Apply mode; the cluster declares its hold")
    git(person, "push", "--quiet", "origin", "HEAD:main")


def mixed_actors(lab: Lab, timeline: Timeline, tmp_path: Path, hold: str | None) -> None:
    url, person = state_remote(tmp_path, lab.cluster_dir)
    declare(person, hold or f"{{repository: {url}}}")
    clone = tmp_path / "laptop"
    git(tmp_path, "clone", "--quiet", url, str(clone))
    said = "(cluster.yaml spec.hold)"
    port = free_port()
    logs = {name: tmp_path / f"{name}.log" for name in ("run", "apply", "drain")}
    run = launch(
        ["run", "cluster-state", "--repo", url, "--cache-dir", str(tmp_path / "c1"),
         "--state-dir", str(tmp_path / "s1"), "--listen", f"127.0.0.1:{port}", "--poll", "1"],
        logs["run"], "run-ops",
    )  # fmt: skip
    # the laptop is another machine: a lock directory of its own, only the declared lease is shared
    apply = launch(
        ["apply", str(clone / "cluster-state"), "--yes", "--state-dir", str(tmp_path / "s2")],
        logs["apply"], "laptop-ops", RECONCILER_LOCK_DIR=str(tmp_path / "laptop-locks"),
    )  # fmt: skip
    drained = lab.hosts[0].name  # erp is pinned to the last host, the GPU VMs need the second
    time.sleep(1.0)
    drain = launch(
        ["drain", drained, "cluster-state", "--repo", url, "--apply", "--yes",
         "--cache-dir", str(tmp_path / "c3"), "--state-dir", str(tmp_path / "s3")],
        logs["drain"], "drain-ops",
    )  # fmt: skip
    try:
        codes = {"apply": apply.wait(300), "drain": drain.wait(300)}
        # run carries on until the cluster is drained and settled: three rounds moving nothing
        deadline = time.monotonic() + 300
        quiet, last = 0, len(timeline.moves)
        while quiet < 3:
            assert time.monotonic() < deadline, (
                "run never settled\n" + logs["run"].read_text()[-3000:]
            )
            before = metric(port, "reconciler_reconciles_total") or 0
            while (metric(port, "reconciler_reconciles_total") or 0) < before + 1:
                assert time.monotonic() < deadline, "no round\n" + logs["run"].read_text()[-3000:]
                time.sleep(0.3)
            settled_now = settled(lab) and len(timeline.moves) == last
            quiet = quiet + 1 if settled_now else 0
            last = len(timeline.moves)
    finally:
        for proc in (run, apply, drain):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(60)
        for name, log in logs.items():
            print(f"--- {name}\n{log.read_text()[-2500:]}")
    where = assert_settled(lab)
    texts = {name: log.read_text() for name, log in logs.items()}
    # the actors that were refused said which hold and who has it: the laptop only meets the
    # others at the declared lease, the drain meets run at this machine's lock first
    if codes["apply"] == 1:
        assert re.search(rf"is held by .*, through .* {re.escape(said)}", texts["apply"])
    if codes["drain"] == 1:
        assert re.search(
            rf"is held by .*, through (this machine's lock|.* {re.escape(said)})", texts["drain"]
        )
    assert timeline.polls > 50
    # no VM ever ran on two hosts
    assert timeline.twice == {}, timeline.twice
    # who moved what: each move of the timeline by the actor its record names
    actors = {f"run@{HOST}", f"apply@{HOST}", f"drain@{HOST}"}
    assert timeline.moves, "something moved"
    assert {m.by for m in timeline.moves} <= actors, timeline.moves
    # never two actors at once: each actor's moves form one span, the spans do not overlap
    spans: list[tuple[float, float, str]] = []
    for actor in sorted({m.by for m in timeline.moves if m.by}):
        times = [m.at for m in timeline.moves if m.by == actor]
        spans.append((min(times), max(times), actor))
    spans.sort()
    for (_, end, a), (start, _, b) in itertools.pairwise(spans):
        assert end < start, f"{a} and {b} moved VMs at the same time: {timeline.moves}"
    # no VM moved one way by one actor and back by another
    for m in timeline.moves:
        for later in timeline.moves:
            if later.at > m.at and later.vm == m.vm and later.by != m.by:
                assert (later.source, later.target) != (m.target, m.source), (m, later)
    # every move in git is its actor's
    intents_of = {"run-ops": f"run@{HOST}", "drain-ops": f"drain@{HOST}"}
    moved = {(m.vm, m.source, m.target): m.by for m in timeline.moves}
    recorded = audit_moves(person)
    assert recorded, "the moves are in git"
    for actor, vm, source, target, detail in recorded:
        by = moved.get((vm, source, target))
        assert by is not None, f"{vm}: {source} -> {target} is in git, not seen in libvirt"
        if detail.startswith("RecordedLate"):
            assert f"moved by {by} at " in detail, (vm, detail)
        else:
            assert intents_of.get(actor) == by, (actor, vm, source, target, by)
    assert drained not in where.values(), "the drain happened, by whoever held the cluster"


def test_run_a_folder_apply_and_a_drain_at_once_hold_the_declared_git_lease_in_turn(
    own_lab: Lab, timeline: Timeline, tmp_path: Path
) -> None:
    mixed_actors(own_lab, timeline, tmp_path, None)


@pytest.mark.skipif(ETCD is None, reason="etcd is not installed (Debian package etcd-server)")
def test_the_same_with_a_declared_etcd_lease(
    own_lab: Lab, timeline: Timeline, tmp_path: Path
) -> None:
    etcd = Etcd(tmp_path / "etcd")
    try:
        mixed_actors(own_lab, timeline, tmp_path, f"{{etcd: '{etcd.url}'}}")
    finally:
        etcd.close()
