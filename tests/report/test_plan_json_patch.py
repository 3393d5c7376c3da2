from __future__ import annotations

import json

import jsonpatch
from hypothesis import given
from hypothesis import strategies as st

from reconciler.report.plan_json import plan_json
from reconciler.report.plan_patch import (
    placement_changes,
    placement_document,
    plan_patch,
    plan_patch_ops,
)
from tests.report.plans import busy_plan, empty_plan, placement


def test_json_has_every_field_in_model_order_and_sorted_maps() -> None:
    plan = busy_plan()
    data = json.loads(plan_json(plan))
    assert list(data) == [f.alias for f in type(plan).model_fields.values()]
    assert list(data["placement"]) == sorted(plan.placement)
    assert list(data["imbalanceRounds"]) == ["aarch64", "x86_64"]
    assert data["moves"][2]["reason"] == "AntiAffinity"
    assert data["createdAt"] == "2025-03-01T12:00:00Z"


def test_json_is_stable_whatever_the_order_of_the_planner_maps() -> None:
    plan = busy_plan()
    shuffled = plan.model_copy(update={"placement": dict(reversed(list(plan.placement.items())))})
    assert plan_json(shuffled) == plan_json(plan)


def test_patch_turns_the_current_placement_into_the_proposed_one() -> None:
    plan = busy_plan()
    current = placement({"web-1": "kvm-01", "web-2": "kvm-01", "old-vm": "kvm-04"})
    ops = json.loads(plan_patch(current, plan))
    assert isinstance(ops, list)
    assert ops == plan_patch_ops(current, plan)
    for op in ops:
        assert op["op"] in {"add", "remove", "replace", "move", "copy", "test"}
        assert op["path"].startswith("/spec/vms/")
    result = jsonpatch.apply_patch(placement_document(current), ops)
    assert result["spec"]["vms"] == plan.placement
    assert result["metadata"] == {"name": "lab", "annotations": {}}
    assert result["apiVersion"] == "placement/v1alpha1"


def test_patch_is_empty_when_the_placement_does_not_change() -> None:
    plan = empty_plan().model_copy(update={"placement": {"web-1": "kvm-01"}})
    assert plan_patch_ops(placement({"web-1": "kvm-01"}), plan) == []
    assert plan_patch(placement({"web-1": "kvm-01"}), plan) == "[]\n"


def test_patch_applies_to_every_form_of_an_empty_placement_as_written() -> None:
    import yaml

    plan = busy_plan()
    header = "apiVersion: placement/v1alpha1\nkind: Placement\nmetadata: {name: lab}\n"
    ops = plan_patch_ops(placement({}), plan)
    for spec in ("spec: {}\n", "spec: {vms: {}}\n", "spec:\n  vms: {}\n"):
        written = yaml.safe_load(header + spec)
        result = jsonpatch.apply_patch(written, ops)
        assert result["spec"]["vms"] == plan.placement, spec


_maps = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["h1", "h2", "h3"]))


@given(current=_maps, proposed=_maps)
def test_placement_changes_says_whether_the_patch_has_operations(
    current: dict[str, str], proposed: dict[str, str]
) -> None:
    plan = empty_plan().model_copy(update={"placement": proposed})
    assert placement_changes(placement(current), plan) == bool(
        plan_patch_ops(placement(current), plan)
    )
