"""What-ifs on a desired state and a snapshot, without git: a host gone, a host added.

- ``without_hosts``: as if the hosts were lost for good. They are planned as drained
  (``maintenance: true``): every VM they run needs a place on the others, and what finds
  none is reported unsatisfiable, which is the question "can the rest carry it?".
- ``add_host_like``: a new, empty host with the same capacity, architecture, labels,
  reserve and migration limits as an existing one; balancing then shows what would move to
  it.

Pure: new documents and a new snapshot, the inputs unchanged; a what-if that names no host
of the cluster raises ValueError with the sentence to show.
"""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.model.base import HostName
from reconciler.model.desired import DesiredState
from reconciler.model.snapshot import Snapshot


def _known(desired: DesiredState, name: str, flag: str) -> None:
    names = [h.name for h in desired.cluster.spec.hosts]
    if name not in names:
        raise ValueError(
            f"{flag} {name}: cluster {desired.cluster.metadata.name!r} has no host {name!r} "
            f"(hosts: {', '.join(names)})"
        )


def without_hosts(desired: DesiredState, names: Sequence[str]) -> DesiredState:
    """``desired`` with ``names`` drained, as if they were gone."""
    for name in names:
        _known(desired, name, "--without-host")
    gone = set(names)
    hosts = [
        h.model_copy(update={"maintenance": True}) if h.name in gone else h
        for h in desired.cluster.spec.hosts
    ]
    spec = desired.cluster.spec.model_copy(update={"hosts": hosts})
    return desired.model_copy(update={"cluster": desired.cluster.model_copy(update={"spec": spec})})


def add_host_like(
    desired: DesiredState, snapshot: Snapshot, name: str, like: str
) -> tuple[DesiredState, Snapshot]:
    """A new empty host ``name`` made like ``like``, in the Cluster and in the snapshot."""
    _known(desired, like, "--like")
    if any(h.name == name for h in desired.cluster.spec.hosts):
        raise ValueError(
            f"--add-host {name}: cluster {desired.cluster.metadata.name!r} has a host {name!r} "
            "already; name the new host differently"
        )
    model = next(h for h in desired.cluster.spec.hosts if h.name == like)
    new_host = model.model_copy(
        update={"name": name, "uri": f"whatif:///{name}", "address": None, "maintenance": False}
    )
    spec = desired.cluster.spec.model_copy(
        update={"hosts": [*desired.cluster.spec.hosts, new_host]}
    )
    cluster = desired.cluster.model_copy(update={"spec": spec})
    observed = next((h for h in snapshot.hosts if h.name == like), None)
    if observed is None or not observed.reachable:
        raise ValueError(
            f"--like {like}: the snapshot has no observation of {like} to copy; "
            "pick a host the snapshot saw"
        )
    state = observed.model_copy(
        update={
            "name": HostName(name),
            "uri": new_host.uri,
            "uuid": None,
            "hostname": name,
            "memory_free": observed.memory_total,
            "cpu_utilisation": 0.0 if observed.cpu_utilisation is not None else None,
        }
    )
    return (
        desired.model_copy(update={"cluster": cluster}),
        snapshot.model_copy(update={"hosts": [*snapshot.hosts, state]}),
    )
