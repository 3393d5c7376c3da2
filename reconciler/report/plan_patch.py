"""A plan as an RFC 6902 JSON Patch against the Placement document in the cluster folder.

Applying the patch to the current Placement (as loaded, by alias) gives the proposed one, whose
``spec.vms`` is ``Plan.placement``. Tools that keep the YAML can apply it; reviewers can read it.
"""

from __future__ import annotations

import json
from typing import Any

from reconciler.model.placement import Placement
from reconciler.model.plan import Plan


def placement_document(placement: Placement) -> dict[str, Any]:
    """The Placement as JSON data by alias, VM keys sorted (the form the patch applies to)."""
    data = placement.model_dump(mode="json", by_alias=True)
    data["spec"]["vms"] = dict(sorted(data["spec"]["vms"].items()))
    return data


def proposed_placement_document(placement: Placement, plan: Plan) -> dict[str, Any]:
    """The current Placement document with ``spec.vms`` replaced by the plan's placement."""
    data = placement_document(placement)
    data["spec"]["vms"] = dict(sorted(plan.placement.items()))
    return data


def plan_patch_ops(placement: Placement, plan: Plan) -> list[dict[str, Any]]:
    """RFC 6902 operations turning the current Placement into the proposed one; [] if equal.

    A Placement without entries may be written ``spec: {}`` or ``spec: {vms: {}}``: its patch
    adds the whole ``/spec/vms`` map (``add`` replaces an existing member), so it applies to
    either form.
    """
    if not placement.spec.vms and plan.placement:
        return [{"op": "add", "path": "/spec/vms", "value": dict(sorted(plan.placement.items()))}]
    import jsonpatch  # only here: placement_changes, on every plan, needs none of it

    patch = jsonpatch.make_patch(
        placement_document(placement), proposed_placement_document(placement, plan)
    )
    ops: list[dict[str, Any]] = list(patch.patch)
    return ops


def placement_changes(placement: Placement, plan: Plan) -> bool:
    """Whether ``plan_patch_ops`` would be non-empty, without diffing the documents.

    Only ``spec.vms`` differs between the two documents, and both sides are flat name-to-host
    maps, so plain map equality decides it (jsonpatch took a tenth of a second at 27,000 VMs).
    """
    return placement.spec.vms != plan.placement


def plan_patch(placement: Placement, plan: Plan) -> str:
    """The patch as indented JSON text, ending with a newline."""
    return json.dumps(plan_patch_ops(placement, plan), indent=2, ensure_ascii=False) + "\n"
