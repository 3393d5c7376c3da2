"""The hosts of a rollout, in the order it takes them."""

from __future__ import annotations

from fnmatch import fnmatchcase

from reconciler.core.selectors import matches
from reconciler.model.cluster import Cluster
from reconciler.model.rollout import Rollout


def rollout_hosts(rollout: Rollout, cluster: Cluster) -> list[str]:
    """The names of the hosts ``rollout`` selects, in its order.

    A host comes at the place of the first name or glob of ``hosts.names`` that matches it;
    hosts matched by the same glob, or selected by labels alone, keep the Cluster's order.
    """
    selector = rollout.spec.hosts
    picked = [
        (i, h.name) for i, h in enumerate(cluster.spec.hosts) if matches(selector, h.name, h.labels)
    ]
    names = selector.names or []

    def rank(item: tuple[int, str]) -> tuple[int, int]:
        index, name = item
        first = next((j for j, g in enumerate(names) if fnmatchcase(name, g)), 0)
        return first, index

    return [name for _, name in sorted(picked, key=rank)]
