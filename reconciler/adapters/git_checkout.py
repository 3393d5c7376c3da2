"""A read-only working copy of the state repository for ``run --repo``: fetched, reset, read.

``remote_head`` asks the remote for the branch's commit (cheap: ``git ls-remote``), for the
poller; ``sync`` brings the working copy to it before a round. The reconciler never commits
here; proposals and audit commits are the GitOps adapters' business.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from reconciler.errors import TerminalError, TransientError

GIT_TIMEOUT = 120.0


class GitCheckout:
    def __init__(self, url: str, branch: str, work_tree: Path) -> None:
        self.url = url
        self.branch = branch
        self.work_tree = work_tree

    def _git(self, *args: str, cwd: Path | None = None) -> str:
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
        try:
            out = subprocess.run(
                ["git", *args],
                cwd=cwd,
                capture_output=True,
                text=True,
                env=env,
                timeout=GIT_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as err:
            raise TransientError(f"git {args[0]} of {self.url} timed out") from err
        except OSError as err:
            raise TerminalError(f"cannot run git: {err.strerror}", hint="install git") from err
        if out.returncode != 0:
            raise TransientError(f"git {args[0]} of {self.url} failed: {out.stderr.strip()}")
        return out.stdout

    def remote_head(self) -> str:
        out = self._git("ls-remote", "--heads", self.url, self.branch).split()
        if not out:
            raise TransientError(f"branch {self.branch!r} not found in {self.url}")
        return out[0]

    def sync(self) -> str:
        """Clone or fetch, then reset the working copy to the branch; returns its commit."""
        if not (self.work_tree / ".git").exists():
            self.work_tree.parent.mkdir(parents=True, exist_ok=True)
            self._git(
                "clone",
                "--quiet",
                "--branch",
                self.branch,
                "--single-branch",
                self.url,
                str(self.work_tree),
            )
        else:
            self._git("fetch", "--quiet", "origin", self.branch, cwd=self.work_tree)
            self._git("reset", "--quiet", "--hard", "FETCH_HEAD", cwd=self.work_tree)
        return self._git("rev-parse", "HEAD", cwd=self.work_tree).strip()
