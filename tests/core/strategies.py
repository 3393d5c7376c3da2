"""Hypothesis strategies: small random clusters, rules and policies built from the models."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import strategies as st

from reconciler.model.base import API_VERSION, HostName, Metadata, VmName, VmUuid
from reconciler.model.cluster import Cluster, ClusterMetadata, ClusterSpec, Host, Migration, Reserve
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.placement import Placement, PlacementSpec
from reconciler.model.policy import BalancePolicy, BalancePolicySpec
from reconciler.model.rules import PlacementRules, PlacementRulesSpec, Rule
from reconciler.model.snapshot import (
    FailedMove,
    HostState,
    ReconcilerState,
    Snapshot,
    VmRunState,
    VmState,
)
from tests.core.builders import GIB, NOW, rule

Case = tuple[DesiredState, Snapshot, History]


@st.composite
def hosts_strategy(draw: st.DrawFn) -> tuple[list[Host], list[HostState]]:
    n = draw(st.integers(2, 5))
    hosts: list[Host] = []
    states: list[HostState] = []
    for i in range(n):
        name = f"h{i}"
        labels = {"rack": f"r{draw(st.integers(0, 1))}"}
        if draw(st.booleans()):
            labels["gen"] = "old"
        hosts.append(
            Host(
                name=name,
                uri=f"test:///{name}",
                labels=labels,
                maintenance=draw(st.integers(0, 5)) == 0,
                reserve=Reserve(
                    memory=draw(st.sampled_from([0, GIB, 2 * GIB])),
                    cpus=draw(st.sampled_from([0.0, 1.0])),
                ),
                migration=Migration(
                    max_outbound=draw(st.sampled_from([None, 1, 2])),
                    max_inbound=draw(st.sampled_from([None, 1, 2])),
                ),
            )
        )
        reachable = draw(st.integers(0, 9)) > 0
        states.append(
            HostState(
                name=HostName(name),
                uri=f"test:///{name}",
                reachable=reachable,
                error=None if reachable else "unreachable",
                arch=draw(st.sampled_from(["x86_64", "x86_64", "x86_64", "aarch64"]))
                if reachable
                else None,
                cpus=draw(st.integers(4, 32)) if reachable else None,
                memory_total=draw(st.integers(8, 96)) * GIB if reachable else None,
            )
        )
    return hosts, states


RULE_TEMPLATES: list[dict[str, object]] = [
    {"type": "antiAffinity", "vms": {"labels": {"app": "a"}}},
    {"type": "antiAffinity", "vms": {"labels": {"app": "b"}}, "topologyKey": "rack"},
    {"type": "affinity", "vms": {"names": ["vm0", "vm1"]}},
    {"type": "affinity", "vms": {"labels": {"app": "d"}}},
    {"type": "hostAffinity", "vms": {"labels": {"app": "b"}}, "hosts": {"labels": {"rack": "r0"}}},
    {"type": "hostAntiAffinity", "vms": {"names": ["vm*"]}, "hosts": {"labels": {"gen": "old"}}},
    {"type": "pin", "vms": {"names": ["vm2"]}, "hosts": {"names": ["h1"]}},
    {"type": "exclude", "vms": {"names": ["vm3"]}},
    {"type": "spread", "vms": {"labels": {"app": "a"}}, "topologyKey": "rack", "maxSkew": 1},
    {"type": "spread", "vms": {"labels": {"app": "c"}}},
    {"type": "disruptionBudget", "vms": {"labels": {"app": "a"}}, "maxConcurrent": 1},
]
ENFORCED = {"antiAffinity", "affinity", "hostAffinity", "hostAntiAffinity", "spread"}


@st.composite
def rules_strategy(draw: st.DrawFn) -> list[Rule]:
    picked = draw(st.lists(st.integers(0, len(RULE_TEMPLATES) - 1), max_size=4, unique=True))
    rules: list[Rule] = []
    for k in picked:
        fields = dict(RULE_TEMPLATES[k])
        fields["name"] = f"rule-{k}"
        if fields["type"] in ENFORCED:
            fields["enforcement"] = draw(st.sampled_from(["required", "required", "preferred"]))
        rules.append(rule(**fields))
    return rules


@st.composite
def cases(draw: st.DrawFn) -> Case:
    hosts, states = draw(hosts_strategy())
    reachable = [s.name for s in states if s.reachable]
    vms: list[VmState] = []
    if reachable:
        for i in range(draw(st.integers(0, 12))):
            vcpus = draw(st.integers(1, 8))
            memory = draw(st.integers(1, 16)) * GIB
            recent = draw(st.integers(0, 5)) == 0
            vms.append(
                VmState(
                    name=VmName(f"vm{i}"),
                    uuid=VmUuid(f"u{i}"),
                    host=draw(st.sampled_from(reachable)),
                    state=draw(st.sampled_from([VmRunState.RUNNING] * 5 + [VmRunState.SHUTOFF])),
                    vcpus=vcpus,
                    memory_max=memory,
                    memory_current=memory,
                    memory_used=memory // draw(st.integers(1, 2)),
                    cpu_used=draw(st.floats(0, vcpus, allow_nan=False)),
                    uptime=draw(st.sampled_from([30.0, 86400.0, 86400.0, 86400.0])),
                    labels={"app": draw(st.sampled_from(["a", "b", "c", "d"]))},
                    migratable=draw(st.integers(0, 9)) > 0,
                    reconciler=ReconcilerState(
                        last_moved_at=NOW - timedelta(minutes=10) if recent else None,
                        first_seen=draw(st.sampled_from([None, NOW - timedelta(seconds=30)])),
                        last_failure=FailedMove(
                            at=NOW - timedelta(hours=1), source="h0", target="h1", error="x"
                        )
                        if draw(st.integers(0, 6)) == 0
                        else None,
                    ),
                )
            )
    # A VM caught mid-migration: seen on a second host too.
    if vms and len(reachable) > 1 and draw(st.integers(0, 4)) == 0:
        first = vms[draw(st.integers(0, len(vms) - 1))]
        other = draw(st.sampled_from([h for h in reachable if h != first.host]))
        vms.append(first.model_copy(update={"host": other}))
    policy = BalancePolicySpec.model_validate(
        {
            "threshold": draw(st.sampled_from([5, 10, 20, 40])),
            "margin": draw(st.sampled_from([0, 1, 2, 5])),
            "hostLimit": draw(st.sampled_from([70, 90, 100])),
            "cpuOvercommit": draw(st.sampled_from([1.0, 2.0, 4.0])),
            "batch": draw(st.integers(1, 6)),
            "parallel": {"cluster": draw(st.integers(1, 4))},
            "basis": draw(st.sampled_from(["used", "allocated"])),
            "drift": draw(st.sampled_from(["revert", "adopt"])),
            "holdRounds": draw(st.integers(1, 2)),
            "score": {"cpu": draw(st.sampled_from([0.0, 0.5, 1.0])), "memory": 0.5},
        }
    )
    names = [v.name for v in vms] + ["ghost"]
    host_names = [h.name for h in hosts] + ["nowhere"]
    placement = draw(
        st.dictionaries(st.sampled_from(names), st.sampled_from(host_names), max_size=3)
    )
    desired = DesiredState(
        cluster=Cluster(
            api_version=API_VERSION,
            kind="Cluster",
            metadata=ClusterMetadata(name="prop"),
            spec=ClusterSpec(hosts=hosts),
        ),
        policy=BalancePolicy(
            api_version=API_VERSION, kind="BalancePolicy", metadata=Metadata(name="p"), spec=policy
        ),
        rules=PlacementRules(
            api_version=API_VERSION,
            kind="PlacementRules",
            metadata=Metadata(name="r"),
            spec=PlacementRulesSpec(rules=draw(rules_strategy())),
        ),
        placement=Placement(
            api_version=API_VERSION,
            kind="Placement",
            metadata=Metadata(name="prop"),
            spec=PlacementSpec(vms=placement),
        ),
    )
    history = History(
        imbalance_rounds={"x86_64": draw(st.integers(0, 2))},
        observed_since=draw(st.sampled_from([None, NOW - timedelta(days=1)])),
    )
    snap = Snapshot(cluster="prop", taken_at=NOW, hosts=states, vms=vms)
    return desired, snap, history
