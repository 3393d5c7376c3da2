"""The one way every command reads desired state: the source of its request, loaded.

``plan``, ``place``, ``observe``, ``propose`` and the commands that act all read the folder, or
the cluster folder of the state repository at the head of its branch, through the same
``DesiredSource`` (``engine/sources.py``); what was loaded says its revision and when
placement.yaml last changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, overload

from reconciler import config
from reconciler.cli.common import cluster_folder
from reconciler.cli.requests import FolderRequest, RepoRequest, SourceRequest, default_actor

if TYPE_CHECKING:  # the engine is imported when a command reads, not when it is parsed
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
