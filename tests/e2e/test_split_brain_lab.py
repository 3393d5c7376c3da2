"""No VM runs twice because a fence lied, on a real lab, judged from libvirt by UUID.

A host whose libvirtd hangs (SIGSTOP) while its guests keep running looks dead. Its fence is a
lab agent that exits 0 without switching anything off. With an honest status action the fence
is not believed: nothing is restarted, and when the host answers again no VM has ever run on
two hosts (polled every 200 ms: libvirt on the hosts that answer, the QEMU processes of the
frozen one). With a status action that lies too, the VMs are restarted while their first
copies still run; once the host answers, the duplicates are reported within two rounds
(status, metric, /healthz) and none of them is moved.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest

from reconciler.adapters.lab import Lab, processes
from reconciler.adapters.lab.faults import freeze_host, thaw_host
from tests.e2e.test_recovery_lab import busiest, configure, healthz, running_elsewhere, wait
from tests.e2e.test_run_lab import metric, start, stop
from tests.net import free_port

pytestmark = [pytest.mark.lab, pytest.mark.long]

NOT_LIVE_PAUSES = {
    libvirt.VIR_DOMAIN_PAUSED_MIGRATION,
    libvirt.VIR_DOMAIN_PAUSED_STARTING_UP,
    libvirt.VIR_DOMAIN_PAUSED_POSTCOPY,
    libvirt.VIR_DOMAIN_PAUSED_POSTCOPY_FAILED,
}
"""A half of a live migration: paused by libvirt until (or since) the guest switched over."""

AGENT = """\
import os, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
host, action = args.get("plug", ""), args.get("action", "")
if action == "status":
    if "--status-lies" in sys.argv:
        print("Status: OFF")
        sys.exit(2)
    try:
        pid = int(open(os.path.join(HOSTS[host], "libvirtd.pid")).read().split()[0])
        os.kill(pid, 0)  # a frozen daemon is alive: the machine is on
    except (OSError, ValueError, KeyError):
        print("Status: OFF")
        sys.exit(2)
    print("Status: ON")
    sys.exit(0)
print("Success: Powered OFF")  # a lie: nothing was switched off
"""


def lying_fence(lab: Lab, folder: Path, *, status_lies: bool) -> list[str]:
    """The argv of a lab fence agent that never fences; its status action tells the truth
    (the host's libvirtd is alive: on) unless ``status_lies``."""
    agent = folder / "fence_lab.py"
    hosts = {h.name: str(h.path) for h in lab.hosts}
    agent.write_text(f"HOSTS = {hosts!r}\n" + AGENT)
    argv = [sys.executable, str(agent), "--plug={host}", "--action=off"]
    return [*argv, "--status-lies"] if status_lies else argv


class Watch:
    """Which VMs (by UUID) run on more than one host, every 200 ms, from libvirt; a frozen
    host's VMs are those it ran when frozen whose QEMU still runs."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.frozen: dict[str, dict[str, Path]] = {}
        self.twice: dict[str, set[str]] = {}
        self.polls = 0
        self.lock = threading.Lock()
        self.polling = threading.Lock()
        """Held through each poll, and by a freeze or a thaw."""
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def freeze(self, host: str) -> None:
        """Read ``host``'s running VMs, then freeze its daemon."""
        h = self.lab.host(host)
        conn = libvirt.open(h.uri)
        try:
            pids = {
                d.UUIDString(): Path(h.path) / "run" / "qemu" / f"{d.name()}.pid"
                for d in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
            }
        finally:
            conn.close()
        with self.polling:  # no poll is asking the host when it stops answering
            self.frozen[host] = pids
            freeze_host(Path(self.lab.dir), host)

    def thaw(self, host: str) -> None:
        with self.polling:
            thaw_host(Path(self.lab.dir), host)
            del self.frozen[host]

    def _look(self) -> dict[str, set[str]]:
        frozen = self.frozen
        seen: dict[str, set[str]] = {}
        for host in self.lab.hosts:
            if host.name in frozen:
                for uuid, pidfile in frozen[host.name].items():
                    if processes.ours(processes.read_pid(pidfile), "qemu"):
                        seen.setdefault(uuid, set()).add(host.name)
                continue
            conn = libvirt.open(host.uri)
            try:
                for dom in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
                    try:
                        state, reason = dom.state()
                        uuid = dom.UUIDString()
                    except libvirt.libvirtError:
                        continue  # gone between the listing and the reading
                    if state == libvirt.VIR_DOMAIN_PAUSED and reason in NOT_LIVE_PAUSES:
                        continue
                    if state in (libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_CRASHED):
                        continue
                    seen.setdefault(uuid, set()).add(host.name)
            finally:
                conn.close()
        return seen

    def _run(self) -> None:
        while not self.done.is_set():
            with self.polling:
                found = self._look()
            for uuid, hosts in found.items():
                if len(hosts) > 1:
                    with self.lock:
                        self.twice.setdefault(uuid, set()).update(hosts)
            self.polls += 1
            self.done.wait(0.2)

    def __enter__(self) -> Watch:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join(30)


@pytest.fixture
def watched(own_lab: Lab) -> Iterator[Watch]:
    with Watch(own_lab) as w:
        yield w
        for host in list(w.frozen):
            w.thaw(host)


def uuids(lab: Lab, host: str) -> dict[str, str]:
    conn = libvirt.open(lab.host(host).uri)
    try:
        return {
            d.UUIDString(): d.name()
            for d in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
        }
    finally:
        conn.close()


def rounds(port: int) -> float:
    return metric(port, "reconciler_reconciles_total") or 0


def test_a_lying_fence_with_an_honest_status_action_restarts_nothing(
    own_lab: Lab, watched: Watch, tmp_path: Path
) -> None:
    configure(own_lab, lying_fence(own_lab, tmp_path, status_lies=False))
    state, port, log = tmp_path / "state", free_port(), tmp_path / "run.log"
    proc = start(own_lab.cluster_dir, state, port, log)
    try:
        wait(lambda: rounds(port) >= 2, 60, "two rounds")
        hung, vms = busiest(own_lab)
        assert vms
        watched.freeze(hung)  # it looks dead; its guests keep running
        wait(
            lambda: (metric(port, "reconciler_fence_total", 'result="unconfirmed"') or 0) >= 1,
            90,
            "a fence that is not confirmed",
        )
        wait(lambda: healthz(port)[0] == 503, 30, "/healthz to turn 503")
        code, body = healthz(port)
        assert code == 503
        assert "its status action says on (Status: ON)" in str(body.get("message"))
        watched.thaw(hung)  # it answers again, after the "fence"
        after = rounds(port)
        wait(lambda: rounds(port) >= after + 3, 90, "three rounds after the thaw")
        for vm in vms:
            assert running_elsewhere(own_lab, vm, hung) == [], f"{vm} was restarted"
        assert sorted(uuids(own_lab, hung).values()) == vms
        assert watched.polls > 100  # every 200 ms, through the freeze and after the thaw
        assert watched.thread.is_alive()
        assert watched.twice == {}, f"VMs ran on two hosts: {watched.twice}"
        text = log.read_text()
        assert f"host {hung} answers again; it was never confirmed fenced" in text
        assert re.search(r"restarted \S+ of fenced host", text) is None
    finally:
        stop(proc)
        print(log.read_text()[-3000:])


def test_a_fence_whose_status_action_lies_too_is_found_as_duplicates_within_two_rounds(
    own_lab: Lab, watched: Watch, tmp_path: Path
) -> None:
    configure(own_lab, lying_fence(own_lab, tmp_path, status_lies=True))
    state, port, log = tmp_path / "state", free_port(), tmp_path / "run.log"
    proc = start(own_lab.cluster_dir, state, port, log)
    try:
        wait(lambda: rounds(port) >= 2, 60, "two rounds")
        hung, vms = busiest(own_lab)
        first = uuids(own_lab, hung)
        watched.freeze(hung)
        wait(
            lambda: all(running_elsewhere(own_lab, vm, hung) for vm in vms),
            120,
            f"{vms} restarted elsewhere",
        )
        # the lie made every VM of the host run twice (the watch sees it at its next poll)
        wait(lambda: set(watched.twice) == set(first), 5, "the watch to see the VMs twice")
        where = {vm: running_elsewhere(own_lab, vm, hung) for vm in vms}
        before = rounds(port)
        watched.thaw(hung)
        wait(
            lambda: (metric(port, "reconciler_duplicate_vms", 'kind="running"') or 0) >= len(vms),
            120,
            "the duplicates counted",
        )
        assert rounds(port) <= before + 2, "not reported within two rounds"
        wait(lambda: healthz(port)[0] == 503, 10, "/healthz to turn 503")
        code, body = healthz(port)
        assert (code, body.get("reason")) == (503, "Duplicated")
        for vm in vms:
            assert vm in str(body.get("message"))
        status = json.loads((state / "lab" / "status.json").read_text())
        duplicated = next(c for c in status["conditions"] if c["type"] == "Duplicated")
        assert duplicated["status"] is True
        assert sorted(d["uuid"] for d in status["duplicates"]) == sorted(first)
        # no move of them: two more rounds leave every copy where it was
        now = rounds(port)
        wait(lambda: rounds(port) >= now + 2, 60, "two more rounds")
        for vm in vms:
            assert running_elsewhere(own_lab, vm, hung) == where[vm], vm
        assert sorted(uuids(own_lab, hung).values()) == vms
    finally:
        stop(proc)
        print(log.read_text()[-3000:])
