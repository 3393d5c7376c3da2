"""Leases against the real thing: flock between processes, a lease ref in a bare repo over file://."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconciler.adapters.files.lock import FileLease, lock_path
from reconciler.adapters.git.lease import GitLease

REPO = Path(__file__).resolve().parents[2]

HOLDER = """
import sys, time
from pathlib import Path
from reconciler.adapters.files.lock import FileLease
lease = FileLease(Path(sys.argv[1]))
assert lease.acquire()
print("held", flush=True)
time.sleep(60)
"""


def _spawn_holder(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_file_lease_is_exclusive_between_processes_and_freed_when_the_holder_dies(
    tmp_path: Path,
) -> None:
    path = lock_path(tmp_path, "lab")
    proc = _spawn_holder(path)
    try:
        standby = FileLease(path)
        assert not standby.acquire()
        assert f"run (pid {proc.pid} on " in (standby.holder() or "")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert standby.acquire()  # the kernel dropped the lock with its holder
        assert standby.confirm()
        assert f"pid {os.getpid()}" in (standby.holder() or "")
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_file_lease_excludes_apply_and_apply_excludes_it(tmp_path: Path) -> None:
    path = lock_path(tmp_path, "lab")
    apply = FileLease(path, command="apply")
    assert apply.acquire()
    lease = FileLease(path)
    assert not lease.acquire()
    assert (lease.holder() or "").startswith("apply (pid ")
    apply.release()
    assert lease.acquire()
    assert not FileLease(path, command="apply").acquire()
    lease.release()


def test_file_lease_release_and_reacquire_in_one_process(tmp_path: Path) -> None:
    path = lock_path(tmp_path, "lab")
    a, b = FileLease(path), FileLease(path)
    assert a.acquire()
    assert a.acquire()  # renewing is a no-op
    assert not b.acquire()
    assert b.holder() is not None
    a.release()
    assert not a.confirm()
    assert b.holder() is None
    assert b.acquire()
    b.release()


def test_file_lease_notices_its_file_was_replaced(tmp_path: Path) -> None:
    path = lock_path(tmp_path, "lab")
    a = FileLease(path)
    assert a.acquire()
    path.unlink()
    b = FileLease(path)
    assert b.acquire()  # a new file, a new lock: exactly why the file is never deleted
    assert not a.confirm()
    assert b.confirm()
    a.release()
    b.release()


class Ticks:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def remote(tmp_path: Path) -> str:
    bare = tmp_path / "state.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(bare)], check=True)
    return f"file://{bare}"


def _pair(tmp_path: Path, remote: str, clock: Ticks) -> tuple[GitLease, GitLease]:
    a = GitLease(remote, "lab", tmp_path / "a", identity="a", monotonic=clock)
    b = GitLease(remote, "lab", tmp_path / "b", identity="b", monotonic=clock)
    return a, b


def test_git_lease_standby_takes_over_only_after_a_whole_lease_unrenewed(
    tmp_path: Path, remote: str
) -> None:
    clock = Ticks()
    a, b = _pair(tmp_path, remote, clock)
    assert a.acquire()
    assert not b.acquire()
    assert (b.holder() or "").startswith("a ")
    clock.t += 10
    assert a.acquire()  # renewed
    assert not b.acquire()  # the standby sees the record change: its lease count restarts
    clock.t += 14
    assert not b.acquire()  # 14 s since it saw the renewal: not yet
    assert a.confirm() is False  # 14 s since a renewed: past its renew deadline
    clock.t += 1.5
    assert b.acquire()  # a stopped renewing a whole lease ago
    assert b.confirm()
    assert not a.acquire()  # the old holder sees b and stands by
    assert not a.confirm()


def test_git_lease_release_hands_over_at_once(tmp_path: Path, remote: str) -> None:
    clock = Ticks()
    a, b = _pair(tmp_path, remote, clock)
    assert a.acquire()
    assert not b.acquire()
    a.release()
    assert a.holder() is None
    assert b.acquire()


def test_git_lease_compare_and_swap_lets_only_one_of_two_racers_win(
    tmp_path: Path, remote: str
) -> None:
    clock = Ticks()
    a, b = _pair(tmp_path, remote, clock)
    assert a.acquire()
    a.release()
    # both read the released record; a pushes first, b's push expects the old commit
    sha, _ = b._read()
    assert a.acquire()
    assert b._push(sha, {"holder": "b"}) is None
    assert (b.holder() or "").startswith("a ")


def test_git_lease_renewal_whose_answer_was_lost_continues_the_term(
    tmp_path: Path, remote: str
) -> None:
    clock = Ticks()
    a, b = _pair(tmp_path, remote, clock)
    assert a.acquire()
    held = a._held
    # the remote takes a renewal but its answer never arrives (the push timed out)
    a._sequence += 1
    assert a._push(held, a._record()) is not None
    assert a._held == held
    clock.t += 2
    assert a.acquire()  # not a lease of waiting for its own record
    assert a.confirm()
    assert not b.acquire()


def test_git_lease_confirm_during_its_own_renewal_is_still_held(
    tmp_path: Path, remote: str
) -> None:
    """The keeper renews on its own thread while a round confirms: between the renewal's push
    and its answer, the remote already holds the new record of this term."""
    clock = Ticks()
    a, b = _pair(tmp_path, remote, clock)
    assert a.acquire()
    push = a._push
    during: list[bool] = []

    def push_then_confirm(*args: object, **kw: object) -> str | None:
        new = push(*args, **kw)  # type: ignore[arg-type]
        during.append(a.confirm())  # the renewal is on the remote, not yet taken as held
        return new

    a._push = push_then_confirm  # type: ignore[method-assign]
    clock.t += 2
    assert a.acquire()
    assert during == [True]
    # another holder's record is never taken for ours
    a._push = push  # type: ignore[method-assign]
    assert not b.acquire()  # b sees a's record and starts counting the lease
    clock.t += 20
    assert b.acquire()
    assert not a.confirm()


def test_git_lease_unreachable_remote_is_transient(tmp_path: Path) -> None:
    from reconciler.errors import TransientError

    lease = GitLease(f"file://{tmp_path}/missing.git", "lab", tmp_path / "w", identity="x")
    with pytest.raises(TransientError, match="cannot read the lease"):
        lease.acquire()


GIT_HOLDER = """
import sys, time
from pathlib import Path
from reconciler.adapters.git.lease import GitLease
lease = GitLease(sys.argv[1], "lab", Path(sys.argv[2]), identity="killed",
                 lease_duration=float(sys.argv[3]), renew_deadline=float(sys.argv[4]))
assert lease.acquire()
print("held", flush=True)
while True:
    time.sleep(0.3)
    lease.acquire()
"""


def test_git_lease_standby_takes_over_within_the_lease_after_the_holder_is_killed(
    tmp_path: Path, remote: str
) -> None:
    # a lease several times longer than one renewal (a fetch and a push) takes on a busy machine
    lease, deadline = 5.0, 4.0
    holder = [remote, str(tmp_path / "holder"), str(lease), str(deadline)]
    proc = subprocess.Popen(
        [sys.executable, "-c", GIT_HOLDER, *holder],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,  # its git children die with it, as on a machine that dies
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        standby = GitLease(
            remote,
            "lab",
            tmp_path / "standby",
            identity="standby",
            lease_duration=lease,
            renew_deadline=deadline,
        )
        began = time.monotonic()
        while time.monotonic() - began < lease + 1.0:  # past a lease of renewals: never taken
            assert not standby.acquire()
            time.sleep(0.3)
        # the holder and a renewal it may have in flight: a git push left running would
        # still renew the lease after the holder's death, and the standby rightly count
        # the lease from that renewal on
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        # (start, end, taken) of each try after the death. The holder's last renewal is seen
        # by the end of the first try at the latest, so every try that starts a lease after
        # that end must take it over: timed on the tries, not on git's speed.
        tries: list[tuple[float, float, bool]] = []
        while not tries or not tries[-1][2]:
            assert len(tries) < 200, f"not taken over: {tries}"
            start = time.monotonic()
            taken = standby.acquire()
            tries.append((start, time.monotonic(), taken))
            if not taken:
                time.sleep(0.2)
        first_seen = tries[0][1]
        late = [t for t in tries[:-1] if t[0] >= first_seen + lease]
        assert late == [], f"a try a lease after the last renewal was refused: {tries}"
        assert standby.confirm()
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
