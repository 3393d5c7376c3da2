"""Cluster folders written into a temporary directory, and their findings as text."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from reconciler.config import format_finding, validate_folder

HEAD = "apiVersion: placement/v1alpha1\n"

HOSTS = (
    '{name: kvm-01, uri: "test:///one", labels: {rack: r1, gen: old}}',
    '{name: kvm-02, uri: "test:///two", labels: {rack: r2, gpu: "yes"}}',
    '{name: kvm-03, uri: "test:///three", labels: {rack: r2}}',
)


def cluster_yaml(*hosts: str) -> str:
    """A Cluster whose host number i (0-based) is on line 6 + i."""
    lines = "".join(f"    - {h}\n" for h in hosts or HOSTS)
    return f"{HEAD}kind: Cluster\nmetadata: {{name: lab}}\nspec:\n  hosts:\n{lines}"


def rules_yaml(*rules: str) -> str:
    """PlacementRules whose rule number i (0-based) is on line 6 + i."""
    lines = "".join(f"    - {r}\n" for r in rules)
    return f"{HEAD}kind: PlacementRules\nmetadata: {{name: default}}\nspec:\n  rules:\n{lines}"


def placement_yaml(*entries: str) -> str:
    """A Placement whose entry number i (0-based) is on line 6 + i."""
    lines = "".join(f"    {e}\n" for e in entries)
    return f"{HEAD}kind: Placement\nmetadata: {{name: lab}}\nspec:\n  vms:\n{lines}"


def policy_yaml(*spec_lines: str) -> str:
    """A BalancePolicy whose spec line number i (0-based) is on line 5 + i."""
    lines = "".join(f"  {s}\n" for s in spec_lines)
    return f"{HEAD}kind: BalancePolicy\nmetadata: {{name: default}}\nspec:\n{lines}"


def write_folder(root: Path, files: Mapping[str, str | bytes], name: str = "lab") -> Path:
    """``root/name`` holding ``files`` (file name -> content)."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    for file, content in files.items():
        if isinstance(content, bytes):
            (folder / file).write_bytes(content)
        else:
            (folder / file).write_text(content, encoding="utf-8")
    return folder


def findings_text(root: Path, files: Mapping[str, str | bytes]) -> list[str]:
    """The findings of a cluster folder ``lab`` under ``root`` (the current directory)."""
    folder = write_folder(root, files)
    report, _ = validate_folder(folder.relative_to(root))
    return [format_finding(f) for f in report.findings]


def rule_findings(root: Path, *rules: str, cluster: str | None = None) -> list[str]:
    """Findings of a folder with the standard hosts (or ``cluster``) and these rules."""
    return findings_text(
        root, {"cluster.yaml": cluster or cluster_yaml(), "rules.yaml": rules_yaml(*rules)}
    )


def col(line: str, fragment: str, indent: int = 6) -> int:
    """1-based column of ``fragment`` in ``line`` written after ``indent`` characters.

    Rules are written after ``    - `` (6), placement entries after 4 spaces.
    """
    return indent + line.index(fragment) + 1
