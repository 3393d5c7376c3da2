"""``kind: Cluster``: the hosts and how to reach them."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from pydantic import Field, WithJsonSchema, field_validator, model_validator

from reconciler.model.base import (
    LABEL_KEY_PATTERN,
    ApiVersion,
    ClusterName,
    Frozen,
    Metadata,
    RefSafeHostName,
)
from reconciler.model.power import HostPower
from reconciler.model.quantity import (
    DURATION_PATTERN,
    Duration,
    Size,
    duration_within,
)
from reconciler.model.recovery import Fence

MAX_BANDWIDTH = 1024 * 1024
"""MiB/s: 1 TiB/s, ten times a 800 Gbit/s link; libvirt takes a 64-bit number."""


class Reserve(Frozen):
    """Capacity kept free for the host itself; never planned for VMs."""

    memory: Size | None = Field(
        default=None, description="Memory kept free, at most 1024TiB. Default: 2GiB."
    )
    cpus: float | None = Field(
        default=None,
        ge=0,
        le=4096,
        allow_inf_nan=False,
        description="CPUs kept free, at most 4096 (KVM's most vCPUs). Default: 1.",
    )


class Migration(Frozen):
    """How live migrations reach and leave a host."""

    max_outbound: int | None = Field(
        default=None,
        alias="maxOutbound",
        ge=1,
        le=64,
        description="Concurrent live migrations leaving one host. Default: 2.",
    )
    max_inbound: int | None = Field(
        default=None,
        alias="maxInbound",
        ge=1,
        le=64,
        description="Concurrent live migrations arriving on one host. Default: 2.",
    )
    uri: str | None = Field(
        default=None,
        min_length=1,
        description="Migration URI template; {address} and {name} are replaced. Default: none "
        "(libvirt picks the destination's hostname).",
    )
    bandwidth: int | None = Field(
        default=None,
        ge=0,
        le=MAX_BANDWIDTH,
        description="MiB/s per migration, 0 = unlimited, at most 1048576 (1 TiB/s). Default: 0.",
    )


class Defaults(Frozen):
    """Settings every host inherits unless it overrides them."""

    reserve: Reserve = Field(default_factory=Reserve)
    migration: Migration = Field(default_factory=Migration)
    fence: Fence | None = Field(
        default=None, description="How to switch a host off for recovery; hosts may override."
    )


Labels = dict[str, str]

SharedPath = Annotated[
    str,
    Field(pattern=r"^/", min_length=1, description="An absolute path prefix, e.g. /mnt/nfs."),
]


class Host(Frozen):
    """One hypervisor host."""

    name: RefSafeHostName = Field(
        description="Unique host name used by rules; it is part of git branch names (drain "
        "--propose), so no ':', '..', trailing '.' or '.lock'."
    )
    uri: str = Field(
        min_length=1,
        description="libvirt connection URI, e.g. qemu+ssh://root@kvm-01/system or "
        "test:///abs/node.xml.",
    )
    address: str | None = Field(
        default=None, min_length=1, description="Address for the migration URI template."
    )
    labels: Labels = Field(default_factory=dict, description="Host labels used by selectors.")
    maintenance: bool = Field(
        default=False, description="true drains the host: every movable VM leaves it."
    )
    reserve: Reserve = Field(default_factory=Reserve, description="Overrides defaults.reserve.")
    migration: Migration = Field(
        default_factory=Migration, description="Overrides defaults.migration."
    )
    fence: Fence | None = Field(default=None, description="Overrides defaults.fence.")
    power: HostPower | None = Field(
        default=None,
        description="How the reconciler powers the host off and on (power saving, "
        "docs/power.md); none: it is never powered off.",
    )


PositiveDuration = Annotated[
    Duration,
    duration_within(
        timedelta(0),
        timedelta(minutes=10),
        above=True,
        too_short="must be more than 0s; e.g. 5s or 500ms",
    ),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": DURATION_PATTERN},
                {"type": "number", "exclusiveMinimum": 0},
            ],
            "description": "A duration above zero, at most 10m: 500ms, 5s, 1m, or seconds as "
            "a number.",
        }
    ),
]
"""A ``Duration`` above zero, at most 10 minutes (a timeout)."""
SampleInterval = Annotated[Duration, duration_within(timedelta(0), timedelta(minutes=1))]
"""Between a host's two CPU samples: 0 to 1m."""

DEFAULT_CONNECT_TIMEOUT = timedelta(seconds=5)
DEFAULT_CALL_TIMEOUT = timedelta(seconds=10)
DEFAULT_SAMPLE_INTERVAL = timedelta(milliseconds=500)


class Observe(Frozen):
    """How the hosts are observed; every command that reads the hosts uses these."""

    connect_timeout: PositiveDuration = Field(
        default=DEFAULT_CONNECT_TIMEOUT,
        alias="connectTimeout",
        json_schema_extra={"default": "5s"},  # as users write it, not ISO 8601
        description="Longest wait for a host to accept a connection. Default: 5s.",
    )
    call_timeout: PositiveDuration = Field(
        default=DEFAULT_CALL_TIMEOUT,
        alias="callTimeout",
        json_schema_extra={"default": "10s"},  # as users write it, not ISO 8601
        description="Longest wait for the answer to one libvirt call; a host that does not "
        "answer in time is reported unreachable. Default: 10s.",
    )
    sample_interval: SampleInterval = Field(
        default=DEFAULT_SAMPLE_INTERVAL,
        alias="sampleInterval",
        json_schema_extra={"default": "500ms"},  # as users write it, not ISO 8601
        description="Time between the two CPU samples of a host (0s: back to back), at most 1m. "
        "Default: 500ms.",
    )
    concurrency: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="Hosts observed at the same time, at most. Default: 4 per CPU core.",
    )


ETCD_SCHEMES = ("etcd3+http", "etcd3+https")


class ClusterHold(Frozen):
    """How whoever acts on the cluster holds it, on any machine: the git lease of a state
    repository, or a lease in etcd. Every acting command (apply, drain --apply, run) takes
    this hold, plus the lock of the machine it runs on, or refuses."""

    repository: str | None = Field(
        default=None,
        description="The state repository whose ref refs/reconciler/lease/<cluster> is the "
        "lease (a URL or path git can push to; credentials come from RECONCILER_GIT_TOKEN or "
        "git's own helpers, never from this file).",
    )
    etcd: str | None = Field(
        default=None,
        description="An etcd endpoint whose key reconciler/lease/<cluster> is the lease: "
        "etcd3+http://HOST:2379 or etcd3+https://HOST:2379.",
    )

    @model_validator(mode="after")
    def _one(self) -> ClusterHold:
        if (self.repository is None) == (self.etcd is None):
            raise ValueError(
                "give exactly one of repository (a git lease) and etcd (an etcd lease)"
            )
        return self

    @field_validator("repository", "etcd")
    @classmethod
    def _no_credentials(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip():
            raise ValueError("must not be empty")
        scheme, _, rest = value.partition("://")
        user = rest.split("/", 1)[0].rpartition("@")[0] if rest else ""
        if ":" in user or (user and scheme.lower() in ("http", "https")):
            raise ValueError(
                "holds a credential, and cluster.yaml goes into git; give the URL without one, "
                "RECONCILER_GIT_TOKEN or git's credential helpers supply it"
            )
        return value

    @field_validator("etcd")
    @classmethod
    def _etcd_url(cls, value: str | None) -> str | None:
        if value is not None and value.partition("://")[0].lower() not in ETCD_SCHEMES:
            raise ValueError(
                f"{value!r} is not an etcd endpoint: write etcd3+http://HOST:2379 or "
                "etcd3+https://HOST:2379"
            )
        return value

    def describe(self) -> str:
        """The hold as messages name it."""
        if self.repository is not None:
            return f"the git lease of {self.repository}"
        return f"the etcd lease at {self.etcd}"


class ClusterSpec(Frozen):
    defaults: Defaults = Field(default_factory=Defaults)
    hosts: list[Host] = Field(min_length=1, description="The hosts of this cluster.")
    shared_storage: list[SharedPath] = Field(
        default_factory=list,
        alias="sharedStorage",
        description="Path prefixes of storage every host mounts (NFS, CephFS, GlusterFS, ...): "
        "file disks under them do not block live migration. Network disks (RBD, iSCSI, NBD, "
        "gluster) never do.",
    )
    observe: Observe = Field(default_factory=Observe)
    hold: ClusterHold | None = Field(
        default=None,
        description="How every acting command holds the cluster, besides its machine's lock "
        "(none: the lock, or the hold the command is given: the git lease of --repo, "
        "--coordination).",
    )


class ClusterMetadata(Metadata):
    """Identifies the cluster."""

    name: ClusterName = Field(
        description="The cluster's name; it is part of git ref names (reconciler/observed/"
        "<name>, the lease), so no ':', '..', trailing '.' or '.lock'."
    )


class Cluster(Frozen):
    """The hosts of one cluster and how to reach them."""

    api_version: ApiVersion = Field(alias="apiVersion")
    kind: Literal["Cluster"]
    metadata: ClusterMetadata
    spec: ClusterSpec


DEFAULT_RESERVE_MEMORY = 2 * 1024**3
DEFAULT_RESERVE_CPUS = 1.0
DEFAULT_MAX_OUTBOUND = 2
DEFAULT_MAX_INBOUND = 2


def effective_reserve(cluster: Cluster, host: Host) -> tuple[int, float]:
    """(memory bytes, cpus) kept free on ``host``: its own value, else defaults, else built-in."""
    d = cluster.spec.defaults.reserve
    mem = host.reserve.memory if host.reserve.memory is not None else d.memory
    cpus = host.reserve.cpus if host.reserve.cpus is not None else d.cpus
    return (
        DEFAULT_RESERVE_MEMORY if mem is None else mem,
        DEFAULT_RESERVE_CPUS if cpus is None else cpus,
    )


def effective_fence(cluster: Cluster, host: Host) -> Fence | None:
    """The fence of ``host``: its own, else the cluster's default, else none."""
    return host.fence or cluster.spec.defaults.fence


def effective_migration_limits(cluster: Cluster, host: Host) -> tuple[int, int]:
    """(maxOutbound, maxInbound) of ``host`` after defaults."""
    d = cluster.spec.defaults.migration
    out = host.migration.max_outbound or d.max_outbound or DEFAULT_MAX_OUTBOUND
    inn = host.migration.max_inbound or d.max_inbound or DEFAULT_MAX_INBOUND
    return out, inn


__all__ = [
    "LABEL_KEY_PATTERN",
    "Cluster",
    "ClusterHold",
    "ClusterMetadata",
    "ClusterSpec",
    "Defaults",
    "Host",
    "Labels",
    "Migration",
    "Observe",
    "Reserve",
    "effective_fence",
    "effective_migration_limits",
    "effective_reserve",
]
