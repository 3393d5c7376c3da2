"""One failing input per cross-document check: the exact line and message."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.clusters import (
    HOSTS,
    cluster_yaml,
    col,
    findings_text,
    placement_yaml,
    rule_findings,
    rules_yaml,
)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_duplicate_host_name(tmp_path: Path) -> None:
    cluster = cluster_yaml(
        '{name: kvm-01, uri: "test:///one"}',
        '{name: kvm-01, uri: "test:///two"}',
    )
    assert findings_text(tmp_path, {"cluster.yaml": cluster}) == [
        "lab/cluster.yaml:7:14: error: spec.hosts[1].name: duplicate host name 'kvm-01' "
        "(also spec.hosts[0]) (give every host its own name)"
    ]


def test_duplicate_host_uri(tmp_path: Path) -> None:
    cluster = cluster_yaml(
        '{name: kvm-01, uri: "test:///one"}',
        '{name: kvm-02, uri: "test:///one"}',
    )
    assert findings_text(tmp_path, {"cluster.yaml": cluster}) == [
        "lab/cluster.yaml:7:27: error: spec.hosts[1].uri: duplicate uri 'test:///one' "
        "(also host kvm-01) (every host needs its own libvirt URI)"
    ]


def test_duplicate_rule_name(tmp_path: Path) -> None:
    assert rule_findings(
        tmp_path,
        "{name: a, type: exclude, vms: {names: [x]}}",
        "{name: a, type: exclude, vms: {names: [y]}}",
    ) == [
        "lab/rules.yaml:7:14: error: spec.rules[1].name: duplicate rule name 'a' "
        "(also spec.rules[0]) (give every rule its own name)"
    ]


def test_rule_naming_a_host_that_does_not_exist(tmp_path: Path) -> None:
    rule = "{name: p, type: pin, vms: {names: [erp]}, hosts: {names: [kvm-04]}}"
    assert rule_findings(tmp_path, rule) == [
        f"lab/rules.yaml:6:{col(rule, 'kvm-04')}: error: spec.rules[0].hosts.names[0]: host "
        "'kvm-04' does not exist (did you mean 'kvm-03'? the Cluster has kvm-01, kvm-02, "
        "kvm-03)"
    ]


def test_host_name_glob_matching_no_host(tmp_path: Path) -> None:
    rule = "{name: h, type: hostAntiAffinity, vms: {names: [a]}, hosts: {names: [db-*]}}"
    assert rule_findings(tmp_path, rule) == [
        f"lab/rules.yaml:6:{col(rule, 'db-*')}: error: "
        "spec.rules[0].hosts.names[0]: no host matches 'db-*' "
        "(use a host of the Cluster: kvm-01, kvm-02, kvm-03)"
    ]


def test_host_labels_matching_no_host_is_a_warning(tmp_path: Path) -> None:
    rule = "{name: h, type: hostAntiAffinity, vms: {names: [a]}, hosts: {labels: {gen: new}}}"
    assert rule_findings(tmp_path, rule) == [
        f"lab/rules.yaml:6:{col(rule, '{gen: new}')}: warning: "
        "spec.rules[0].hosts.labels: no host has the labels "
        "gen=new, so h selects no host (add the labels to a host in the Cluster, or fix the "
        "selector)"
    ]


def test_pin_to_a_host_in_maintenance(tmp_path: Path) -> None:
    cluster = cluster_yaml(
        '{name: kvm-01, uri: "test:///one"}',
        '{name: kvm-02, uri: "test:///two", maintenance: true}',
    )
    rule = "{name: p, type: pin, vms: {names: [erp]}, hosts: {names: [kvm-02]}}"
    assert rule_findings(tmp_path, rule, cluster=cluster) == [
        f"lab/rules.yaml:6:{col(rule, '{names: [kvm-02]}')}: error: "
        "spec.rules[0].hosts: pin p pins to kvm-02, which is in "
        "maintenance (pin to another host, or set maintenance: false on kvm-02)"
    ]


def test_pin_selecting_several_hosts(tmp_path: Path) -> None:
    rule = "{name: p, type: pin, vms: {names: [erp]}, hosts: {labels: {rack: r2}}}"
    assert rule_findings(tmp_path, rule) == [
        f"lab/rules.yaml:6:{col(rule, '{labels')}: error: "
        "spec.rules[0].hosts: pin p selects 2 hosts "
        "(kvm-02, kvm-03); a pin needs exactly one (name a single host in hosts.names)"
    ]


def test_one_vm_pinned_to_two_hosts(tmp_path: Path) -> None:
    second = "{name: p2, type: pin, vms: {names: [erp*]}, hosts: {names: [kvm-02]}}"
    assert rule_findings(
        tmp_path, "{name: p1, type: pin, vms: {names: [erp]}, hosts: {names: [kvm-01]}}", second
    ) == [
        f"lab/rules.yaml:7:{col(second, '{names: [erp*]}')}: error: "
        "spec.rules[1].vms: erp is pinned to kvm-01 by p1 and to "
        "kvm-02 by p2 (keep only one of the two pins for this VM)"
    ]


def test_required_anti_affinity_larger_than_its_hosts(tmp_path: Path) -> None:
    rule = "{name: db-apart, type: antiAffinity, vms: {names: [db-1, db-2, db-3, db-4]}}"
    assert rule_findings(tmp_path, rule) == [
        f"lab/rules.yaml:6:{col(rule, '{names')}: error: "
        "spec.rules[0].vms: antiAffinity db-apart needs 4 hosts "
        "for its 4 VMs, 3 are eligible (add hosts, end a maintenance, take VMs out of the "
        "rule, or make the rule enforcement: preferred)"
    ]


def test_anti_affinity_counts_topology_values(tmp_path: Path) -> None:
    rule = (
        "{name: db-apart, type: antiAffinity, vms: {names: [db-1, db-2, db-3]}, topologyKey: rack}"
    )
    assert rule_findings(tmp_path, rule) == [
        f"lab/rules.yaml:6:{col(rule, '{names')}: error: "
        "spec.rules[0].vms: antiAffinity db-apart needs 3 topology domains (values of host "
        "label rack; a host without it is a domain of its own) for its 3 VMs, eligible hosts "
        "make 2 (add hosts, end a maintenance, take VMs out of the rule, or make the rule "
        "enforcement: preferred)"
    ]


UNLABELLED = '{name: kvm-04, uri: "test:///four"}'
"""A fourth host without the rack label: the planner counts it as a domain of its own."""


def test_a_host_without_the_topology_label_is_a_domain_of_its_own(tmp_path: Path) -> None:
    rule = (
        "{name: db-apart, type: antiAffinity, vms: {names: [db-1, db-2, db-3]}, topologyKey: rack}"
    )
    cluster = cluster_yaml(*HOSTS, UNLABELLED)
    assert rule_findings(tmp_path, rule, cluster=cluster) == []


def test_anti_affinity_counts_only_hosts_its_host_rules_allow(tmp_path: Path) -> None:
    rule = "{name: apart, type: antiAffinity, vms: {names: [db-1, db-2, db-3]}}"
    findings = rule_findings(
        tmp_path,
        rule,
        "{name: off-old, type: hostAntiAffinity, vms: {names: [db-*]}, hosts: {labels: "
        "{gen: old}}}",
    )
    assert findings == [
        f"lab/rules.yaml:6:{col(rule, '{names')}: error: "
        "spec.rules[0].vms: antiAffinity apart needs 3 hosts for "
        "its 3 VMs, 2 are eligible (add hosts, end a maintenance, take VMs out of the rule, "
        "or make the rule enforcement: preferred)"
    ]


def test_anti_affinity_with_globs_or_preferred_is_not_counted(tmp_path: Path) -> None:
    assert (
        rule_findings(
            tmp_path,
            "{name: a, type: antiAffinity, vms: {names: [db-*]}}",
            "{name: b, type: antiAffinity, vms: {names: [w1, w2, w3, w4]}, "
            "enforcement: preferred}",
        )
        == []
    )


def test_same_vms_under_required_affinity_and_anti_affinity(tmp_path: Path) -> None:
    second = "{name: apart, type: antiAffinity, vms: {names: [app-*, cache-*]}}"
    assert rule_findings(
        tmp_path, "{name: together, type: affinity, vms: {names: [app-1, cache-1]}}", second
    ) == [
        f"lab/rules.yaml:7:{col(second, '{names')}: error: "
        "spec.rules[1].vms: app-1 and cache-1 must share a host by "
        "affinity together and be apart by antiAffinity apart (take the VMs out of one of the "
        "two rules, or make the rule enforcement: preferred)"
    ]


def test_host_affinity_that_leaves_no_host(tmp_path: Path) -> None:
    rule = (
        "{name: gpu, type: hostAffinity, vms: {labels: {gpu: 'yes'}}, hosts: {labels: {gpu: 'no'}}}"
    )
    assert rule_findings(tmp_path, rule) == [
        f"lab/rules.yaml:6:{col(rule, '{labels: {gpu: ' + chr(39) + 'no')}: error: "
        "spec.rules[0].hosts: hostAffinity gpu leaves no host: its "
        "hosts selector matches no host (select more hosts, end a maintenance, or make the "
        "rule enforcement: preferred)"
    ]


def test_host_affinity_with_anti_affinity_and_maintenance_leaves_no_host(
    tmp_path: Path,
) -> None:
    cluster = cluster_yaml(
        '{name: kvm-01, uri: "test:///one", labels: {ssd: "yes"}, maintenance: true}',
        '{name: kvm-02, uri: "test:///two", labels: {ssd: "yes", gen: old}}',
        '{name: kvm-03, uri: "test:///three"}',
    )
    rule = "{name: on-ssd, type: hostAffinity, vms: {names: [db-1]}, hosts: {labels: {ssd: 'yes'}}}"
    assert rule_findings(
        tmp_path,
        rule,
        "{name: off-old, type: hostAntiAffinity, vms: {names: ['*']}, "
        "hosts: {labels: {gen: old}}}",
        cluster=cluster,
    ) == [
        f"lab/rules.yaml:6:{col(rule, '{labels')}: error: "
        "spec.rules[0].hosts: hostAffinity on-ssd leaves no host: "
        "kvm-01 is in maintenance; kvm-02 is excluded by hostAntiAffinity off-old (select "
        "more hosts, end a maintenance, or make the rule enforcement: preferred)"
    ]


def test_pin_against_a_required_host_affinity(tmp_path: Path) -> None:
    pin = "{name: erp, type: pin, vms: {names: [erp]}, hosts: {names: [kvm-03]}}"
    assert rule_findings(
        tmp_path,
        "{name: gpu, type: hostAffinity, vms: {names: ['*']}, hosts: {labels: {gpu: 'yes'}}}",
        pin,
    ) == [
        f"lab/rules.yaml:7:{col(pin, '{names: [kvm')}: error: "
        "spec.rules[1].hosts: pin erp pins to kvm-03, but kvm-03 "
        "is not allowed by hostAffinity gpu (pin to a host the host rules allow, or change "
        "one of the rules)"
    ]


def _placement_findings(root: Path, *entries: str, rules: tuple[str, ...] = ()) -> list[str]:
    files = {"cluster.yaml": cluster_yaml(), "placement.yaml": placement_yaml(*entries)}
    if rules:
        files["rules.yaml"] = rules_yaml(*rules)
    return findings_text(root, files)


def test_placement_naming_a_host_that_does_not_exist(tmp_path: Path) -> None:
    assert _placement_findings(tmp_path, "web-1: kvm-01", "web-2: kvm-9") == [
        "lab/placement.yaml:7:12: error: spec.vms.web-2: host 'kvm-9' does not exist "
        "(did you mean 'kvm-03'? the Cluster has kvm-01, kvm-02, kvm-03)"
    ]


def test_placement_on_a_host_in_maintenance_is_a_warning(tmp_path: Path) -> None:
    cluster = cluster_yaml(
        '{name: kvm-01, uri: "test:///one"}',
        '{name: kvm-02, uri: "test:///two", maintenance: true}',
    )
    files = {"cluster.yaml": cluster, "placement.yaml": placement_yaml("web-1: kvm-02")}
    assert findings_text(tmp_path, files) == [
        "lab/placement.yaml:6:12: warning: spec.vms.web-1: web-1 is placed on kvm-02, which is "
        "in maintenance (place it on another host; VMs are moved off hosts in maintenance)"
    ]


def test_placement_contradicting_a_pin(tmp_path: Path) -> None:
    assert _placement_findings(
        tmp_path,
        "erp: kvm-01",
        rules=("{name: erp-pinned, type: pin, vms: {names: [erp]}, hosts: {names: [kvm-03]}}",),
    ) == [
        "lab/placement.yaml:6:10: error: spec.vms.erp: erp is placed on kvm-01 but pin "
        "erp-pinned pins it to kvm-03 (write erp: kvm-03, or change the pin)"
    ]


def test_placement_against_required_host_rules(tmp_path: Path) -> None:
    assert _placement_findings(
        tmp_path,
        "db-1: kvm-01",
        "db-2: kvm-02",
        rules=(
            "{name: off-old, type: hostAntiAffinity, vms: {names: [db-*]}, "
            "hosts: {labels: {gen: old}}}",
            "{name: rack2, type: hostAffinity, vms: {names: [db-2]}, " "hosts: {names: [kvm-03]}}",
        ),
    ) == [
        "lab/placement.yaml:6:11: error: spec.vms.db-1: db-1 is placed on kvm-01, which "
        "hostAntiAffinity off-old forbids (place it on another host)",
        "lab/placement.yaml:7:11: error: spec.vms.db-2: db-2 is placed on kvm-02, which "
        "hostAffinity rack2 does not allow (use one of kvm-03)",
    ]


def test_placement_breaking_a_required_anti_affinity(tmp_path: Path) -> None:
    assert _placement_findings(
        tmp_path,
        "db-1: kvm-02",
        "db-2: kvm-03",
        rules=("{name: apart, type: antiAffinity, vms: {names: [db-*]}, topologyKey: rack}",),
    ) == [
        "lab/placement.yaml:7:11: error: spec.vms.db-2: db-1 and db-2 are both placed on "
        "rack=r2, but antiAffinity apart keeps them apart (place one of them elsewhere)"
    ]


def test_two_members_on_one_host_without_the_topology_label_are_together(
    tmp_path: Path,
) -> None:
    files = {
        "cluster.yaml": cluster_yaml(*HOSTS, UNLABELLED),
        "rules.yaml": rules_yaml(
            "{name: apart, type: antiAffinity, vms: {names: [db-*]}, topologyKey: rack}"
        ),
        "placement.yaml": placement_yaml("db-1: kvm-04", "db-2: kvm-04", "db-3: kvm-01"),
    }
    assert findings_text(tmp_path, files) == [
        "lab/placement.yaml:7:11: error: spec.vms.db-2: db-1 and db-2 are both placed on "
        "kvm-04 (it has no rack label, so it is its own domain), but antiAffinity apart keeps "
        "them apart (place one of them elsewhere)"
    ]


def test_placement_breaking_a_required_affinity(tmp_path: Path) -> None:
    assert _placement_findings(
        tmp_path,
        "app-1: kvm-01",
        "app-2: kvm-01",
        "app-3: kvm-02",
        rules=("{name: together, type: affinity, vms: {names: [app-*]}}",),
    ) == [
        "lab/placement.yaml:8:12: error: spec.vms.app-3: app-3 is placed on kvm-02 and app-1 "
        "on kvm-01, but affinity together keeps them on one host (place them on the same host)"
    ]


def test_preferred_rules_do_not_make_errors(tmp_path: Path) -> None:
    third = (
        "{name: g, type: hostAffinity, vms: {names: [a]}, "
        "hosts: {labels: {x: y}}, enforcement: preferred}"
    )
    assert rule_findings(
        tmp_path,
        "{name: t, type: affinity, vms: {names: [a, b]}, enforcement: preferred}",
        "{name: u, type: antiAffinity, vms: {names: [a, b]}}",
        third,
    ) == [
        f"lab/rules.yaml:8:{col(third, '{x: y}')}: warning: "
        "spec.rules[2].hosts.labels: no host has the labels "
        "x=y, so g selects no host (add the labels to a host in the Cluster, or fix the "
        "selector)"
    ]


def test_vm_name_close_to_a_placed_vm_is_a_warning(tmp_path: Path) -> None:
    rule = "{name: apart, type: antiAffinity, vms: {names: [db-01, web-1, app-1, 'db-*']}}"
    files = {
        "cluster.yaml": cluster_yaml(),
        "rules.yaml": rules_yaml(rule),
        "placement.yaml": placement_yaml("db-1: kvm-01", "web-1: kvm-02"),
    }
    # app-1 is like no placed VM: it may well exist unplaced, so it is not warned about.
    assert findings_text(tmp_path, files) == [
        f"lab/rules.yaml:6:{col(rule, 'db-01')}: warning: spec.rules[0].vms.names[0]: "
        "antiAffinity apart names 'db-01', which matches no VM in the Placement "
        "(did you mean 'db-1'? ignore this if db-01 is a VM the Placement does not list)"
    ]


def test_topology_key_no_host_has_is_a_warning(tmp_path: Path) -> None:
    first = "{name: apart, type: antiAffinity, vms: {names: [a, b]}, topologyKey: rak}"
    second = "{name: wide, type: spread, vms: {labels: {app: web}}, topologyKey: zone}"
    assert rule_findings(tmp_path, first, second) == [
        f"lab/rules.yaml:6:{col(first, 'rak}')}: warning: spec.rules[0].topologyKey: no host "
        "has the label 'rak', so for apart every host counts as its own domain (did you mean "
        "'rack'? host label keys: gen, gpu, rack)",
        f"lab/rules.yaml:7:{col(second, 'zone')}: warning: spec.rules[1].topologyKey: no host "
        "has the label 'zone', so for wide no host takes part in the spread (host label keys: "
        "gen, gpu, rack)",
    ]
