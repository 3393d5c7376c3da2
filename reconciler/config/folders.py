"""Finding the cluster folders and the YAML files of each."""

from __future__ import annotations

from pathlib import Path
from typing import Final

YAML_SUFFIXES: Final = (".yaml", ".yml")
ROLLOUTS: Final = "rollouts"
"""The subfolder of a cluster folder that holds its rollouts, one file each."""


def is_yaml_name(name: str) -> bool:
    """``rules.yaml``, ``Rules.YAML``, ``x.Yml``: the extension in any case."""
    return name.lower().endswith(YAML_SUFFIXES)


def yaml_files(folder: Path) -> list[Path]:
    """The ``*.yaml``/``*.yml`` entries (any case) directly in ``folder``, sorted; hidden ones
    skipped.

    Entries of every type are listed (symlinks, FIFOs, directories): the reader refuses what is
    not a regular file, so a ``rules.yaml`` that is a directory is an error, never "no rules".
    Nothing here opens an entry.
    """
    return sorted(
        entry
        for entry in folder.iterdir()
        if is_yaml_name(entry.name) and not entry.name.startswith(".")
    )


def cluster_folders(root: Path) -> list[Path]:
    """Folders under ``root`` (itself included) that hold YAML files: one cluster each.

    A cluster folder's own subfolders are searched too (a repository may keep its clusters
    below one another), except its ``rollouts/``, which is part of it. Hidden and symlinked
    folders are skipped.
    """
    cluster = bool(yaml_files(root))
    found: list[Path] = [root] if cluster else []
    for entry in sorted(root.iterdir()):
        if cluster and entry.name == ROLLOUTS:
            continue
        if entry.is_dir() and not entry.is_symlink() and not entry.name.startswith("."):
            found.extend(cluster_folders(entry))
    return found


def rollout_files(folder: Path) -> list[Path]:
    """The YAML files of ``folder``'s ``rollouts/`` (none when it has no such folder)."""
    rollouts = folder / ROLLOUTS
    if not rollouts.is_dir():
        return []
    return yaml_files(rollouts)


def hidden_rollout_files(folder: Path) -> list[Path]:
    """The hidden YAML files of ``folder``'s ``rollouts/`` (``.kernel.yaml``): never read, so
    no rollout is carried out from them; ``validate`` says so."""
    rollouts = folder / ROLLOUTS
    if not rollouts.is_dir():
        return []
    return sorted(
        entry
        for entry in rollouts.iterdir()
        if is_yaml_name(entry.name) and entry.name.startswith(".")
    )


def is_rollout_file(path: Path) -> bool:
    """A file in the ``rollouts/`` folder of a cluster folder."""
    return path.parent.name == ROLLOUTS


CLUSTER_FILES: Final = ("cluster.yaml", "cluster.yml")


def is_cluster_folder(folder: Path) -> bool:
    """A folder holding its ``cluster.yaml`` (or ``cluster.yml``)."""
    return any((folder / name).is_file() for name in CLUSTER_FILES)


def fleet_folders(root: Path, pattern: str | None = None) -> list[str]:
    """The cluster folders of a fleet under ``root``, relative to it (``/``-separated), sorted:
    every folder below ``root`` holding a ``cluster.yaml``, or those of them ``pattern`` (a
    glob relative to ``root``, e.g. ``prod-*`` or ``sites/*/*``) names. Hidden and symlinked
    folders are skipped."""
    if pattern is not None:
        found = [p for p in root.glob(pattern) if p.is_dir() and not p.is_symlink()]
    else:
        found = cluster_folders(root)
    return sorted(
        p.relative_to(root).as_posix()
        for p in found
        if p != root
        and is_cluster_folder(p)
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
