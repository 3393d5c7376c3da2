"""The metrics of a fleet instance: every cluster's own (a ``cluster`` label on each series,
as a single-cluster ``run`` has them) merged into one exposition, and the fleet's gauges."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.metrics_core import Metric

from reconciler.engine.fleet import Fleet


class _Merged:
    """A collector yielding the families of several registries, one family per name."""

    def __init__(
        self, registries: Callable[[], list[CollectorRegistry]], before: Callable[[], None]
    ) -> None:
        self.registries = registries
        self.before = before

    def collect(self) -> Iterator[Metric]:
        self.before()
        families: dict[str, Metric] = {}
        for registry in self.registries():
            for family in registry.collect():
                have = families.get(family.name)
                if have is None:
                    have = Metric(family.name, family.documentation, family.type, family.unit)
                    families[family.name] = have
                have.samples.extend(family.samples)
        yield from families.values()


class FleetMetrics:
    """``/metrics`` of a fleet instance, read when scraped: ``fleet``'s gauges, and the
    registries ``registries`` gives (its clusters' own, now)."""

    def __init__(self, fleet: Fleet, registries: Callable[[], list[CollectorRegistry]]) -> None:
        self.fleet = fleet
        self.own = CollectorRegistry(auto_describe=True)
        self.clusters = Gauge(
            "reconciler_fleet_clusters",
            "Cluster folders of this instance: assigned to it, held (its lease kept), invalid.",
            ["state"],
            registry=self.own,
        )
        self.invalid = Gauge(
            "reconciler_fleet_cluster_invalid",
            "1 for a cluster folder assigned to this instance whose desired state is invalid "
            "at its start (it stalls alone; the others go on).",
            ["folder"],
            registry=self.own,
        )
        self.members = Gauge(
            "reconciler_fleet_members", "Live instances of the fleet's group.", registry=self.own
        )
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(
            _Merged(lambda: [self.own, *registries()], lambda: self.update(self.fleet))
        )

    def update(self, fleet: Fleet) -> None:
        report = fleet.report()
        held = report["held"]
        self.clusters.labels("assigned").set(len(fleet.assigned))
        self.clusters.labels("held").set(len(held) if isinstance(held, list) else 0)
        self.clusters.labels("invalid").set(len(fleet.invalid))
        self.members.set(len(fleet.members) or 1)
        self.invalid.clear()
        for folder in fleet.invalid:
            self.invalid.labels(folder).set(1)
