"""docs/cluster-state.md and the CI files stay in step with the models and the CLI."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from reconciler.config.schemas import SCHEMA_MODELS

REPO = Path(__file__).resolve().parents[2]


def _keys(model: type[BaseModel], seen: set[type[BaseModel]]) -> set[str]:
    """Every YAML key a model and its nested models accept."""
    if model in seen:
        return set()
    seen.add(model)
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        keys.add(field.alias or name)
        stack: list[Any] = [field.annotation]
        while stack:
            tp = stack.pop()
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                keys |= _keys(tp, seen)
            stack.extend(typing.get_args(tp))
    return keys


def test_reference_mentions_every_key_of_the_four_kinds() -> None:
    text = re.sub(r"```.*?```", "", (REPO / "docs" / "cluster-state.md").read_text(), flags=re.S)
    seen: set[type[BaseModel]] = set()
    keys: set[str] = set()
    for name in ("cluster", "policy", "rules", "placement"):
        keys |= _keys(SCHEMA_MODELS[name], seen)
    documented = {
        part for span in re.findall(r"`([^`]+)`", text) for part in re.split(r"[.\[\] ]", span)
    }
    missing = sorted(keys - documented)
    assert missing == []


def test_reusable_workflow_takes_a_path() -> None:
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "validate.yml").read_text())
    call = workflow[True]["workflow_call"]  # YAML 1.1 reads the key `on` as true
    assert call["inputs"]["path"]["default"] == "cluster-state/"
    steps = workflow["jobs"]["validate"]["steps"]
    assert any("reconciler validate --format text" in s.get("run", "") for s in steps)


def test_composite_action_runs_validate() -> None:
    action = yaml.safe_load((REPO / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    assert action["inputs"]["path"]["default"] == "cluster-state/"
    assert any(
        "reconciler validate --format text" in s.get("run", "") for s in action["runs"]["steps"]
    )


def test_ci_runs_make_test() -> None:
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())
    runs = [s.get("run") for s in workflow["jobs"]["test"]["steps"]]
    assert "make test" in runs


def test_ci_runs_the_lab_tests_as_root_and_fails_when_the_lab_cannot_start() -> None:
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())
    job = workflow["jobs"]["lab"]
    runs = " ".join(s.get("run", "") for s in job["steps"])
    # root in a Debian 12 container, where the workload guests' kernel package exists
    assert job["container"]["image"] == "debian:12"
    assert "--privileged" in job["container"]["options"]
    assert "sudo " not in runs
    assert "make lab-guest" in runs  # make setup, then the guests' kernel and initrd
    assert '-m "lab or libvirt"' in runs
    assert "RECONCILER_REQUIRE_LAB=1" in runs
    assert "RECONCILER_LAB_VIRT_TYPE=qemu" in runs  # TCG without /dev/kvm


SUPPORTED = {"actions/checkout": 5, "actions/setup-python": 6}
"""The first major versions of these actions that run on Node 24."""


def test_every_action_is_on_a_supported_runtime() -> None:
    files = [*(REPO / ".github" / "workflows").glob("*.yml"), REPO / "action.yml"]
    seen = 0
    for file in files:
        for action, version in re.findall(r"uses:\s*(actions/[\w-]+)@v(\d+)", file.read_text()):
            seen += 1
            assert int(version) >= SUPPORTED[action], f"{file.name}: {action}@v{version}"
    assert seen >= 5
