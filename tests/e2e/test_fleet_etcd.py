"""Three ``run`` instances sharing one repository of clusters through a real etcd.

One bare repository (file://) of test-driver clusters, one etcd (Debian's ``etcd-server``, as in
``tests/adapters/test_lease_tooz.py``), three instance processes with short leases. Who holds a
cluster is read from etcd's lease keys and from each instance's ``/status``; that a cluster
was reconciled, from the status files the rounds write.

- every cluster is held by exactly one instance, and the holder in etcd is the instance whose
  ``/status`` says it holds it; every cluster is reconciled at least once per two intervals;
- SIGKILL one instance: its clusters are held again, by the survivors only, within twice the
  lease time of its etcd leases expiring;
- SIGSTOP etcd: within the renew deadline no instance claims any cluster (it can no longer
  prove it holds one), and after SIGCONT every cluster is held by one instance again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.adapters.test_lease_tooz import ETCD, Etcd
from tests.fleets import write_fleet
from tests.gitrepos import state_remote
from tests.net import free_port
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
CLUSTERS = int(os.environ.get("RECONCILER_FLEET_CLUSTERS", "15"))
HOSTS = int(os.environ.get("RECONCILER_FLEET_HOSTS", "4"))
"""The suite's size; the full proof (30 clusters of 20 hosts, etcd stopped for 30 s) is
``RECONCILER_FLEET_CLUSTERS=30 RECONCILER_FLEET_HOSTS=20 RECONCILER_FLEET_PAUSE=30``, with
``RECONCILER_FLEET_INTERVAL=10``: rounds of 20 hosts, ten clusters an instance, on two cores."""
INTERVAL = float(os.environ.get("RECONCILER_FLEET_INTERVAL", "3"))
"""Seconds between two rounds of a cluster (spec.interval)."""
SLACK = 2.0
"""How much later than two intervals a round may be seen: the interval's 10% jitter, the
status file read by a poll, a busy machine."""
LEASE = 6.0
"""--lease-duration: renewed every ~0.8 s, given up 4 s after the last renewal."""
RENEW_DEADLINE = LEASE * 10 / 15
PAUSE = float(os.environ.get("RECONCILER_FLEET_PAUSE", "0"))
"""Seconds etcd stays stopped in all, at least until the claims are dropped and a lease more."""

pytestmark = pytest.mark.skipif(ETCD is None, reason="no etcd binary (apt-get install etcd-server)")


class Member:
    def __init__(self, name: str, url: str, etcd: str, tmp: Path) -> None:
        self.name = name
        self.port = free_port()
        self.state = tmp / f"state-{name}"
        self.log = (tmp / f"{name}.log").open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reconciler",
                "run",
                "--repo",
                url,
                "--cache-dir",
                str(tmp / f"cache-{name}"),
                "--state-dir",
                str(self.state),
                "--coordination",
                etcd,
                "--identity",
                name,
                "--lease-duration",
                str(LEASE),
                "--poll",
                "2",
                "--listen",
                f"127.0.0.1:{self.port}",
                "--log-format",
                "json",
            ],
            stderr=self.log,
            stdout=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(REPO), "RECONCILER_LOCK_DIR": str(tmp)},
        )

    def status(self) -> dict[str, object] | None:
        try:
            r = httpx.get(f"http://127.0.0.1:{self.port}/status", timeout=2)
        except httpx.TransportError:
            return None
        return r.json() if r.status_code == 200 else None

    def held(self) -> set[str]:
        got = self.status()
        held = got.get("held") if got else None
        return set(held) if isinstance(held, list) else set()

    def rounds(self, cluster: str) -> int:
        try:
            return int(json.loads((self.state / cluster / "status.json").read_text())["rounds"])
        except (OSError, ValueError, KeyError):
            return 0

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    server = Etcd(tmp_path / "etcd")
    try:
        yield server
    finally:
        server.close()


def holders(etcd: Etcd) -> dict[str, str]:
    """Each cluster's holder as etcd's lease keys say (``reconciler/lease/<cluster>``)."""
    from etcd3gw.client import Etcd3Client

    client = Etcd3Client(port=etcd.client_port, timeout=2, api_path="/v3/")
    out = {}
    for value, meta in client.get_prefix("reconciler/lease/"):
        key = meta["key"].decode() if isinstance(meta["key"], bytes) else meta["key"]
        out[key.rsplit("/", 1)[-1]] = json.loads(value)["holder"]
    return out


def test_three_instances_share_the_clusters_and_survive_a_death_and_an_etcd_pause(
    tmp_path: Path, etcd: Etcd
) -> None:
    pytest.importorskip("libvirt")
    fleet = tmp_path / "fleet"
    names = write_fleet(fleet, tmp_path / "nodes", CLUSTERS, hosts=HOSTS, interval=f"{INTERVAL:g}s")
    url, _ = state_remote(tmp_path, fleet)  # the clusters under cluster-state/ on main
    members = [Member(n, url, etcd.url, tmp_path) for n in ("a", "b", "c")]
    try:
        # every cluster held, by one instance each; etcd and /status agree on who
        def settled(alive: list[Member]) -> bool:
            held = [m.held() for m in alive]
            in_etcd = holders(etcd)
            return (
                sorted(c for h in held for c in h) == names
                and set(in_etcd) == set(names)
                and all(in_etcd[c] == m.name for m, h in zip(alive, held, strict=True) for c in h)
            )

        # settled can hold for a moment before the last instance to start has joined (the
        # others then hold everything): wait for the ring of all three, not for the first
        # state where every cluster has a holder
        wait_for(lambda: settled(members) and all(m.held() for m in members), timeout=60)
        shares = {m.name: m.held() for m in members}
        assert all(shares.values()), f"an instance got no cluster: {shares}"

        # at every look: no cluster claimed by two instances, none held in etcd by another;
        # and every cluster reconciled at least once per two intervals
        last_round = {c: (sum(m.rounds(c) for m in members), time.monotonic()) for c in names}
        longest = 0.0
        watch_until = time.monotonic() + 4 * INTERVAL
        while time.monotonic() < watch_until:
            held = [m.held() for m in members]
            in_etcd = holders(etcd)
            for i, h in enumerate(held):
                for other in held[i + 1 :]:
                    assert not (h & other), f"claimed twice: {h & other}"
                for c in h:
                    assert in_etcd.get(c) in (members[i].name, None), (c, in_etcd.get(c))
            now = time.monotonic()
            for c in names:
                count = sum(m.rounds(c) for m in members)
                if count > last_round[c][0]:
                    longest = max(longest, now - last_round[c][1])
                    last_round[c] = (count, now)
            time.sleep(0.2)
        longest = max([longest, *(time.monotonic() - t for _, t in last_round.values())])
        assert longest <= 2 * INTERVAL + SLACK, f"a cluster waited {longest:.1f} s for a round"

        # SIGKILL one: its clusters held again by the survivors only, within twice the lease
        dead, survivors = members[0], members[1:]
        orphaned = shares[dead.name]
        dead.proc.send_signal(signal.SIGKILL)
        dead.proc.wait()
        killed = time.monotonic()
        took = wait_for(lambda: settled(survivors), timeout=60)
        assert took <= 2 * LEASE, f"the dead instance's clusters were held again after {took:.1f} s"
        in_etcd = holders(etcd)
        assert {in_etcd[c] for c in orphaned} <= {m.name for m in survivors}
        assert time.monotonic() - killed < 60

        # SIGSTOP etcd: no instance can prove it holds a cluster, so none claims one
        etcd.pause()
        try:
            paused = time.monotonic()
            wait_for(lambda: all(not m.held() for m in survivors), timeout=RENEW_DEADLINE + 10)
            dropped = time.monotonic() - paused
            assert dropped <= RENEW_DEADLINE + 3.0, f"still claimed {dropped:.1f} s after"
            # the leases expire in etcd's time meanwhile, paused or not
            while time.monotonic() < max(paused + dropped + LEASE, paused + PAUSE):
                assert all(not m.held() for m in survivors)
                time.sleep(0.5)
            assert all(not m.held() for m in survivors)
        finally:
            etcd.resume()
        wait_for(lambda: settled(survivors), timeout=60)
        for m in survivors:
            m.proc.send_signal(signal.SIGTERM)
        for m in survivors:
            assert m.proc.wait(30) == 0
        assert holders(etcd) == {}  # released on the way out
    finally:
        for m in members:
            m.close()


GATED = (
    "import pathlib, sys, time\n"
    "marks, cluster, gate = sys.argv[1:4]\n"
    "with open(marks, 'a') as out:\n"
    "    out.write(cluster + ' start\\n')\n"
    "deadline = time.monotonic() + 60\n"
    "while not pathlib.Path(gate).exists() and time.monotonic() < deadline:\n"
    "    time.sleep(0.1)\n"
)
"""A rollout command that waits until the test opens its gate: a round in flight for as long
as the test needs one."""


def gated_fleet(tmp_path: Path, clusters: int) -> tuple[list[str], Path, Path]:
    """``clusters`` clusters of two empty test-driver hosts, mode apply, each with a rollout
    whose command waits for the gate; (their names, the marks file, the gate file)."""
    fleet, marks, gate = tmp_path / "fleet", tmp_path / "marks", tmp_path / "gate"
    names = write_fleet(fleet, tmp_path / "nodes", clusters, hosts=2, vms_per_host=0)
    for name in names:
        (fleet / name / "policy.yaml").write_text(
            "apiVersion: placement/v1alpha1\nkind: BalancePolicy\nmetadata: {name: p}\n"
            "spec: {mode: apply, interval: 1h, threshold: 100, basis: allocated}\n"
        )
        argv = [sys.executable, "-c", GATED, str(marks), name, str(gate)]
        (fleet / name / "rollouts").mkdir()
        (fleet / name / "rollouts" / "hold.yaml").write_text(
            "apiVersion: placement/v1alpha1\nkind: Rollout\nmetadata: {name: hold}\nspec:\n"
            "  hosts: [node-000, node-001]\n"
            "  eachHost:\n"
            f"    commands: [{{name: wait, argv: {json.dumps(argv)}, timeout: 90s, "
            "safeToRepeat: true}]\n"
        )
    return names, marks, gate


def test_status_lists_a_cluster_held_while_its_round_in_flight_settles(
    tmp_path: Path, etcd: Etcd
) -> None:
    """A cluster that moves to a new instance stays in the old one's ``held`` for as long as
    etcd says the old one holds it: until its round in flight has settled and the lease is
    released."""
    pytest.importorskip("libvirt")
    names, marks, gate = gated_fleet(tmp_path, 4)
    url, _ = state_remote(tmp_path, tmp_path / "fleet")
    a = Member("a", url, etcd.url, tmp_path)
    members = [a]
    try:
        # a alone: every cluster's round in flight, waiting in its rollout's command
        wait_for(lambda: a.held() == set(names), timeout=60)
        wait_for(
            lambda: marks.exists() and len(marks.read_text().splitlines()) == len(names),
            timeout=60,
        )
        b = Member("b", url, etcd.url, tmp_path)
        members.append(b)

        def assigned(m: Member) -> set[str]:
            got = m.status()
            value = got.get("assigned") if got else None
            return set(value) if isinstance(value, list) else set(names)

        wait_for(lambda: assigned(a) != set(names), timeout=60)
        moved = set(names) - assigned(a)
        assert moved, "the ring gave b none of the clusters"
        # while a's rounds wait: etcd says a holds every cluster, and a's /status says so
        looks = 0
        until = time.monotonic() + 3
        while time.monotonic() < until:
            before = holders(etcd)
            held = a.held()
            after = holders(etcd)
            for c in names:
                if before.get(c) == after.get(c) == "a":
                    assert c in held, f"{c} held by a in etcd, not in a's /status: {held}"
                if c in held:
                    assert before.get(c) in ("a", None), c
                    assert after.get(c) in ("a", None), c
            assert not (b.held() & moved)
            looks += 1
            time.sleep(0.1)
        assert looks > 5
        # the gate opens: a's rounds settle, a lets the moved clusters go, b takes them
        gate.touch()
        wait_for(lambda: b.held() == moved and a.held() == set(names) - moved, timeout=60)
        in_etcd = holders(etcd)
        assert {c: in_etcd.get(c) for c in moved} == dict.fromkeys(moved, "b")
        for m in members:
            m.proc.send_signal(signal.SIGTERM)
        for m in members:
            assert m.proc.wait(30) == 0
    finally:
        gate.touch()
        for m in members:
            m.close()


def test_a_second_instance_with_a_live_members_identity_is_warned_about_at_start(
    tmp_path: Path, etcd: Etcd
) -> None:
    pytest.importorskip("libvirt")
    fleet = tmp_path / "fleet"
    write_fleet(fleet, tmp_path / "nodes", 2, hosts=1)
    url, _ = state_remote(tmp_path, fleet)
    first = Member("a", url, etcd.url, tmp_path)
    (tmp_path / "second").mkdir()
    members = [first]
    try:
        wait_for(lambda: first.held(), timeout=60)
        second = Member("a", url, etcd.url, tmp_path / "second")
        members.append(second)
        logs = tmp_path / "second" / "a.log"

        def warned() -> list[dict[str, object]]:
            lines = [json.loads(x) for x in logs.read_text().splitlines() if x.startswith("{")]
            return [x for x in lines if "identity 'a'" in str(x.get("message"))]

        wait_for(warned, timeout=30)
        (warning,) = warned()
        assert warning["level"] == "warning"
        message = str(warning["message"])
        assert "is already a live member of the fleet's group" in message
        assert f"pid {first.proc.pid}" in message
        assert "give each instance its own --identity" in message
        # the first, alone when it started, was not warned
        assert "already a live member" not in (tmp_path / "a.log").read_text()
    finally:
        for m in members:
            m.close()
