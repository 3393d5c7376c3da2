"""Minimal YAML edits: only the changed entries differ, the rest of the text is kept."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from reconciler.adapters.files.text import rewrite_file
from reconciler.config import yaml_edit
from reconciler.config.kinds import model_from_document
from reconciler.config.yaml_source import documents_from_text
from reconciler.errors import ConfigError
from reconciler.model.cluster import Cluster
from reconciler.model.placement import Placement

ROOT = Path(__file__).resolve().parents[2]
HEADER = "# yaml-language-server: $schema=../schemas/placement.json\n"
PREFIX = "apiVersion: placement/v1alpha1\nkind: Placement\nmetadata:\n  name: lab\n"


def placement_of(text: str) -> Placement:
    (doc,) = documents_from_text(text, "placement.yaml")
    model, findings = model_from_document(doc)
    assert not findings, findings
    assert isinstance(model, Placement)
    return model


def cluster_of(text: str) -> Cluster:
    (doc,) = documents_from_text(text, "cluster.yaml")
    model, findings = model_from_document(doc)
    assert not findings, findings
    assert isinstance(model, Cluster)
    return model


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    removed = [line[2:] for line in diff if line.startswith("- ")]
    added = [line[2:] for line in diff if line.startswith("+ ")]
    return removed, added


def test_example_placement_changes_one_line_and_appends_new_vms() -> None:
    text = (ROOT / "cluster-state" / "placement.yaml").read_text()
    out = yaml_edit.set_placement(text, {"web-1": "kvm-02", "cache-1": "kvm-01"})
    removed, added = changed_lines(text, out)
    assert removed == ["    web-1: kvm-01"]
    assert added == ["    web-1: kvm-02", "    cache-1: kvm-01"]
    assert out.startswith("# yaml-language-server: $schema=../schemas/placement.json\n")
    assert out.rstrip().endswith("cache-1: kvm-01")
    assert placement_of(out).spec.vms["web-1"] == "kvm-02"


def test_unchanged_values_return_the_same_text() -> None:
    text = (ROOT / "cluster-state" / "placement.yaml").read_text()
    assert yaml_edit.set_placement(text, {"web-1": "kvm-01"}) is text


@pytest.mark.parametrize(
    "spec", ["spec: {}\n", "spec: {vms: {}}\n", "spec:\n", "spec:\n  vms:\n", ""]
)
def test_empty_spec_forms_gain_the_entries(spec: str) -> None:
    out = yaml_edit.set_placement(HEADER + PREFIX + spec, {"a": "h1", "b": "h2"})
    assert placement_of(out).spec.vms == {"a": "h1", "b": "h2"}
    assert out.startswith(HEADER + PREFIX)


def test_flow_style_stays_flow_and_keeps_quoting() -> None:
    text = PREFIX + "spec: {vms: {a: h1, b: 'h2'}}\n"
    out = yaml_edit.set_placement(text, {"b": "h3", "c": "h1"})
    assert out == PREFIX + "spec: {vms: {a: h1, b: 'h3', c: h1}}\n"


def test_comments_stay_and_new_entries_go_above_a_trailing_comment() -> None:
    text = PREFIX + 'spec:\n  vms:\n    a: h1  # keep\n    b: "h2"\n\n# trailing note\n'
    out = yaml_edit.set_placement(text, {"b": "h3", "c": "h4"})
    assert (
        out
        == PREFIX + 'spec:\n  vms:\n    a: h1  # keep\n    b: "h3"\n    c: h4\n\n# trailing note\n'
    )


def test_names_yaml_1_1_reads_as_non_strings_are_quoted() -> None:
    out = yaml_edit.set_placement(PREFIX + "spec: {}\n", {"yes": "on", "1_0": "null"})
    assert placement_of(out).spec.vms == {"yes": "on", "1_0": "null"}


def test_placement_document_is_found_among_several() -> None:
    text = "---\n" + PREFIX.replace("Placement", "Other") + "---\n" + PREFIX + "spec: {}\n"
    out = yaml_edit.set_placement(text, {"a": "h1"})
    assert out.startswith("---\n" + PREFIX.replace("Placement", "Other") + "---\n")
    assert "a: h1" in out.split("---\n")[2]


def test_no_placement_document_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no document of kind Placement"):
        yaml_edit.set_placement("kind: Cluster\n", {"a": "h1"})


def test_maintenance_is_set_in_place_keeping_the_comment() -> None:
    text = (ROOT / "cluster-state" / "cluster.yaml").read_text()
    out = yaml_edit.set_maintenance(text, "kvm-01", True)
    removed, added = changed_lines(text, out)
    assert len(removed) == len(added) == 1
    assert removed[0].strip().startswith("maintenance: false")
    assert added[0].strip().startswith("maintenance: true")
    assert "# true drains the host" in added[0]
    hosts = {h.name: h.maintenance for h in cluster_of(out).spec.hosts}
    assert hosts == {"kvm-01": True, "kvm-02": False, "kvm-03": False}


def test_maintenance_added_to_a_host_without_it_and_cleared_again() -> None:
    text = (ROOT / "cluster-state" / "cluster.yaml").read_text()
    on = yaml_edit.set_maintenance(text, "kvm-02", True)
    removed, added = changed_lines(text, on)
    assert (removed, [a.strip() for a in added]) == ([], ["maintenance: true"])
    assert yaml_edit.set_maintenance(text, "kvm-02", False) is text
    off = yaml_edit.set_maintenance(on, "kvm-02", False)
    assert not cluster_of(off).spec.hosts[1].maintenance
    assert off == text, "undrain removes exactly what drain added"


def test_unknown_host_is_a_config_error() -> None:
    text = (ROOT / "cluster-state" / "cluster.yaml").read_text()
    with pytest.raises(ConfigError, match="'kvm-99' is not in the Cluster"):
        yaml_edit.set_maintenance(text, "kvm-99", True)


def test_rewrite_file_is_atomic_and_keeps_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "placement.yaml"
    path.write_text(PREFIX + "spec: {}\n")
    path.chmod(0o640)

    def edit(text: str) -> str:
        return yaml_edit.set_placement(text, {"a": "h1"})

    assert rewrite_file(path, edit)
    assert not rewrite_file(path, edit)
    assert placement_of(path.read_text()).spec.vms == {"a": "h1"}
    assert path.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["placement.yaml"]


# --- property: the edited document loads to exactly the intended model -----------------

names = st.one_of(
    st.from_regex(r"\A[a-z][a-z0-9-]{0,6}\Z"),
    st.sampled_from(["yes", "no", "on", "null", "1_0", "1:2", "0o10", "x.y", "true", "~"]),
)
hosts = st.sampled_from(["kvm-01", "kvm-02", "yes", "off", "1e3", "h.1"])


def _scalar(name: str, quoted: bool) -> str:
    plain = yaml_edit._plain_is_string(name)
    return json.dumps(name) if quoted or not plain else name


@st.composite
def placements(draw: st.DrawFn) -> tuple[str, dict[str, str]]:
    vms = draw(st.dictionaries(names, hosts, max_size=6))
    style = "empty" if not vms else draw(st.sampled_from(["block", "flow"]))
    quotes = draw(st.lists(st.booleans(), min_size=len(vms), max_size=len(vms)))
    items = [(_scalar(k, q), _scalar(v, q)) for (k, v), q in zip(vms.items(), quotes, strict=True)]
    if style == "empty":
        body = draw(st.sampled_from(["spec: {}\n", "spec: {vms: {}}\n", "spec:\n  vms: {}\n"]))
    elif style == "flow":
        body = "spec: {vms: {" + ", ".join(f"{k}: {v}" for k, v in items) + "}}\n"
    else:
        lines = [f"    {k}: {v}  # about {i}\n" for i, (k, v) in enumerate(items)]
        body = "spec:\n  # the desired hosts\n  vms:\n" + "".join(lines)
    return HEADER + PREFIX + body, vms


@given(placements(), st.dictionaries(names, hosts, max_size=4))
def test_edit_loads_to_the_intended_model_and_changes_only_those_entries(
    original: tuple[str, dict[str, str]], edit: dict[str, str]
) -> None:
    text, vms = original
    assert placement_of(text).spec.vms == vms
    out = yaml_edit.set_placement(text, edit)
    assert placement_of(out).spec.vms == {**vms, **edit}
    assert out.startswith(HEADER + PREFIX)
    changed = {k for k, v in edit.items() if vms.get(k) != v}
    if not changed:
        assert out == text
        return
    removed, added = changed_lines(text, out)
    structural = {"spec:", "vms:", "spec: {}", "spec: {vms: {}}", "vms: {}"}

    def names_changed(line: str) -> bool:
        if line.strip() in structural or "{" in line:
            return True
        (key,) = yaml.safe_load(line.strip())
        return key in changed

    assert all(names_changed(line) for line in removed + added), (removed, added)
    for k in vms:
        if k not in changed and "{" not in text:
            assert any(k in line and "# about" in line for line in out.splitlines())
