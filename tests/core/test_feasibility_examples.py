"""Whether one move may happen, on fixed examples: each limit at its exact edge and one step
past it, each refusal's category and text in full, and the preferred rules a move breaks or
repairs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from reconciler.core.feasibility import Refusal, check_move, check_rules, preferred_delta
from reconciler.core.state import Model, NewVm, State, build
from reconciler.model.cluster import Host
from reconciler.model.rules import Rule
from reconciler.model.snapshot import HostState, VmState
from tests.core.builders import GIB, desired, host, host_state, rule, snapshot, vm


def _state(
    hosts: Sequence[Host],
    host_states: Sequence[HostState],
    vms: Sequence[VmState],
    *,
    rules: Sequence[Rule] = (),
    new_vm: NewVm | None = None,
    **policy: Any,
) -> tuple[Model, State]:
    return build(desired(hosts, rules=rules, **policy), snapshot(host_states, vms), new_vm=new_vm)


def _index(model: Model, name: str) -> int:
    """The VM's index; a new VM (not in ``vm_index``) is the last."""
    return model.vm_index.get(name, len(model.vms) - 1)


def _move(
    model: Model, state: State, name: str, target: str, *, alone: bool = True
) -> Refusal | None:
    return check_move(state, _index(model, name), model.host_index[target], alone=alone)


def _two_hosts(
    x: VmState, *others: VmState, b_cpus: int = 16, b_gib: int = 64, **policy: Any
) -> tuple[Model, State]:
    """Hosts a (index 0, where ``x`` runs) and b; ``others`` run where they say."""
    return _state(
        [host("a"), host("b")],
        [host_state("a"), host_state("b", cpus=b_cpus, memory_gib=b_gib)],
        [x, *others],
        **policy,
    )


# --- room --------------------------------------------------------------------------------


def test_huge_pages_at_the_room_are_accepted_one_page_over_refused_by_category() -> None:
    x = vm("x", "a").model_copy(update={"hugepage_kib": 2048, "hugepages": 300})
    y = vm("y", "b").model_copy(update={"hugepage_kib": 2048, "hugepages": 200})
    for free, refusal in [
        (300, None),
        (
            299,
            Refusal(
                "hugepages",
                "b has room for 499 hugepages of 2048 KiB, the VMs planned there need 500",
            ),
        ),
    ]:
        b = host_state("b").model_copy(update={"hugepages_free": {2048: free}})
        model, state = _state([host("a"), host("b")], [host_state("a"), b], [x, y], hostLimit=100)
        assert _move(model, state, "x", "b") == refusal


def test_a_vm_that_exactly_fits_the_memory_left_is_accepted() -> None:
    model, state = _two_hosts(
        vm("x", "a", memory_gib=4), vm("y", "b", memory_gib=4), b_gib=8, hostLimit=100
    )
    assert _move(model, state, "x", "b") is None


def test_a_vm_one_byte_larger_than_the_memory_left_is_refused() -> None:
    model, state = _two_hosts(
        vm("x", "a", memory_gib=4 + 1 / GIB), vm("y", "b", memory_gib=4), b_gib=8, hostLimit=100
    )
    assert _move(model, state, "x", "b") == Refusal(
        "memory", "b has 4GiB free, the VM needs 4.0GiB"
    )


def test_a_vm_that_exactly_fits_the_vcpus_left_is_accepted() -> None:
    model, state = _two_hosts(
        vm("x", "a", vcpus=2), vm("y", "b", vcpus=2), b_cpus=4, cpuOvercommit=1, hostLimit=100
    )
    assert _move(model, state, "x", "b") is None


def test_a_vm_one_vcpu_past_the_capacity_is_refused() -> None:
    model, state = _two_hosts(
        vm("x", "a", vcpus=3), vm("y", "b", vcpus=2), b_cpus=4, cpuOvercommit=1, hostLimit=100
    )
    assert _move(model, state, "x", "b") == Refusal(
        "vcpus", "b would carry 5 vCPUs, at most 4 allowed"
    )


def test_a_vcpu_capacity_with_a_fraction_is_shown_as_it_is() -> None:
    model, state = _two_hosts(
        vm("x", "a", vcpus=6), vm("y", "b", vcpus=1), b_cpus=4, cpuOvercommit=1.5, hostLimit=100
    )
    assert _move(model, state, "x", "b") == Refusal(
        "vcpus", "b would carry 7 vCPUs, at most 6 allowed"
    )


def test_cpu_use_that_reaches_exactly_the_host_limit_is_accepted() -> None:
    model, state = _two_hosts(
        vm("x", "a", cpu_used=1.0), vm("y", "b", cpu_used=1.0), b_cpus=4, hostLimit=50
    )
    assert _move(model, state, "x", "b") is None


def test_cpu_use_past_the_host_limit_is_refused() -> None:
    model, state = _two_hosts(
        vm("x", "a", cpu_used=1.04), vm("y", "b", cpu_used=1.0), b_cpus=4, hostLimit=50
    )
    assert _move(model, state, "x", "b") == Refusal(
        "hostLimit", "b CPU would reach 51% (hostLimit 50%)"
    )


def test_memory_use_that_reaches_exactly_the_host_limit_is_accepted() -> None:
    model, state = _two_hosts(
        vm("x", "a", memory_gib=4), vm("y", "b", memory_gib=4), b_gib=16, hostLimit=50
    )
    assert _move(model, state, "x", "b") is None


def test_memory_use_past_the_host_limit_is_refused() -> None:
    model, state = _two_hosts(
        vm("x", "a", memory_gib=4.5), vm("y", "b", memory_gib=4), b_gib=16, hostLimit=50
    )
    assert _move(model, state, "x", "b") == Refusal(
        "hostLimit", "b memory would reach 53% (hostLimit 50%)"
    )


def test_a_host_limit_with_a_fraction_is_shown_as_it_is() -> None:
    model, state = _two_hosts(
        vm("x", "a", cpu_used=2.0), vm("y", "b", cpu_used=0.0), b_cpus=4, hostLimit=33.5
    )
    assert _move(model, state, "x", "b") == Refusal(
        "hostLimit", "b CPU would reach 50% (hostLimit 33.5%)"
    )


# --- hosts -------------------------------------------------------------------------------


def test_an_unreachable_target_is_refused() -> None:
    model, state = _state(
        [host("a"), host("b")],
        [host_state("a"), host_state("b", reachable=False)],
        [vm("x", "a")],
    )
    assert _move(model, state, "x", "b") == Refusal("unreachable", "b is unreachable")


def test_a_target_in_maintenance_is_refused() -> None:
    model, state = _state(
        [host("a"), host("b", maintenance=True)], [host_state("a"), host_state("b")], [vm("x", "a")]
    )
    assert _move(model, state, "x", "b") == Refusal("maintenance", "b is in maintenance")


def test_the_host_a_vm_runs_on_is_no_target() -> None:
    model, state = _two_hosts(vm("x", "a"))
    assert _move(model, state, "x", "a") == Refusal("current", "the VM already runs on a")


@pytest.mark.parametrize(("source", "target"), [("a", "b"), ("b", "a")])
def test_a_vm_never_moves_to_another_architecture(source: str, target: str) -> None:
    model, state = _state(
        [host("a"), host("b")],
        [host_state("a", arch="x86_64"), host_state("b", arch="aarch64")],
        [vm("x", source)],
    )
    arches = {"a": "x86_64", "b": "aarch64"}
    assert _move(model, state, "x", target) == Refusal(
        "arch", f"{target} is {arches[target]}, the VM runs on {arches[source]}"
    )


def test_a_vm_not_placed_yet_is_held_to_no_architecture() -> None:
    model, state = _state(
        [host("a"), host("b")],
        [host_state("a", arch="aarch64"), host_state("b", arch="x86_64")],
        [vm("y", "b")],
        new_vm=NewVm(name="new", vcpus=1, memory=GIB, labels={}),
    )
    assert _move(model, state, "new", "a") is None


# --- required rules ----------------------------------------------------------------------

THREE = ([host("a"), host("b"), host("c")], [host_state("a"), host_state("b"), host_state("c")])


@pytest.mark.parametrize(
    ("kind", "hosts", "text"),
    [
        ("pin", {"names": ["a"]}, "pin keep keeps it off b"),
        ("hostAffinity", {"names": ["a", "c"]}, "host affinity keep keeps it off b"),
        ("hostAntiAffinity", {"names": ["b"]}, "host anti-affinity keep keeps it off b"),
    ],
)
def test_a_required_host_rule_keeps_a_vm_off_a_host_it_does_not_permit(
    kind: str, hosts: dict[str, list[str]], text: str
) -> None:
    keep = rule(name="keep", type=kind, vms={"names": ["x"]}, hosts=hosts)
    model, state = _state(*THREE, [vm("x", "a")], rules=[keep])
    assert _move(model, state, "x", "b") == Refusal("rule keep", text)
    assert _move(model, state, "x", "c") is None or kind == "pin"


def test_a_preferred_host_rule_keeps_no_vm_off_a_host() -> None:
    rather = rule(
        name="rather",
        type="hostAntiAffinity",
        vms={"names": ["x"]},
        hosts={"names": ["b"]},
        enforcement="preferred",
    )
    model, state = _state(*THREE, [vm("x", "a")], rules=[rather])
    assert _move(model, state, "x", "b") is None


def test_a_required_group_rule_listed_after_a_preferred_one_is_still_checked() -> None:
    rules = [
        rule(name="a-rather", type="antiAffinity", vms={"names": ["*"]}, enforcement="preferred"),
        rule(name="b-apart", type="antiAffinity", vms={"names": ["*"]}),
    ]
    model, state = _state(*THREE, [vm("x", "a"), vm("z", "b")], rules=rules)
    assert _move(model, state, "x", "b") == Refusal(
        "rule b-apart", "anti-affinity b-apart would be broken on b"
    )


def test_a_required_rule_after_one_the_move_leaves_in_its_domain_is_still_checked() -> None:
    racks = {"a": "r1", "b": "r1", "c": "r2"}
    hosts = [host(h, labels={"rack": r}) for h, r in racks.items()]
    rules = [
        rule(name="a-racks", type="antiAffinity", vms={"names": ["*"]}, topologyKey="rack"),
        rule(name="b-hosts", type="antiAffinity", vms={"names": ["*"]}),
    ]
    model, state = _state(hosts, THREE[1], [vm("x", "a"), vm("z", "b")], rules=rules)
    assert _move(model, state, "x", "b") == Refusal(
        "rule b-hosts", "anti-affinity b-hosts would be broken on b"
    )


def test_a_move_that_keeps_a_required_rule_s_measure_is_accepted() -> None:
    hosts = [host(h) for h in "abcd"]
    apart = rule(name="apart", type="antiAffinity", vms={"names": ["*"]})
    model, state = _state(
        hosts,
        [host_state(h) for h in "abcd"],
        [vm("x", "a"), vm("y", "b"), vm("z", "c")],
        rules=[apart],
    )
    assert _move(model, state, "x", "d") is None


def test_a_move_that_lowers_a_broken_required_rule_s_measure_is_accepted() -> None:
    apart = rule(name="apart", type="antiAffinity", vms={"names": ["*"]})
    model, state = _state(*THREE, [vm("x", "a"), vm("y", "a"), vm("z", "b")], rules=[apart])
    assert _move(model, state, "x", "c") is None
    assert _move(model, state, "x", "b") is None, "1 member too many before and after: no worse"


def test_an_affinity_member_never_leaves_its_partner_alone() -> None:
    pair = rule(name="pair", type="affinity", vms={"names": ["*"]})
    model, state = _state(*THREE, [vm("x", "a"), vm("y", "a")], rules=[pair])
    v, b = model.vm_index["x"], model.host_index["b"]
    assert check_rules(state, v, b) == Refusal(
        "rule pair", "affinity pair holds it with another member on a: they move together"
    )
    assert _move(model, state, "x", "b") == check_rules(state, v, b)


def test_an_affinity_member_moving_with_its_unit_is_judged_by_the_measure() -> None:
    pair = rule(name="pair", type="affinity", vms={"names": ["*"]})
    model, state = _state(*THREE, [vm("x", "a"), vm("y", "a")], rules=[pair])
    expected = Refusal("rule pair", "affinity pair would be broken on b")
    assert _move(model, state, "x", "b", alone=False) == expected
    v, b = model.vm_index["x"], model.host_index["b"]
    assert check_rules(state, v, b, alone=False) == expected


def test_a_lone_affinity_member_may_join_its_partner() -> None:
    pair = rule(name="pair", type="affinity", vms={"names": ["*"]})
    model, state = _state(*THREE, [vm("x", "a"), vm("y", "b")], rules=[pair])
    assert _move(model, state, "x", "b") is None
    assert _move(model, state, "x", "c") is None, "still one member apart: no worse"


def test_a_preferred_affinity_does_not_hold_a_vm_with_its_partner() -> None:
    pair = rule(name="pair", type="affinity", vms={"names": ["*"]}, enforcement="preferred")
    model, state = _state(*THREE, [vm("x", "a"), vm("y", "a")], rules=[pair])
    assert _move(model, state, "x", "b") is None


# --- preferred rules ---------------------------------------------------------------------


def _delta(model: Model, state: State, name: str, target: str) -> tuple[int, int]:
    return preferred_delta(state, _index(model, name), model.host_index[target])


@pytest.mark.parametrize(("source", "target", "expected"), [("a", "b", (0, 1)), ("b", "a", (1, 0))])
def test_a_preferred_host_rule_is_repaired_or_broken_by_a_move(
    source: str, target: str, expected: tuple[int, int]
) -> None:
    rather = rule(
        name="rather-b",
        type="hostAffinity",
        vms={"names": ["x"]},
        hosts={"names": ["b"]},
        enforcement="preferred",
    )
    model, state = _state(*THREE, [vm("x", source)], rules=[rather])
    assert _delta(model, state, "x", target) == expected
    assert _delta(model, state, "x", "c") == ((0, 0) if source == "a" else (1, 0))


def test_a_vm_not_placed_yet_repairs_no_preferred_host_rule() -> None:
    rather = rule(
        name="rather-b",
        type="hostAffinity",
        vms={"names": ["new"]},
        hosts={"names": ["b"]},
        enforcement="preferred",
    )
    model, state = _state(
        *THREE,
        [vm("y", "c")],
        rules=[rather],
        new_vm=NewVm(name="new", vcpus=1, memory=GIB, labels={}),
    )
    assert _delta(model, state, "new", "b") == (0, 0)
    assert _delta(model, state, "new", "a") == (1, 0)


def test_required_rules_count_in_no_preferred_delta_and_hide_none_after_them() -> None:
    rules = [
        rule(name="a-must", type="hostAffinity", vms={"names": ["x"]}, hosts={"names": ["b"]}),
        rule(
            name="b-rather",
            type="hostAffinity",
            vms={"names": ["x"]},
            hosts={"names": ["b"]},
            enforcement="preferred",
        ),
        rule(name="c-apart", type="antiAffinity", vms={"names": ["*"]}),
        rule(name="d-apart", type="antiAffinity", vms={"names": ["*"]}, enforcement="preferred"),
    ]
    model, state = _state(*THREE, [vm("x", "a"), vm("y", "c")], rules=rules)
    assert _delta(model, state, "x", "b") == (0, 1)
    assert _delta(model, state, "x", "c") == (1, 0)


def test_a_preferred_group_rule_is_broken_or_repaired_by_a_move() -> None:
    apart = rule(name="apart", type="antiAffinity", vms={"names": ["*"]}, enforcement="preferred")
    model, state = _state(*THREE, [vm("x", "a"), vm("y", "b"), vm("z", "b")], rules=[apart])
    assert _delta(model, state, "x", "b") == (1, 0)
    assert _delta(model, state, "y", "c") == (0, 1)
    assert _delta(model, state, "y", "a") == (0, 0)


def test_a_preferred_group_rule_after_one_whose_domain_stays_still_counts() -> None:
    racks = {"a": "r1", "b": "r1", "c": "r2"}
    hosts = [host(h, labels={"rack": r}) for h, r in racks.items()]
    rules = [
        rule(
            name="a-racks",
            type="antiAffinity",
            vms={"names": ["*"]},
            topologyKey="rack",
            enforcement="preferred",
        ),
        rule(name="b-hosts", type="antiAffinity", vms={"names": ["*"]}, enforcement="preferred"),
    ]
    model, state = _state(hosts, THREE[1], [vm("x", "a"), vm("z", "b")], rules=rules)
    assert _delta(model, state, "x", "b") == (1, 0)


@pytest.mark.parametrize(("source", "target", "expected"), [("a", "b", (0, 2)), ("b", "a", (2, 0))])
def test_every_preferred_host_rule_a_move_breaks_or_repairs_counts(
    source: str, target: str, expected: tuple[int, int]
) -> None:
    rules = [
        rule(
            name=f"{n}-rather-b",
            type="hostAffinity",
            vms={"names": ["x"]},
            hosts={"names": ["b"]},
            enforcement="preferred",
        )
        for n in ("one", "two")
    ]
    rules.append(
        rule(
            name="three-anywhere",
            type="hostAffinity",
            vms={"names": ["x"]},
            hosts={"names": ["a", "b"]},
            enforcement="preferred",
        )
    )
    model, state = _state(*THREE, [vm("x", source)], rules=rules)
    assert _delta(model, state, "x", target) == expected


@pytest.mark.parametrize(("source", "target", "expected"), [("a", "b", (2, 0)), ("b", "a", (0, 2))])
def test_preferred_host_and_group_rules_a_move_breaks_or_repairs_add_up(
    source: str, target: str, expected: tuple[int, int]
) -> None:
    rules = [
        rule(
            name="rather-a",
            type="hostAffinity",
            vms={"names": ["x"]},
            hosts={"names": ["a"]},
            enforcement="preferred",
        ),
        rule(name="apart", type="antiAffinity", vms={"names": ["*"]}, enforcement="preferred"),
    ]
    model, state = _state(*THREE, [vm("x", source), vm("y", "b")], rules=rules)
    assert _delta(model, state, "x", target) == expected
