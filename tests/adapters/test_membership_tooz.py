"""The fleet's group in a real etcd through tooz: joined, seen, left, expired, unreachable."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.etcd.membership import ToozMembership
from reconciler.errors import TerminalError, TransientError
from tests.adapters.test_lease_tooz import ETCD, SLACK, Etcd

pytestmark = pytest.mark.skipif(ETCD is None, reason="no etcd binary (apt-get install etcd-server)")


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    server = Etcd(tmp_path / "etcd")
    try:
        yield server
    finally:
        server.close()


def test_members_see_each_other_and_one_that_leaves_is_gone(etcd: Etcd) -> None:
    a = ToozMembership(etcd.url, "a", ttl=3)
    b = ToozMembership(etcd.url, "b", ttl=3)
    assert a.beat() == {"a"}
    assert b.beat() == {"a", "b"}
    assert a.beat() == {"a", "b"}
    b.leave()
    assert a.beat() == {"a"}
    a.leave()


def test_a_member_that_stops_beating_expires_and_one_that_beats_again_rejoins(
    etcd: Etcd,
) -> None:
    a = ToozMembership(etcd.url, "a", ttl=2)
    b = ToozMembership(etcd.url, "b", ttl=2)
    a.beat()
    b.beat()
    deadline = time.monotonic() + 10
    while b.beat() != {"b"}:  # a stopped beating: etcd drops it with its lease
        assert time.monotonic() < deadline, "a never expired"
        time.sleep(0.5)
    assert a.beat() == {"a", "b"}  # its lease expired; it joins again
    a.leave()
    b.leave()


def test_etcd_paused_or_dead_is_a_transient_error_within_the_timeout(etcd: Etcd) -> None:
    a = ToozMembership(etcd.url, "a", ttl=3, timeout=1)
    a.beat()
    etcd.pause()
    try:
        began = time.monotonic()
        with pytest.raises(TransientError, match="the fleet's group"):
            a.beat()
        # heartbeat, read, join, read again: each step bounded by the timeout
        assert time.monotonic() - began < 4 * (1 + SLACK)
    finally:
        etcd.resume()
    etcd.kill()
    with pytest.raises(TransientError):
        a.beat()


def test_a_url_it_cannot_use_is_refused() -> None:
    with pytest.raises(TerminalError, match="unsupported coordination URL"):
        ToozMembership("http://127.0.0.1:2379", "a")
