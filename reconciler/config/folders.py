"""Finding the cluster folders and the YAML files of each."""

from __future__ import annotations

from pathlib import Path
from typing import Final

YAML_SUFFIXES: Final = (".yaml", ".yml")


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
    below one another). Hidden and symlinked folders are skipped.
    """
    found: list[Path] = [root] if yaml_files(root) else []
    for entry in sorted(root.iterdir()):
        if entry.is_dir() and not entry.is_symlink() and not entry.name.startswith("."):
            found.extend(cluster_folders(entry))
    return found
