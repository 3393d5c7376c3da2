"""Real git repositories for tests: a bare remote over file:// and people's clones."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PERSON = ["-c", "user.name=Ada Person", "-c", "user.email=ada@example.net"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *PERSON, *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def state_remote(tmp_path: Path, folder: Path | None = None) -> tuple[str, Path]:
    """A bare repository whose main branch holds ``cluster-state/`` (the example by default);
    returns its file:// URL and a person's clone of it."""
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    person = tmp_path / "person"
    git(tmp_path, "clone", "--quiet", str(bare), str(person))
    shutil.copytree(folder or ROOT / "cluster-state", person / "cluster-state")
    git(person, "checkout", "--quiet", "-b", "main")
    git(person, "add", ".")
    git(person, "commit", "--quiet", "-m", "The cluster")
    git(person, "push", "--quiet", "origin", "main")
    return f"file://{bare}", person


def open_fds() -> int:
    return len(list(Path("/proc/self/fd").iterdir()))


def child_processes() -> int:
    """Processes (zombies too) whose parent is this one."""
    import os

    me = str(os.getpid())
    count = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me:
            count += 1
    return count
