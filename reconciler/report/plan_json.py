"""A plan as JSON: every field, in model order, with map keys sorted so output is stable."""

from __future__ import annotations

import json
from typing import Any

from reconciler.model.plan import PlaceResult, Plan

# Plan fields that are maps keyed by data (VM or architecture names), not by field names.
_MAP_FIELDS = ("placement", "imbalanceRounds")


def plan_document(plan: Plan) -> dict[str, Any]:
    """The plan as plain JSON data (``model_dump`` in json mode, by alias), map keys sorted."""
    data = plan.model_dump(mode="json", by_alias=True)
    for key in _MAP_FIELDS:
        if isinstance(data.get(key), dict):
            data[key] = dict(sorted(data[key].items()))
    return data


def plan_json(plan: Plan) -> str:
    """The plan as indented JSON text, ending with a newline."""
    return json.dumps(plan_document(plan), indent=2, ensure_ascii=False) + "\n"


def place_json(result: PlaceResult) -> str:
    """A placement answer as indented JSON text, ending with a newline."""
    data = result.model_dump(mode="json", by_alias=True)
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
