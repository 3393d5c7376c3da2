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


def is_rollout_file(path: Path) -> bool:
    """A file in the ``rollouts/`` folder of a cluster folder."""
    return path.parent.name == ROLLOUTS
