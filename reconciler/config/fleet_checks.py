"""Checks across the cluster folders of one repository: one cluster name, one folder.

A cluster's name (its Cluster's ``metadata.name``) keys everything that is the cluster's alone:
its lease, its state folder, its observed branch, its records. Two folders that declare one
name would share all of them, and only one of the two would ever be reconciled, by chance.
``validate`` refuses them (:func:`shared_name_findings`, an error in each folder naming the
others) and a fleet serves neither (:func:`sharing` over the names :func:`cluster_name` reads).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from reconciler.config.findings import Finding, Severity
from reconciler.config.folders import CLUSTER_FILES
from reconciler.config.yaml_source import read_documents
from reconciler.errors import DocumentError

WHY: str = (
    "two cluster folders with one metadata.name would share one lease, one state folder and "
    "one observed branch, and only one of them would be reconciled"
)
FIX: str = "give each cluster folder a metadata.name of its own"


def cluster_name(folder: Path) -> str | None:
    """The ``metadata.name`` of the Cluster in ``folder``'s cluster.yaml (or cluster.yml);
    None when there is none to read (the folder's own validation says why)."""
    for file in CLUSTER_FILES:
        path = folder / file
        if not path.is_file():
            continue
        try:
            documents = read_documents(path, root=folder)
        except DocumentError:
            return None
        for doc in documents:
            metadata = doc.data.get("metadata")
            if doc.data.get("kind") == "Cluster" and isinstance(metadata, dict):
                name = metadata.get("name")
                return name if isinstance(name, str) and name else None
        return None
    return None


def sharing(names: Mapping[str, str | None]) -> dict[str, tuple[str, ...]]:
    """Each folder whose cluster name another folder declares too, with those others (sorted);
    ``names`` maps a folder to its cluster name (None: unknown, never shared)."""
    by_name: dict[str, list[str]] = {}
    for folder, name in names.items():
        if name is not None:
            by_name.setdefault(name, []).append(folder)
    return {
        folder: tuple(sorted(f for f in folders if f != folder))
        for folders in by_name.values()
        if len(folders) > 1
        for folder in folders
    }


def shared_name_why(name: str, others: Sequence[str]) -> str:
    """Why a folder whose cluster ``name`` the folders ``others`` declare too is not served."""
    return f"cluster name {name!r} is also declared by {', '.join(others)}: {WHY}; {FIX}"


def shared_name_findings(named: Mapping[str, tuple[str, str, int, int]]) -> dict[str, Finding]:
    """An error for each folder whose cluster name another folder declares too, at the name;
    ``named`` maps a folder to (its cluster name, the file, line and column declaring it)."""
    shared = sharing({folder: at[0] for folder, at in named.items()})
    out = {}
    for folder, others in shared.items():
        name, file, line, column = named[folder]
        where = [f"{other} ({named[other][1]}:{named[other][2]})" for other in others]
        out[folder] = Finding(
            file=file,
            line=line,
            column=column,
            severity=Severity.ERROR,
            path="metadata.name",
            message=f"cluster name {name!r} is also the name of the cluster in "
            f"{', '.join(where)}: {WHY}",
            hint=FIX,
        )
    return out


__all__ = ["cluster_name", "shared_name_findings", "shared_name_why", "sharing"]
