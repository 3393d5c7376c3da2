"""The fleet's assignment: one member per cluster, and a change of members moves only its share."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reconciler.core.assignment import PARTITIONS, assign, mine

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
clusters_st = st.sets(names, max_size=60)
members_st = st.sets(names.map(lambda n: f"i-{n}"), min_size=1, max_size=8)


def owner(assignment: dict[str, frozenset[str]] | object, cluster: str) -> str:
    assert isinstance(assignment, dict)
    found = [m for m, cs in assignment.items() if cluster in cs]
    assert len(found) == 1, (cluster, found)
    return found[0]


@given(clusters_st, members_st)
def test_every_cluster_goes_to_exactly_one_live_member(
    clusters: set[str], members: set[str]
) -> None:
    got = dict(assign(clusters, members))
    assert set(got) == members
    assert set().union(*got.values()) == clusters
    assert sum(len(c) for c in got.values()) == len(clusters)


@given(clusters_st, members_st, st.data())
def test_the_answer_does_not_depend_on_order(
    clusters: set[str], members: set[str], data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(sorted(members)))
    assert dict(assign(sorted(clusters), members)) == dict(
        assign(sorted(clusters, reverse=True), shuffled)
    )


@given(clusters_st, members_st, names.map(lambda n: f"j-{n}"))
def test_a_joining_member_takes_clusters_only_for_itself(
    clusters: set[str], members: set[str], newcomer: str
) -> None:
    before = dict(assign(clusters, members))
    after = dict(assign(clusters, members | {newcomer}))
    for cluster in clusters:
        was, now = owner(before, cluster), owner(after, cluster)
        assert now in (was, newcomer)


@given(clusters_st, members_st.filter(lambda m: len(m) >= 2), st.data())
def test_a_leaving_member_moves_only_its_own_clusters(
    clusters: set[str], members: set[str], data: st.DataObject
) -> None:
    gone = data.draw(st.sampled_from(sorted(members)))
    before = dict(assign(clusters, members))
    after = dict(assign(clusters, members - {gone}))
    for cluster in clusters:
        was, now = owner(before, cluster), owner(after, cluster)
        if was != gone:
            assert now == was
        else:
            assert now != gone


def test_clusters_spread_over_three_members() -> None:
    clusters = {f"cluster-{i:02d}" for i in range(30)}
    got = assign(clusters, {"a", "b", "c"})
    assert all(len(c) >= 4 for c in got.values()), {m: len(c) for m, c in got.items()}


def test_no_member_no_assignment_and_alone_all() -> None:
    assert dict(assign({"x"}, set())) == {}
    assert mine({"x", "y"}, set(), "me") == {"x", "y"}
    assert mine({"x", "y"}, {"other"}, "me") | mine({"x", "y"}, {"me"}, "other") == {"x", "y"}


TODAY = {
    "cluster-00": "i-a",
    "cluster-01": "i-a",
    "cluster-02": "i-a",
    "cluster-03": "i-c",
    "cluster-04": "i-c",
    "cluster-05": "i-a",
    "cluster-06": "i-b",
    "cluster-07": "i-a",
    "cluster-08": "i-a",
    "cluster-09": "i-a",
    "cluster-10": "i-a",
    "cluster-11": "i-b",
}
"""Where twelve clusters go among three members, as every release so far placed them: instances
of two releases in one fleet (during an upgrade) must agree, or a cluster is tried by two or by
none until the last instance is upgraded."""


def test_the_placement_is_the_one_every_release_made() -> None:
    got = assign(TODAY, {"i-a", "i-b", "i-c"})
    assert {c: owner(dict(got), c) for c in TODAY} == TODAY


@given(clusters_st, members_st)
def test_the_ring_places_as_toozs_hash_ring_did(clusters: set[str], members: set[str]) -> None:
    """The ring used to be tooz's (``tooz.hashring.HashRing``, md5, 64 partitions per member):
    the core's own places every cluster on the same member."""
    from tooz.hashring import HashRing

    ring = HashRing(members, partitions=PARTITIONS)
    got = dict(assign(clusters, members))
    for cluster in clusters:
        (member,) = ring.get_nodes(cluster.encode())
        assert owner(got, cluster) == member
