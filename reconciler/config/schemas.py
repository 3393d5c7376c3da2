"""JSON Schemas of the four kinds and of every JSON the CLI writes, generated from the models.

The four kinds and rollouts are what users write; snapshot, plan, place result, history, status,
rollout plans, statuses and records and findings are what ``observe``, ``plan``, ``place``,
``validate``, ``rollout``, ``run`` and the status store write,
all camelCase with ``apiVersion`` and ``kind`` (findings: an array). Editors use them through
the ``# yaml-language-server: $schema=...`` line of each file; ``reconciler schema --write``
keeps ``schemas/`` in step with the models.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, TypeAdapter

from reconciler.config.findings import Finding
from reconciler.model.audit import MoveHistory
from reconciler.model.cluster import Cluster
from reconciler.model.history import History
from reconciler.model.impact import Impact
from reconciler.model.placement import Placement
from reconciler.model.plan import PlaceResult, Plan
from reconciler.model.policy import BalancePolicy
from reconciler.model.rollout import Rollout
from reconciler.model.rollout_progress import RolloutProgress
from reconciler.model.rollout_report import RolloutPlan, RolloutStatus
from reconciler.model.rules import PlacementRules
from reconciler.model.simulation import HostKinds, SimulationReport
from reconciler.model.snapshot import Snapshot
from reconciler.model.status import ReconcileStatus

SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_BASE: Final = "https://placement-reconciler.dev/schemas/"

SCHEMA_MODELS: Final[dict[str, type[BaseModel]]] = {
    "cluster": Cluster,
    "policy": BalancePolicy,
    "rules": PlacementRules,
    "placement": Placement,
    "rollout": Rollout,
    "snapshot": Snapshot,
    "plan": Plan,
    "place": PlaceResult,
    "history": History,
    "status": ReconcileStatus,
    "movehistory": MoveHistory,
    "impact": Impact,
    "rolloutplan": RolloutPlan,
    "rolloutprogress": RolloutProgress,
    "rolloutstatus": RolloutStatus,
    "simulation": SimulationReport,
    "hostkinds": HostKinds,
}
"""Schema name (the file is ``<name>.json``) -> model."""

LIST_SCHEMAS: Final[dict[str, TypeAdapter[Any]]] = {
    "findings": TypeAdapter(list[Finding]),
}
"""Schemas of JSON arrays: ``validate --format json``."""

_ALIASES: Final = {
    "balancepolicy": "policy",
    "placementrules": "rules",
    "placeresult": "place",
    "reconcilestatus": "status",
}


def schema_name(kind: str) -> str | None:
    """The schema name for ``kind`` (``BalancePolicy``, ``policy``, ``cluster``...), if any."""
    key = kind.lower().removesuffix(".json")
    key = _ALIASES.get(key, key)
    return key if key in SCHEMA_MODELS or key in LIST_SCHEMAS else None


def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one kind, keys as written in YAML."""
    if name in LIST_SCHEMAS:
        body = LIST_SCHEMAS[name].json_schema(by_alias=True, mode="serialization")
    else:
        body = SCHEMA_MODELS[name].model_json_schema(by_alias=True, mode="validation")
    return {"$schema": SCHEMA_DIALECT, "$id": f"{SCHEMA_BASE}{name}.json", **body}


def schema_text(name: str) -> str:
    """The file content of one schema: indented JSON and a final newline."""
    return json.dumps(json_schema(name), indent=2, ensure_ascii=False) + "\n"


def schema_files() -> dict[str, str]:
    """File name -> content of every schema."""
    return {f"{name}.json": schema_text(name) for name in [*SCHEMA_MODELS, *LIST_SCHEMAS]}


def stale_schema_files(folder: Path) -> list[str]:
    """Names of schema files in ``folder`` that are missing or differ from the models."""
    stale = []
    for file, text in schema_files().items():
        path = folder / file
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(file)
    return stale


def write_schemas(folder: Path) -> list[Path]:
    """Write every schema into ``folder``; returns the files that changed."""
    folder.mkdir(parents=True, exist_ok=True)
    changed = []
    for file in stale_schema_files(folder):
        path = folder / file
        path.write_text(schema_files()[file], encoding="utf-8")
        changed.append(path)
    return changed
