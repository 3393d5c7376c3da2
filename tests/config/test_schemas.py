"""schemas/ matches the models, and the example cluster passes its own JSON Schemas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from reconciler.config.schemas import SCHEMA_MODELS, json_schema, schema_name, stale_schema_files

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = {
    "cluster.yaml": "cluster",
    "policy.yaml": "policy",
    "rules.yaml": "rules",
    "placement.yaml": "placement",
}


def _validator(name: str) -> Draft202012Validator:
    schema = json.loads((REPO / "schemas" / f"{name}.json").read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _example(file: str) -> Any:
    return yaml.safe_load((REPO / "cluster-state" / file).read_text())


def test_schemas_folder_is_up_to_date() -> None:
    assert stale_schema_files(REPO / "schemas") == [], "run: reconciler schema --write"


def test_a_changed_schema_is_reported_stale(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text("{}\n")
    assert "cluster.json" in stale_schema_files(tmp_path)


def test_schemas_are_draft_2020_12_with_an_id() -> None:
    for name in SCHEMA_MODELS:
        schema = json_schema(name)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["$id"] == f"https://placement-reconciler.dev/schemas/{name}.json"


def test_schema_keys_are_the_yaml_keys() -> None:
    spec = json_schema("policy")["$defs"]["BalancePolicySpec"]["properties"]
    assert "holdRounds" in spec
    assert "hold_rounds" not in spec


@pytest.mark.parametrize(("file", "name"), sorted(EXAMPLES.items()))
def test_example_passes_its_json_schema(file: str, name: str) -> None:
    errors = [e.message for e in _validator(name).iter_errors(_example(file))]
    assert errors == []


@pytest.mark.parametrize(("file", "name"), sorted(EXAMPLES.items()))
def test_example_names_its_schema_on_the_first_line(file: str, name: str) -> None:
    first = (REPO / "cluster-state" / file).read_text().splitlines()[0]
    assert first == f"# yaml-language-server: $schema=../schemas/{name}.json"


def test_json_schema_rejects_an_unknown_key() -> None:
    doc = _example("cluster.yaml")
    doc["spec"]["hosts"][0]["maintenace"] = True
    assert [e.message for e in _validator("cluster").iter_errors(doc)] == [
        "Additional properties are not allowed ('maintenace' was unexpected)"
    ]


def test_schema_names_accept_kind_names() -> None:
    assert [schema_name(k) for k in ("BalancePolicy", "placementrules", "Cluster", "x")] == [
        "policy",
        "rules",
        "cluster",
        None,
    ]
