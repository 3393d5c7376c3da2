"""Small helpers that build desired states and snapshots directly from the models."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from reconciler.model.base import API_VERSION, HostName, Metadata, VmName, VmUuid
from reconciler.model.cluster import Cluster, ClusterMetadata, ClusterSpec, Host, Migration, Reserve
from reconciler.model.desired import DesiredState
from reconciler.model.placement import Placement, PlacementSpec
from reconciler.model.plan import Move, Plan
from reconciler.model.policy import BalancePolicy, BalancePolicySpec
from reconciler.model.rules import PlacementRules, PlacementRulesSpec, Rule
from reconciler.model.snapshot import (
    FailedMove,
    HostState,
    InFlight,
    ReconcilerState,
    Snapshot,
    VmRunState,
    VmState,
)

GIB = 1024**3
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def host(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    maintenance: bool = False,
    max_outbound: int | None = None,
    max_inbound: int | None = None,
) -> Host:
    return Host(
        name=name,
        uri=f"qemu+ssh://root@{name}/system",
        labels=labels or {},
        maintenance=maintenance,
        reserve=Reserve(memory=0, cpus=0),
        migration=Migration(max_outbound=max_outbound, max_inbound=max_inbound),
    )


def host_state(
    name: str, *, cpus: int = 16, memory_gib: int = 64, arch: str = "x86_64", reachable: bool = True
) -> HostState:
    if not reachable:
        return HostState(
            name=HostName(name), uri=f"qemu+ssh://root@{name}/system", reachable=False, error="x"
        )
    return HostState(
        name=HostName(name),
        uri=f"qemu+ssh://root@{name}/system",
        reachable=True,
        arch=arch,
        cpus=cpus,
        memory_total=memory_gib * GIB,
    )


def vm(
    name: str,
    on: str,
    *,
    vcpus: int = 2,
    memory_gib: float = 4,
    cpu_used: float = 0.5,
    labels: dict[str, str] | None = None,
    migratable: bool = True,
    uptime: float = 86400,
    last_moved_at: datetime | None = None,
    failed_at: datetime | None = None,
) -> VmState:
    mem = int(memory_gib * GIB)
    return VmState(
        name=VmName(name),
        uuid=VmUuid(f"uuid-{name}"),
        host=HostName(on),
        state=VmRunState.RUNNING,
        vcpus=vcpus,
        memory_max=mem,
        memory_current=mem,
        memory_used=mem,
        cpu_used=cpu_used,
        uptime=uptime,
        labels=labels or {},
        migratable=migratable,
        reconciler=ReconcilerState(
            last_moved_at=last_moved_at,
            last_failure=None
            if failed_at is None
            else FailedMove(at=failed_at, source="elsewhere", target=on, error="refused"),
        ),
    )


def desired(
    hosts: Sequence[Host],
    *,
    rules: Sequence[Rule] = (),
    placement: dict[str, str] | None = None,
    **policy: object,
) -> DesiredState:
    spec = BalancePolicySpec.model_validate({"holdRounds": 1, **policy})
    return DesiredState(
        cluster=Cluster(
            api_version=API_VERSION,
            kind="Cluster",
            metadata=ClusterMetadata(name="test"),
            spec=ClusterSpec(hosts=list(hosts)),
        ),
        policy=BalancePolicy(
            api_version=API_VERSION, kind="BalancePolicy", metadata=Metadata(name="p"), spec=spec
        ),
        rules=PlacementRules(
            api_version=API_VERSION,
            kind="PlacementRules",
            metadata=Metadata(name="r"),
            spec=PlacementRulesSpec(rules=list(rules)),
        ),
        placement=Placement(
            api_version=API_VERSION,
            kind="Placement",
            metadata=Metadata(name="test"),
            spec=PlacementSpec(vms=placement or {}),
        ),
    )


def snapshot(
    hosts: Sequence[HostState], vms: Sequence[VmState], in_flight: Sequence[InFlight] = ()
) -> Snapshot:
    return Snapshot(
        cluster="test", taken_at=NOW, hosts=list(hosts), vms=list(vms), in_flight=list(in_flight)
    )


def rule(**fields: object) -> Rule:
    """A rule from its YAML fields, e.g. ``rule(name="a", type="pin", vms={...}, hosts={...})``."""
    return PlacementRules.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "PlacementRules",
            "metadata": {"name": "r"},
            "spec": {"rules": [fields]},
        }
    ).spec.rules[0]


def in_wave_order(p: Plan, *, deferred: bool = True) -> list[Move]:
    """This round's moves by wave (then as listed), then the deferred ones the same way."""

    def ordered(moves: list[Move]) -> list[Move]:
        return [m for _, m in sorted(enumerate(moves), key=lambda im: (im[1].wave, im[0]))]

    return ordered(p.moves) + (ordered(p.deferred) if deferred else [])


def apply_moves(snap: Snapshot, moves: Sequence[Move], at: datetime | None = None) -> Snapshot:
    """The snapshot after ``moves``: VMs on their targets, marked as moved at ``at``."""
    where = {m.vm: m for m in moves}
    vms = []
    for v in snap.vms:
        m = where.get(v.name)
        if m is None:
            vms.append(v)
            continue
        rec = (
            ReconcilerState(last_moved_at=at, last_moved_from=m.source, moves=1)
            if at
            else v.reconciler
        )
        vms.append(v.model_copy(update={"host": m.target, "reconciler": rec}))
    return snap.model_copy(update={"vms": vms})
