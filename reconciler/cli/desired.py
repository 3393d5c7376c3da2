"""The one way every command reads desired state: the source of its request, loaded.

``plan``, ``place``, ``observe``, ``propose`` and the commands that act all read the folder, or
the cluster folder of the state repository at the head of its branch, through the same
``DesiredSource`` (``engine/sources.py``); what was loaded says its revision and when
placement.yaml last changed. The source also decides where the rollouts' records live
(``rollout_records``), for ``run`` that writes them and ``rollout status`` that reads them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, overload

from reconciler import config
from reconciler.cli.common import cluster_folder
from reconciler.cli.requests import FolderRequest, RepoRequest, SourceRequest, default_actor

if TYPE_CHECKING:  # the engine is imported when a command reads, not when it is parsed
    from reconciler.engine.ports import RolloutRecords
    from reconciler.engine.sources import FolderSource, RepoSource


@overload
def open_source(request: RepoRequest) -> RepoSource: ...
@overload
def open_source(request: FolderRequest) -> FolderSource: ...
@overload
def open_source(request: SourceRequest) -> FolderSource | RepoSource: ...
def open_source(request: SourceRequest) -> FolderSource | RepoSource:
    """The folder, or the state repository's branch; nothing is read yet."""
    if isinstance(request, RepoRequest):
        # imported here: only commands with --repo need the git adapter
        from reconciler.adapters.git.repo import GitStateRepo
        from reconciler.engine.sources import RepoSource

        repo = GitStateRepo(request.url, cache_dir=request.cache_dir)
        return RepoSource(
            repo,
            branch=request.branch,
            folder=request.path,
            read=config.load_desired,
            actor=request.actor or default_actor(),
            audit_branch=request.audit_branch,
            display=repo.display_url,
        )
    from reconciler.adapters.files.text import TextFile
    from reconciler.engine.sources import FolderSource

    path = cluster_folder(request.path)
    return FolderSource(path, read=config.load_desired, placement=TextFile(path / "placement.yaml"))


def rollout_records(
    source: FolderSource | RepoSource, cluster: str, state_dir: Path | None
) -> RolloutRecords:
    """Where the rollouts of ``cluster`` record their steps: with the state repository, on its
    branch that records (the audit branch if any), in the cluster folder's
    ``rollouts/<name>.progress.json``; else in the state directory (None: the default one)."""
    from reconciler.engine.sources import RepoSource

    if isinstance(source, RepoSource):
        from reconciler.engine.rollout_audit import RepoRolloutRecords

        return RepoRolloutRecords(
            source.repo,
            branch=source.audit_branch,
            folder=source.folder,
            cluster=cluster,
            actor=source.actor,
        )
    from reconciler.adapters.files.rollout_progress import FileRolloutProgress

    return FileRolloutProgress(cluster, state_dir)
