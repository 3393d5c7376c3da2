"""The lease does not grow any repository: 200 renewals (six times its bound of records), then
count the objects.

Counted two ways in the remote and in both scratch repositories: ``git count-objects -v``
(loose and packed, reachable or not) and the files under ``objects/``. Before the records
were bounded, 200 renewals left 201 objects in the remote and in the holder's scratch
repository (one commit per renewal and the empty tree).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from reconciler.adapters.git.lease import RECORDS, GitLease
from tests.adapters.test_lease import Ticks

RENEWALS = 200  # an unbounded lease would leave 201 objects; the bound is RECORDS + 1


def objects(git_dir: Path) -> int:
    """Every object stored, reachable or not: loose ones plus those in packs."""
    out = subprocess.run(
        ["git", "--git-dir", str(git_dir), "count-objects", "-v"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    counts = dict(line.split(": ") for line in out.splitlines())
    loose_files = sum(
        1 for d in (git_dir / "objects").iterdir() if len(d.name) == 2 for _ in d.iterdir()
    )
    assert loose_files == int(counts["count"])
    return int(counts["count"]) + int(counts["in-pack"])


def reachable(git_dir: Path) -> int:
    out = subprocess.run(
        ["git", "--git-dir", str(git_dir), "rev-list", "--all", "--objects"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return len(out.splitlines())


def test_renewals_write_a_bounded_set_of_objects(tmp_path: Path) -> None:
    bare = tmp_path / "state.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(bare)], check=True)
    remote = f"file://{bare}"
    clock = Ticks()
    holder = GitLease(remote, "lab", tmp_path / "holder", identity="a", monotonic=clock)
    standby = GitLease(remote, "lab", tmp_path / "standby", identity="b", monotonic=clock)
    last = None
    for i in range(RENEWALS):
        clock.t += 2.0  # the retry period
        assert holder.acquire()
        sha = holder._held
        assert sha != last  # every renewal changes the ref: a standby's expiry needs that
        last = sha
        if i % 9 == 0:  # 18 s between looks, longer than a lease: still never the same record
            assert not standby.acquire()
    counts = {
        "remote": objects(bare),
        "holder": objects(tmp_path / "holder"),
        "standby": objects(tmp_path / "standby"),
    }
    print(f"objects after {RENEWALS} renewals: {counts}, reachable in remote: {reachable(bare)}")
    bound = RECORDS + 1  # a term's records and the empty tree
    assert all(n <= bound for n in counts.values()), counts
    assert reachable(bare) == 2  # the current record and its tree

    # a second term (the standby takes over after a release) adds at most a term's records
    holder.release()
    for _ in range(RENEWALS // 10):
        clock.t += 2.0
        assert standby.acquire()
    assert objects(bare) <= 2 * RECORDS + 2  # two terms and one release record
