"""The etcd lease through tooz against a real etcd on loopback: taken, refused, released, lost.

Each test starts its own etcd (Debian's ``etcd-server``) on free ports with a fresh data
directory, so a system etcd on 2379, if any, plays no part. etcd is killed and paused
(SIGSTOP) mid-term: every call gives up within its timeout, and a LeaseKeeper driving the
lease drops ``held`` by the renew deadline.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from etcd3gw.client import Etcd3Client
from etcd3gw.lease import Lease as EtcdLease

from reconciler.adapters.etcd.lease import ToozLease, lease_key
from reconciler.adapters.lab import processes
from reconciler.engine.leadership import LeaseKeeper
from reconciler.engine.triggers import Wakeup
from reconciler.errors import TerminalError, TransientError

REPO = Path(__file__).resolve().parents[2]
ETCD = shutil.which("etcd") or ("/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)

pytestmark = pytest.mark.skipif(
    ETCD is None, reason="no etcd binary (Debian: apt-get install etcd-server; `make setup` does)"
)

SLACK = 1.5
"""How much later than its timeout a call may come back on a busy machine."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _member_name(client_url: str) -> str | None:
    """The name of the one healthy member answering at ``client_url``; None while none does."""
    try:
        with urllib.request.urlopen(f"{client_url}/health", timeout=1) as answer:
            if b'"true"' not in answer.read():
                return None
        request = urllib.request.Request(
            f"{client_url}/v3/cluster/member/list", data=b"{}", method="POST"
        )
        with urllib.request.urlopen(request, timeout=1) as answer:
            members = json.loads(answer.read()).get("members", [])
    except (OSError, ValueError):
        return None
    return str(members[0].get("name")) if len(members) == 1 else None


class Etcd:
    """One etcd member on loopback, its data in ``data``."""

    def __init__(self, data: Path) -> None:
        assert ETCD is not None
        self.log = (data.parent / "etcd.log").open("w")
        # A free port may be taken by another process (a second test run beside this one)
        # before etcd binds it: then that process's server would answer the health check.
        # So the member is named uniquely and must be found by its name; else new ports.
        for _ in range(5):
            if self._start(data):
                return
        self.log.close()
        raise RuntimeError(f"etcd did not start: see {self.log.name}")

    def _start(self, data: Path) -> bool:
        assert ETCD is not None
        self.client_port, peer = _free_port(), _free_port()
        self.url = f"etcd3+http://127.0.0.1:{self.client_port}"
        client_url = f"http://127.0.0.1:{self.client_port}"
        peer_url = f"http://127.0.0.1:{peer}"
        name = f"test-{uuid.uuid4().hex[:12]}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD_")}
        self.proc = subprocess.Popen(
            [
                ETCD,
                f"--name={name}",
                f"--data-dir={data}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster={name}={peer_url}",
                "--logger=zap",
                "--log-level=error",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is None and _member_name(client_url) == name:
                return True
            if self.proc.poll() is not None or time.monotonic() > deadline:
                if self.proc.poll() is None:
                    self.proc.kill()
                self.proc.wait(10)
                shutil.rmtree(data, ignore_errors=True)
                return False
            time.sleep(0.1)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP etcd and return once every thread of it has stopped, so nothing answers."""
        assert processes.freeze(self.proc.pid), "etcd did not stop within 5 s"

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.resume()
            self.kill()
        self.log.close()


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    server = Etcd(tmp_path / "etcd")
    try:
        yield server
    finally:
        server.close()


MakeLease = Callable[..., ToozLease]


@pytest.fixture
def make_lease(etcd: Etcd) -> Iterator[MakeLease]:
    made: list[ToozLease] = []

    def make(identity: str, **kwargs: float) -> ToozLease:
        kwargs = {"lease_duration": 4.0, "renew_deadline": 3.0, "timeout": 1.0, **kwargs}
        lease = ToozLease(etcd.url, "lab", identity=identity, **kwargs)
        made.append(lease)
        return lease

    yield make
    for lease in made:
        lease.close()


def _timed(call: Callable[[], object]) -> tuple[object, float]:
    """What ``call`` returned, or the TransientError it raised, and how long it took."""
    start = time.monotonic()
    try:
        result: object = call()
    except TransientError as err:
        result = err
    return result, time.monotonic() - start


def test_the_lease_is_taken_refused_named_and_released_to_a_standby_at_once(
    make_lease: MakeLease,
) -> None:
    active, standby = make_lease("host-a"), make_lease("host-b")
    assert standby.holder() is None
    assert active.acquire()
    assert active.confirm()
    assert not standby.acquire()
    assert not standby.confirm()
    assert (standby.holder() or "").startswith("host-a (since ")
    assert active.acquire()  # renewed
    assert active.confirm()

    active.release()
    taken, took = _timed(standby.acquire)
    assert taken is True  # one try, well inside the 4 s lease: the release freed it
    assert took < 1.0 + SLACK
    assert standby.confirm()
    assert not active.confirm()
    assert not active.acquire()
    assert (active.holder() or "").startswith("host-b ")


def test_the_lease_survives_renewals_beyond_its_duration_and_keeps_its_holder(
    make_lease: MakeLease,
) -> None:
    active, standby = make_lease("host-a"), make_lease("host-b")
    assert active.acquire()
    for _ in range(6):  # 6 s of renewals, a lease of 4 s
        time.sleep(1)
        assert active.acquire()
        assert not standby.acquire()
    assert active.confirm()


HOLDER = """
import sys, time
from etcd3gw.client import Etcd3Client
from etcd3gw.lease import Lease as EtcdLease

from reconciler.adapters.etcd.lease import ToozLease, lease_key
from reconciler.adapters.lab import processes
lease = ToozLease(sys.argv[1], "lab", identity="doomed", lease_duration=4, renew_deadline=3)
asked = time.monotonic()
assert lease.acquire()
print("held", asked, time.monotonic(), flush=True)
time.sleep(60)
"""


def test_a_holder_that_dies_without_releasing_is_taken_over_after_the_lease_duration(
    etcd: Etcd, make_lease: MakeLease
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, etcd.url],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert proc.stdout is not None
        word, asked, had = proc.stdout.readline().split()
        assert word == "held"
        # the monotonic clock is the machine's: the lease's 4 s count from the holder's grant,
        # between ``asked`` and ``had``, whatever this process was doing meanwhile
        standby = make_lease("host-b")
        assert not standby.acquire()
        proc.kill()
        proc.wait(10)
        assert not standby.acquire()
        assert (standby.holder() or "").startswith("doomed ")
        while not standby.acquire():
            assert time.monotonic() - float(had) < 4 + 3, "not taken over after the lease lapsed"
            time.sleep(0.2)
        # etcd kept the dead holder's lease until its time-to-live ran out
        assert time.monotonic() - float(asked) >= 4
        assert standby.confirm()
        assert (standby.holder() or "").startswith("host-b ")
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_a_lease_whose_time_to_live_lapsed_is_not_still_ours(make_lease: MakeLease) -> None:
    active, standby = make_lease("host-a"), make_lease("host-b")
    asked = time.monotonic()
    assert active.acquire()
    time.sleep(3.2)  # past the renew deadline, not yet past etcd's 4 s
    assert not active.confirm()  # our own clock says stop, whatever etcd still says
    # etcd lets the lease lapse 4 s after the grant and deletes the key (its own timing)
    while not standby.acquire():
        assert time.monotonic() - asked < 4 + 10, "etcd did not let the lease lapse"
        time.sleep(0.2)
    assert not active.confirm()
    assert not active.acquire()  # its keep-alive finds the lease gone; the key is another's
    assert (active.holder() or "").startswith("host-b ")


def test_a_lease_revoked_behind_our_back_fails_confirm_and_is_taken_anew(
    etcd: Etcd, make_lease: MakeLease
) -> None:
    active = make_lease("host-a")
    assert active.acquire()
    admin = Etcd3Client(port=etcd.client_port, host="127.0.0.1", api_path="/v3/", timeout=2)
    try:  # as `etcdctl lease revoke` would
        [(_, meta)] = admin.get(lease_key("lab"), metadata=True)
        EtcdLease(int(meta["lease"]), admin).revoke()
    finally:
        admin.session.close()
    assert not active.confirm()
    assert active.acquire()  # free again: taken with a new etcd lease
    assert active.confirm()


@pytest.mark.parametrize("call", ["acquire", "confirm", "holder"])
def test_a_dead_etcd_fails_every_call_quickly(etcd: Etcd, make_lease: MakeLease, call: str) -> None:
    active = make_lease("host-a", timeout=2.0)
    assert active.acquire()
    etcd.kill()
    result, took = _timed(getattr(active, call))
    assert isinstance(result, TransientError), result
    assert "unreachable" in str(result)
    assert took < 2.0 + SLACK
    standby = make_lease("host-b", timeout=2.0)
    result, took = _timed(standby.acquire)
    assert isinstance(result, TransientError)
    assert took < 2.0 + SLACK


@pytest.mark.parametrize("call", ["acquire", "confirm", "holder", "standby"])
def test_a_paused_etcd_fails_every_call_within_its_timeout_then_recovers(
    etcd: Etcd, make_lease: MakeLease, call: str
) -> None:
    active = make_lease("host-a", lease_duration=15.0, renew_deadline=10.0, timeout=2.0)
    standby = make_lease("host-b", lease_duration=15.0, renew_deadline=10.0, timeout=2.0)
    assert active.acquire()
    etcd.pause()
    try:
        target = standby.acquire if call == "standby" else getattr(active, call)
        result, took = _timed(target)
        assert isinstance(result, TransientError), result
        assert "no answer within 2.0s" in str(result)
        assert 1.5 < took < 2.0 + SLACK  # it did wait for etcd, and no longer than its timeout
    finally:
        etcd.resume()
    assert active.acquire()
    assert active.confirm()
    assert not standby.acquire()


def test_calls_from_two_threads_share_one_timeout_each(etcd: Etcd, make_lease: MakeLease) -> None:
    active = make_lease("host-a", lease_duration=15.0, renew_deadline=10.0, timeout=2.0)
    assert active.acquire()
    etcd.pause()
    results: list[tuple[object, float]] = []
    try:
        other = threading.Thread(target=lambda: results.append(_timed(active.acquire)))
        other.start()
        time.sleep(0.5)
        results.append(_timed(active.confirm))  # waits behind acquire, not after it
        other.join()
    finally:
        etcd.resume()
    assert len(results) == 2
    for result, took in results:
        assert isinstance(result, TransientError)
        assert took < 2.0 + SLACK


def test_keeper_drops_the_hold_by_the_renew_deadline_when_etcd_is_paused(
    etcd: Etcd, make_lease: MakeLease
) -> None:
    """The defaults (15 s lease, 10 s renew deadline, 2 s retry, 5 s timeout) end to end."""
    lease = make_lease("host-a", lease_duration=15.0, renew_deadline=10.0, timeout=5.0)
    changes: list[tuple[bool, float]] = []
    round_stop = threading.Event()
    keeper = LeaseKeeper(
        lease,
        Wakeup(),
        round_stop,
        retry_period=2.0,
        renew_deadline=10.0,
        on_change=lambda held: changes.append((held, time.monotonic())),
    )
    keeper.start()
    try:
        assert keeper.held
        assert keeper.confirm()
        time.sleep(1.0)
        etcd.pause()
        paused = time.monotonic()
        try:
            confirmed, took = _timed(keeper.confirm)
            assert confirmed is False  # no migration starts without a confirmed hold
            assert took < 5.0 + SLACK
            while keeper.held:
                assert time.monotonic() - paused < 10.0 + SLACK, "still held past the deadline"
                time.sleep(0.05)
            lost = time.monotonic() - paused
            # the keeper names the holder (one more call, up to the timeout) before it stops
            # the round; held, which confirm() checks first, is already False. One call to the
            # paused etcd takes its timeout, or what ``took`` showed it takes on this machine.
            call = max(5.0, took)
            assert round_stop.wait(call + SLACK)
            assert not keeper.confirm()
        finally:
            etcd.resume()
        resumed = time.monotonic()
        while not keeper.held:
            assert time.monotonic() - resumed < 2.0 + call + SLACK, "not held again after resume"
            time.sleep(0.05)
        assert keeper.confirm()
        print(f"held dropped {lost:.2f}s after the pause")  # shown with -s
    finally:
        keeper.stop()
    assert [held for held, _ in changes] == [True, False, True, False]


def test_misconfiguration_is_refused_before_any_call() -> None:
    with pytest.raises(TerminalError, match="unsupported coordination URL"):
        ToozLease("redis://127.0.0.1:6379", "lab")
    with pytest.raises(TerminalError, match="renew deadline"):
        ToozLease("etcd3+http://127.0.0.1:2379", "lab", lease_duration=5, renew_deadline=5)
    with pytest.raises(TerminalError, match="timeout"):
        ToozLease("etcd3+http://127.0.0.1:2379", "lab", timeout=0)
