"""Findings: one problem in a cluster-state file, where it is and how to fix it."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic import Field

from reconciler.model.base import Frozen

if TYPE_CHECKING:
    from reconciler.config.yaml_source import DocPath, Document

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


class Finding(Frozen):
    """One problem found in a cluster folder."""

    file: str = Field(description="The file (or, for folder-wide problems, the folder).")
    line: int | None = Field(default=None, ge=1, description="1-based; none for a folder.")
    column: int | None = Field(default=None, ge=1, description="1-based; none for a folder.")
    severity: Severity
    path: str = Field(default="", description="Where in the document, e.g. spec.rules[2].hosts.")
    message: str = Field(description="What is wrong.")
    hint: str | None = Field(default=None, description="How to fix it.")


def path_text(path: DocPath) -> str:
    """``spec.rules[2].hosts`` from ``("spec", "rules", 2, "hosts")``."""
    out = ""
    for item in path:
        if isinstance(item, int):
            out += f"[{item}]"
        elif _PLAIN_KEY.match(item):
            out += f".{item}" if out else item
        else:
            out += f'["{item}"]'
    return out


def finding_at(
    doc: Document | None, path: DocPath, severity: Severity, message: str, hint: str
) -> Finding:
    """A finding at ``path`` of ``doc``, on the line of its value; without a document (a state
    built in code), at the path alone."""
    if doc is None:
        return Finding(severity=severity, file="", path=path_text(path), message=message, hint=hint)
    line, column = doc.position(path)
    return Finding(
        file=doc.file,
        line=line,
        column=column,
        severity=severity,
        path=path_text(path),
        message=message,
        hint=hint,
    )


def format_finding(finding: Finding) -> str:
    """``file:line:column: error: path: message (hint)``, the line a compiler would print."""
    where = finding.file
    if finding.line is not None:
        where += f":{finding.line}:{finding.column or 1}"
    path = f"{finding.path}: " if finding.path else ""
    hint = f" ({finding.hint})" if finding.hint else ""
    return f"{where}: {finding.severity}: {path}{finding.message}{hint}"


def errors_in(findings: list[Finding]) -> list[Finding]:
    """The findings that make a folder invalid."""
    return [f for f in findings if f.severity is Severity.ERROR]
