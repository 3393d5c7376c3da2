"""Finding the cluster folders and the YAML files of each."""

from __future__ import annotations

from pathlib import Path
from typing import Final

YAML_SUFFIXES: Final = (".yaml", ".yml")


def yaml_files(folder: Path) -> list[Path]:
    """The ``*.yaml``/``*.yml`` entries directly in ``folder``, sorted; hidden ones skipped.

    Symlinks are listed too: the reader decides whether they may be followed.
    """
    return sorted(
        entry
        for entry in folder.iterdir()
        if entry.name.endswith(YAML_SUFFIXES)
        and not entry.name.startswith(".")
        and (entry.is_symlink() or entry.is_file())
    )


def cluster_folders(root: Path) -> list[Path]:
    """Folders under ``root`` (itself included) that hold cluster documents.

    A folder with YAML files is one cluster and is not searched further; otherwise each of its
    subfolders is searched. Hidden and symlinked folders are skipped.
    """
    if yaml_files(root):
        return [root]
    found: list[Path] = []
    for entry in sorted(root.iterdir()):
        if entry.is_dir() and not entry.is_symlink() and not entry.name.startswith("."):
            found.extend(cluster_folders(entry))
    return found
