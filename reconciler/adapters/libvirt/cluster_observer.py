"""The Observer port over libvirt: the whole cluster, or a fresh look at a few of its hosts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reconciler.adapters.libvirt.observe_host import KnownHost
from reconciler.adapters.libvirt.observer import known_hosts, observe_cluster
from reconciler.adapters.libvirt.pool import ConnectionPool
from reconciler.model.cluster import Cluster
from reconciler.model.snapshot import Snapshot


class LibvirtClusterObserver:
    """``observe()`` every host; ``observe_hosts()`` only the two ends of a move.

    A fresh look skips the CPU sampling pause: admission needs where VMs run, their state
    and the hosts' capacity, not a new CPU reading. Nor does it ask what the last
    ``observe()`` found of a host that lasts while it runs (its capabilities, size, versions).
    With a ``pool`` both go over the command's open connections (see ``libvirt_pool``).
    """

    def __init__(
        self, cluster: Cluster, *, pool: ConnectionPool | None = None, **overrides: Any
    ) -> None:
        self.cluster = cluster
        self.overrides = overrides
        if pool is not None:
            self.overrides["borrow"] = pool.get
        self.known: dict[str, KnownHost] = {}

    def observe(self) -> Snapshot:
        snapshot = observe_cluster(self.cluster, **self.overrides)
        self.known = known_hosts(snapshot)
        return snapshot

    def observe_hosts(self, hosts: Sequence[str]) -> Snapshot:
        wanted = set(hosts)
        spec = self.cluster.spec.model_copy(
            update={"hosts": [h for h in self.cluster.spec.hosts if h.name in wanted]}
        )
        part = self.cluster.model_copy(update={"spec": spec})
        # the round's own observation asked which hosts refuse which VMs: not again per move
        return observe_cluster(
            part,
            **{
                **self.overrides,
                "sample_interval": 0,
                "compatibility": False,
                "known": self.known,
            },
        )
