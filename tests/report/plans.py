"""Hand-built plans for the rendering tests."""

from __future__ import annotations

from datetime import UTC, datetime

from reconciler.model.base import API_VERSION, Metadata
from reconciler.model.placement import Placement, PlacementSpec
from reconciler.model.plan import (
    ArchSpread,
    HostLoad,
    Move,
    Plan,
    Reason,
    Unsatisfiable,
    UnsatisfiableCode,
)

GIB = 1024**3
AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def move(vm: str, source: str, target: str, wave: int = 0, **kw: object) -> Move:
    data: dict[str, object] = {
        "vm": vm,
        "source": source,
        "target": target,
        "memory": 4 * GIB,
        "vcpus": 2,
        "reason": Reason.BALANCE,
        "detail": f"lowers the x86_64 spread by moving {vm} off {source}",
        "wave": wave,
    }
    data.update(kw)
    return Move.model_validate(data)


def placement(vms: dict[str, str]) -> Placement:
    return Placement(
        api_version=API_VERSION,
        kind="Placement",
        metadata=Metadata(name="lab"),
        spec=PlacementSpec(vms=vms),
    )


def busy_plan() -> Plan:
    """Moves in two waves, one deferred, one unsatisfiable item, an unknown host."""
    return Plan(
        plan_id="3f2a9c1d",
        cluster="lab",
        created_at=AT,
        moves=[
            move("web-2", "kvm-01", "kvm-03", wave=1),
            move("web-1", "kvm-01", "kvm-02", wave=0, reason=Reason.DRIFT, detail="back home"),
            move(
                "db-1",
                "kvm-01",
                "kvm-02",
                wave=0,
                memory=16 * GIB,
                vcpus=8,
                reason=Reason.ANTI_AFFINITY,
                rule="db-apart",
                detail="db-1 and db-2 share kvm-01; required anti-affinity db-apart keeps "
                "them on distinct hosts, and kvm-02 is the least loaded host that fits it "
                "after the other moves of this plan",
            ),
        ],
        deferred=[move("web-3", "kvm-01", "kvm-03", wave=2)],
        unsatisfiable=[
            Unsatisfiable(
                code=UnsatisfiableCode.TOO_FEW_HOSTS,
                rule="cache-apart",
                vms=["cache-1", "cache-2", "cache-3"],
                message="anti-affinity cache-apart needs 3 hosts, 2 are eligible",
            )
        ],
        hosts=[
            HostLoad(
                host="kvm-01",
                arch="x86_64",
                known=True,
                cpu_before=70,
                cpu_after=45,
                memory_before=80,
                memory_after=40,
                score_before=75,
                score_after=42.5,
                vms_before=6,
                vms_after=2,
            ),
            HostLoad(
                host="kvm-02",
                arch="x86_64",
                known=True,
                cpu_before=20,
                cpu_after=40,
                memory_before=10,
                memory_after=40,
                score_before=15,
                score_after=40,
                vms_before=1,
                vms_after=3,
            ),
            HostLoad(host="kvm-03", arch="aarch64", known=True, cpu_before=10, cpu_after=30),
            HostLoad(host="kvm-04", arch=None, known=False),
        ],
        spreads=[
            ArchSpread(
                arch="x86_64",
                before=60,
                after=2.5,
                threshold=20,
                rounds_over=2,
                hold_rounds=2,
                balancing=True,
            )
        ],
        imbalance_rounds={"x86_64": 2, "aarch64": 0},
        placement={"web-1": "kvm-02", "db-1": "kvm-02", "web-2": "kvm-03", "web-3": "kvm-03"},
    )


def empty_plan() -> Plan:
    return Plan(plan_id="00ff", cluster="lab", created_at=AT)
