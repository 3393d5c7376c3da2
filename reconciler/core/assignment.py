"""Which instance of a fleet tries which cluster: a consistent hash ring over the live members.

Every instance computes the same answer from the same two sets (the clusters found in the
repository, the members of the group in etcd), with no exchange between them. Each cluster
goes to one member; when a member joins, only the clusters it now gets move (to it); when a
member leaves, only its clusters move, spread over the others.

The ring is computed here, from md5 alone: each member has ``PARTITIONS`` points, the md5 of
its name written 2, 3, ... ``PARTITIONS + 1`` times; a cluster goes to the member of the first
point after the md5 of its own name (past the last point, the first). That is the placement of
``tooz.hashring.HashRing`` (md5, ``PARTITIONS`` partitions), which earlier releases used:
instances of both kinds in one fleet agree on every cluster.

The assignment only decides who *tries* a cluster: the cluster's own lease decides who acts.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Mapping

PARTITIONS = 64
"""Points on the ring per member: more spread the clusters more evenly over few members."""


def _point(digest: bytes) -> int:
    """A place on the ring: the md5 digest as a number."""
    return int.from_bytes(digest, "big")


def _ring(members: list[str]) -> tuple[list[int], list[str]]:
    """The points of every member in order, and the member of each point."""
    owner_of: dict[int, str] = {}
    for member in members:
        key = member.encode()
        digest = hashlib.md5(key, usedforsecurity=False)
        for _ in range(PARTITIONS):
            digest.update(key)
            owner_of[_point(digest.digest())] = member
    points = sorted(owner_of)
    return points, [owner_of[p] for p in points]


def assign(clusters: Iterable[str], members: Iterable[str]) -> Mapping[str, frozenset[str]]:
    """Each member's clusters; every cluster goes to exactly one member, none when there is no
    member. Depends on the two sets only (not on their order)."""
    names = sorted(set(members))
    owned: dict[str, set[str]] = {m: set() for m in names}
    if not names:
        return {}
    points, owners = _ring(names)
    for cluster in set(clusters):
        key = hashlib.md5(cluster.encode(), usedforsecurity=False).digest()
        at = bisect.bisect(points, _point(key))
        owned[owners[at if at < len(points) else 0]].add(cluster)
    return {m: frozenset(c) for m, c in owned.items()}


def mine(clusters: Iterable[str], members: Iterable[str], me: str) -> frozenset[str]:
    """The clusters ``me`` tries: all of them while it sees no group (itself alone)."""
    group = set(members) | {me}
    return assign(clusters, group).get(me, frozenset())
