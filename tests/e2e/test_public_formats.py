"""The public formats, pinned: every JSON the CLI writes validates against its schema in schemas/,
is camelCase, and carries apiVersion and kind; the command set is what the docs promise."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from reconciler.adapters.files.status import FileStatusStore
from reconciler.cli import build_parser, main
from reconciler.model.status import ReconcileStatus

pytestmark = pytest.mark.libvirt
pytest.importorskip("libvirt")

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
SNAKE = re.compile(r"^[a-z]+_[a-z_]+$")


def schema(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SCHEMAS / f"{name}.json").read_text())
    return data


def keys(
    value: object, maps: tuple[str, ...] = ("placement", "imbalanceRounds", "labels")
) -> set[str]:
    """Every key of a JSON document, except the keys of maps keyed by data (VM, arch, label)."""
    out: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            out.add(k)
            if k not in maps:
                out |= keys(v, maps)
    elif isinstance(value, list):
        for item in value:
            out |= keys(item, maps)
    return out


def check(name: str, text: str) -> Any:
    data = json.loads(text)
    jsonschema.validate(data, schema(name))
    snake = sorted(k for k in keys(data) if SNAKE.match(k))
    assert not snake, f"{name}: snake_case keys {snake}"
    if isinstance(data, dict):
        assert data["apiVersion"] == "placement/v1alpha1"
        assert data["kind"]
    return data


def test_every_cli_json_output_validates_against_its_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lab = tmp_path / "lab"
    assert main(["lab", "up", "--driver", "test", "--dir", str(lab)]) == 0
    folder = str(lab / "cluster-state")
    capsys.readouterr()

    assert main(["observe", folder, "--format", "json", "--sample-interval", "0"]) == 0
    snap = check("snapshot", capsys.readouterr().out)
    assert snap["kind"] == "Snapshot"
    snapshot = tmp_path / "snap.json"
    snapshot.write_text(json.dumps(snap))

    assert main(["plan", folder, "--snapshot", str(snapshot), "--format", "json"]) in (0, 2)
    assert check("plan", capsys.readouterr().out)["kind"] == "Plan"

    code = main(
        [
            "place",
            folder,
            "--snapshot",
            str(snapshot),
            "--vcpus",
            "1",
            "--memory",
            "64MiB",
            "--format",
            "json",
        ]
    )
    assert code in (0, 2)
    assert check("place", capsys.readouterr().out)["kind"] == "PlaceResult"

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "cluster.yaml").write_text("apiVersion: placement/v1alpha1\nkind: Cluster\n")
    assert main(["validate", str(bad), "--format", "json"]) == 1
    findings = check("findings", capsys.readouterr().out)
    assert findings


def test_the_status_file_validates_against_its_schema(tmp_path: Path) -> None:
    store = FileStatusStore("lab", tmp_path)
    store.save(ReconcileStatus(cluster="lab", imbalance_rounds={"x86_64": 2}))
    check("status", store.path.read_text())
    loaded = store.load()
    assert loaded is not None
    assert loaded.imbalance_rounds == {"x86_64": 2}


def test_the_command_set_is_the_documented_one() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    commands = set(sub.choices)  # type: ignore[arg-type]
    assert {
        "validate",
        "schema",
        "lab",
        "observe",
        "plan",
        "place",
        "apply",
        "drain",
        "undrain",
    } <= commands
    readme = (SCHEMAS.parent / "README.md").read_text()
    for command in commands:
        assert f"`{command}" in readme, f"README does not document {command}"


def test_each_command_alone_parses_as_in_the_whole_parser() -> None:
    from reconciler.cli import MODULE_OF

    whole = build_parser()
    sub = next(a for a in whole._actions if a.dest == "command")
    assert set(MODULE_OF) == set(sub.choices)  # type: ignore[arg-type]
    for word, module in MODULE_OF.items():
        alone = build_parser(module)
        lone_sub = next(a for a in alone._actions if a.dest == "command")
        assert word in lone_sub.choices, word  # type: ignore[operator]
        help_alone = lone_sub.choices[word].format_help()  # type: ignore[index]
        assert help_alone == sub.choices[word].format_help(), word  # type: ignore[index]
