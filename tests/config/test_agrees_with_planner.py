"""``validate`` and the planner read topology domains the same way, on random clusters.

For a required antiAffinity (with or without ``topologyKey``, hosts with and without the label,
some in maintenance, some ruled out by a hostAntiAffinity) the planner's own counters say:

- the placement breaks the rule when a domain holds two members (violation measure above 0);
- the rule cannot be kept when it has more members than domains its members may use.

``validate`` must report exactly those as errors, no more and no fewer.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.config import validate_folder
from reconciler.config.findings import Finding
from reconciler.core.state import Model, build
from reconciler.model.base import HostName, VmName, VmUuid
from reconciler.model.cluster import Cluster
from reconciler.model.desired import DesiredState
from reconciler.model.rules import PlacementRules
from reconciler.model.snapshot import HostState, Snapshot, VmRunState, VmState
from tests.config.clusters import HEAD, placement_yaml, rules_yaml, write_folder

GIB = 1024**3
RACKS = ("r1", "r2", "r3")


@dataclass(frozen=True)
class Case:
    hosts: list[tuple[str, str | None, bool]]
    """(name, rack label or None, maintenance)."""
    members: list[str]
    key: str | None
    placement: dict[str, str]
    excluded: list[str]
    """Hosts a required hostAntiAffinity over the members rules out."""


@st.composite
def clusters(draw: st.DrawFn) -> Case:
    hosts = [
        (
            f"kvm-{i}",
            draw(st.sampled_from((None, *RACKS))),
            draw(st.booleans()) and draw(st.booleans()),
        )
        for i in range(draw(st.integers(1, 6)))
    ]
    members = [f"db-{i}" for i in range(draw(st.integers(2, 5)))]
    names = [h[0] for h in hosts]
    placement = {vm: draw(st.sampled_from(names)) for vm in members if draw(st.integers(0, 3))}
    return Case(
        hosts=hosts,
        members=members,
        key=draw(st.sampled_from((None, "rack"))),
        placement=placement,
        excluded=draw(st.lists(st.sampled_from(names), max_size=2, unique=True)),
    )


def _folder_text(case: Case) -> dict[str, str | bytes]:
    hosts = []
    for name, rack, maintenance in case.hosts:
        labels = f", labels: {{rack: {rack}}}" if rack else ""
        hosts.append(
            f'    - {{name: {name}, uri: "test:///{name}", '
            f"maintenance: {str(maintenance).lower()}{labels}}}\n"
        )
    cluster = f"{HEAD}kind: Cluster\nmetadata: {{name: lab}}\nspec:\n  hosts:\n{''.join(hosts)}"
    members = ", ".join(case.members)
    key = f", topologyKey: {case.key}" if case.key else ""
    rules = [f"{{name: apart, type: antiAffinity, vms: {{names: [{members}]}}{key}}}"]
    if case.excluded:
        names = ", ".join(case.excluded)
        rules.append(
            f"{{name: not-there, type: hostAntiAffinity, vms: {{names: [{members}]}}, "
            f"hosts: {{names: [{names}]}}}}"
        )
    entries = [f"{vm}: {host}" for vm, host in case.placement.items()]
    files: dict[str, str | bytes] = {"cluster.yaml": cluster, "rules.yaml": rules_yaml(*rules)}
    if entries:
        files["placement.yaml"] = placement_yaml(*entries)
    return files


def _validate(case: Case) -> list[Finding]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_folder(Path(tmp), _folder_text(case))
        report, _ = validate_folder(folder)
        return report.findings


def _planner_view(case: Case) -> tuple[bool, bool]:
    """(the placement breaks the rule, the rule has more members than usable domains)."""
    files = _folder_text(case)
    desired = DesiredState(
        cluster=Cluster.model_validate(yaml.safe_load(files["cluster.yaml"])),
        rules=PlacementRules.model_validate(yaml.safe_load(files["rules.yaml"])),
    )
    members = case.members
    _, state = build(desired, _snapshot(desired, case.placement))
    broken = state.counts[_group(state.model, "apart")].measure() > 0
    # The domains the members may use: hosts that accept VMs and that the required host rules
    # of a member allow, as the planner checks each move, with every member observed somewhere.
    first = desired.cluster.spec.hosts[0].name
    model, _ = build(desired, _snapshot(desired, dict.fromkeys(members, first)))
    group = model.rules.groups[_group(model, "apart")]
    usable = {
        group.domains[h.index]
        for h in model.hosts
        if h.accepts and any(model.rules.allowed(m, h.index) is None for m in group.members)
    }
    return broken, len(members) > len(usable)


def _group(model: Model, name: str) -> int:
    (index,) = (i for i, g in enumerate(model.rules.groups) if g.name == name)
    return index


def _snapshot(desired: DesiredState, placement: dict[str, str]) -> Snapshot:
    return Snapshot(
        cluster="lab",
        taken_at=datetime(2025, 1, 1, tzinfo=UTC),
        hosts=[
            HostState(
                name=HostName(h.name),
                uri=h.uri,
                reachable=True,
                cpus=64,
                memory_total=256 * GIB,
                arch="x",
            )
            for h in desired.cluster.spec.hosts
        ],
        vms=[
            VmState(
                name=VmName(vm),
                uuid=VmUuid(f"00000000-0000-4000-8000-{i:012d}"),
                host=HostName(placement[vm]),
                state=VmRunState.RUNNING,
                vcpus=1,
                memory_max=GIB,
                memory_current=GIB,
            )
            for i, vm in enumerate(sorted(placement))
        ],
    )


def _is(finding: Finding, fragment: str) -> bool:
    return finding.severity == "error" and fragment in finding.message


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_validate_and_the_planner_agree_on_topology_domains(case: Case) -> None:
    findings = _validate(case)
    broken, too_many = _planner_view(case)
    together = [f for f in findings if _is(f, "keeps them apart")]
    cannot = [f for f in findings if _is(f, "antiAffinity apart needs")]
    assert bool(cannot) == too_many, findings
    assert bool(together) == broken, findings
