"""Which instance of a fleet tries which cluster: a consistent hash ring over the live members.

Every instance computes the same answer from the same two sets (the clusters found in the
repository, the members of the group in etcd), with no exchange between them. Each cluster
goes to one member; when a member joins, only the clusters it now gets move (to it); when a
member leaves, only its clusters move, spread over the others. The ring is tooz's
(``tooz.hashring``), the library already used to reach etcd.

The assignment only decides who *tries* a cluster: the cluster's own lease decides who acts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tooz.hashring import HashRing

PARTITIONS = 64
"""Points on the ring per member: more spread the clusters more evenly over few members."""


def assign(clusters: Iterable[str], members: Iterable[str]) -> Mapping[str, frozenset[str]]:
    """Each member's clusters; every cluster goes to exactly one member, none when there is no
    member. Depends on the two sets only (not on their order)."""
    names = sorted(set(members))
    owned: dict[str, set[str]] = {m: set() for m in names}
    if not names:
        return {}
    ring = HashRing(names, partitions=PARTITIONS)
    for cluster in sorted(set(clusters)):
        (member,) = ring.get_nodes(cluster.encode())
        owned[member].add(cluster)
    return {m: frozenset(c) for m, c in owned.items()}


def mine(clusters: Iterable[str], members: Iterable[str], me: str) -> frozenset[str]:
    """The clusters ``me`` tries: all of them while it sees no group (itself alone)."""
    group = set(members) | {me}
    return assign(clusters, group).get(me, frozenset())
