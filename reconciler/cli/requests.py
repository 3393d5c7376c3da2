"""The parts of a command's request, each parsed once from its ``argparse.Namespace``.

A command that loads desired state or acts turns its parsed flags into one frozen request at
the parser (its module's ``request``), from these parts; nothing past that sees a Namespace.
The builders here read only the flags the ``add_*_arguments`` helpers registered, by name:
a missing flag is a bug, never a silent default.
"""

from __future__ import annotations

import argparse
import enum
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.errors import ConfigError, TerminalError

DEFAULT_REPO_FOLDER = "cluster-state"


def default_actor() -> str:
    """The Reconciler-Actor of commits made without ``--actor``."""
    actor = os.environ.get("RECONCILER_ACTOR")
    if actor:
        return actor
    import socket  # only for commits that name no actor: off every command's start-up path

    return f"reconciler@{socket.gethostname()}"


@dataclass(frozen=True)
class FolderRequest:
    """The desired state in a folder: PATH as given (None: cluster-state/ or the lab's)."""

    path: Path | None = None


@dataclass(frozen=True)
class RepoRequest:
    """The desired state in the cluster folder ``path`` of ``branch`` in a git repository."""

    url: str = field(repr=False)  # may carry credentials: never in a repr
    branch: str = "main"
    path: str = DEFAULT_REPO_FOLDER
    cache_dir: Path | None = None
    actor: str | None = None
    """The Reconciler-Actor of the commits an acting command makes (None: the default)."""
    audit_branch: str | None = None
    """Where acting rounds record (None: ``branch``)."""


SourceRequest = FolderRequest | RepoRequest


class HoldKind(enum.Enum):
    LOCK = "lock"
    """A lock on this machine keyed by the cluster (its name and hosts)."""
    GIT_LEASE = "git lease"
    """``refs/reconciler/lease/<cluster>`` in the state repository."""
    ETCD = "etcd"
    """A lease in a coordination service."""


@dataclass(frozen=True)
class HoldRequest:
    """How an acting command holds its cluster, and how long it waits for another holder."""

    kind: HoldKind = HoldKind.LOCK
    timeout: float = 0.0
    url: str | None = field(default=None, repr=False)
    """The state repository (git lease) or the coordination service (etcd); not in a repr, it
    may carry credentials."""
    identity: str | None = None
    """This holder's name in a lease (None: command@host:pid:start)."""
    local_only: bool = False
    """``--local-lock-only``: this machine's lock alone, whatever the cluster declares."""
    lease_duration: float | None = None
    """Seconds of the etcd or git lease (``run --lease-duration``); None: the default, 15."""

    def __post_init__(self) -> None:
        if self.kind is not HoldKind.LOCK and not self.url:
            raise ValueError(f"a hold through the {self.kind.value} needs its URL")


@dataclass(frozen=True)
class ObserveOverrides:
    """Overrides of the Cluster's spec.observe and spec.sharedStorage for one run."""

    connect_timeout: float | None = None
    call_timeout: float | None = None
    sample_interval: float | None = None
    shared_paths: tuple[str, ...] = ()

    def overrides(self) -> dict[str, Any]:
        """The keyword arguments of the observer: only what was given."""
        out: dict[str, Any] = {
            name: value
            for name, value in (
                ("connect_timeout", self.connect_timeout),
                ("call_timeout", self.call_timeout),
                ("sample_interval", self.sample_interval),
            )
            if value is not None
        }
        if self.shared_paths:
            out["shared_paths"] = list(self.shared_paths)
        return out


class Confirmation(enum.Enum):
    YES = "yes"
    """``--yes``: act without asking."""
    TERMINAL = "terminal"
    """Ask on the terminal before acting."""
    DRY_RUN = "dry run"
    """Show the plan and stop: a look."""


@dataclass(frozen=True)
class ForgeRequest:
    """Where pull requests and commit statuses go: --forge (None: from the environment)."""

    name: str | None = None
    url: str | None = None
    project: str | None = None


@dataclass(frozen=True)
class ActRequest:
    """What the one acting path is built from (``acting.ActingPath``)."""

    command: str
    """apply, drain or run: names the holder in messages."""
    source: SourceRequest
    hold: HoldRequest
    observe: ObserveOverrides
    state_dir: Path | None
    """None: $XDG_STATE_HOME/reconciler."""
    confirmation: Confirmation
    trigger: str | None = None
    """The Reconciler-Trigger of the audit commit; None: told by the plan and the round."""
    balance_on_sample: bool = False
    """Balance moves even on the observation's own short CPU sample (no fresh window)."""


def source_of(
    args: argparse.Namespace, *, actor: bool = False, audit_branch: bool = False
) -> SourceRequest:
    """PATH, or the cluster folder PATH of ``--repo`` at ``--branch`` (``add_repo_arguments``);
    ``actor``, ``audit_branch``: the command registered ``--actor``, ``--audit-branch`` too."""
    if not args.repo:
        return FolderRequest(args.path)
    return repo_of(args, actor=actor, audit_branch=audit_branch)


def repo_of(
    args: argparse.Namespace, *, actor: bool = False, audit_branch: bool = False
) -> RepoRequest:
    """``--repo`` for a command that reads only a repository: ConfigError without it."""
    if not args.repo:
        raise ConfigError(
            f"{args.command} needs --repo URL", hint="pass the state repository's URL"
        )
    path: Path | None = args.path
    return RepoRequest(
        url=args.repo,
        branch=args.branch,
        path=str(path) if path is not None else DEFAULT_REPO_FOLDER,
        cache_dir=args.cache_dir,
        actor=args.actor if actor else None,
        audit_branch=args.audit_branch if audit_branch else None,
    )


def hold_of(
    args: argparse.Namespace, source: SourceRequest, *, waits: bool, identity: str | None = None
) -> HoldRequest:
    """``--coordination`` (etcd), else the git lease of a repository source, else the lock;
    ``waits``: the command has ``--lock-timeout`` and ``--local-lock-only`` (``run`` stands by
    as long as it runs). A hold the cluster declares is taken instead (``ActingPath.hold``)."""
    timeout: float = args.lock_timeout if waits else 0.0
    local_only: bool = args.local_lock_only if waits else False
    if args.coordination:
        return HoldRequest(HoldKind.ETCD, timeout, args.coordination, identity, local_only)
    if isinstance(source, RepoRequest):
        return HoldRequest(HoldKind.GIT_LEASE, timeout, source.url, identity, local_only)
    return HoldRequest(HoldKind.LOCK, timeout, None, identity, local_only)


def observe_of(args: argparse.Namespace, *, sample_interval: bool = False) -> ObserveOverrides:
    """The flags of ``add_observe_overrides`` (and ``observe``'s --sample-interval)."""
    return ObserveOverrides(
        connect_timeout=args.connect_timeout,
        call_timeout=args.call_timeout,
        sample_interval=args.sample_interval if sample_interval else None,
        shared_paths=tuple(args.shared_path or ()),
    )


def confirmation_of(args: argparse.Namespace, *, dry_run: bool = False) -> Confirmation:
    """--dry-run, --yes, else a terminal to ask on; without one the command is refused here,
    before it reads, holds or writes anything (TerminalError, exit 1)."""
    if dry_run and args.dry_run:
        return Confirmation.DRY_RUN
    if args.yes:
        return Confirmation.YES
    if sys.stdin.isatty():
        return Confirmation.TERMINAL
    look = ", or --dry-run to only show the plan" if dry_run else ""
    command: str = args.command
    raise TerminalError(
        f"{command} asks for confirmation, but stdin is not a terminal",
        hint=f"pass --yes to {command} without asking{look}",
    )


def forge_request_of(args: argparse.Namespace) -> ForgeRequest:
    """The flags of ``add_forge_arguments``."""
    return ForgeRequest(name=args.forge, url=args.forge_url, project=args.forge_project)
