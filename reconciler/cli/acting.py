"""The one acting path, built in the composition root: a desired-state source, one hold per
cluster, the round's ports.

Every command that moves VMs (``apply``, ``drain --apply``, ``run`` in every mode) builds
these three from its arguments here, and nothing else: the source reads the folder or the
state repository and records what a round did (placement edit or audit commit); the hold is
the git lease with ``--repo``, etcd with ``--coordination``, else a lock keyed by the cluster
itself (its name and hosts), so two state directories on one machine cannot both act.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconciler import config
from reconciler.cli.common import DEFAULT_REPO_FOLDER, cluster_folder, status_store
from reconciler.errors import TerminalError
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Plan, Reason
from reconciler.model.policy import Basis

if TYPE_CHECKING:  # the engine is imported when a command acts, not for every command
    from reconciler.engine.leadership import LeaseKeeper
    from reconciler.engine.ports import DesiredSource, Hold
    from reconciler.engine.recovery import Recovery
    from reconciler.engine.round import RoundPorts
    from reconciler.engine.triggers import Wakeup

COORDINATION_ENV = "RECONCILER_COORDINATION"
YES_HELP = "act without asking for confirmation (drain: with --apply)"
RETRY_PERIOD = 2.0
RENEW_DEADLINE = 10.0


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


def default_actor() -> str:
    return os.environ.get("RECONCILER_ACTOR") or f"reconciler@{socket.gethostname()}"


def lock_timeout(text: str) -> float:
    """``--lock-timeout``: 0, 30s, 5m, 1h (seconds when no unit)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; write e.g. 30s, 5m or 1h")
    value = float(match[1])
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[match[2] or "s"]
    seconds = value * scale
    if seconds > timedelta(days=1).total_seconds():
        raise argparse.ArgumentTypeError(f"{text} is longer than a day; wait at most 24h")
    return seconds


def add_hold_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--lock-timeout",
        type=lock_timeout,
        default=0.0,
        metavar="DURATION",
        help="when another command or instance holds the cluster, wait up to this long for it "
        "(e.g. 30s, 5m) instead of exiting 1 at once",
    )
    p.add_argument(
        "--coordination",
        default=os.environ.get(COORDINATION_ENV) or None,
        metavar="URL",
        help="hold the cluster through a coordination service instead of the git lease or "
        f"the machine's lock, e.g. etcd3+http://host:2379 (default: ${COORDINATION_ENV})",
    )


def add_actor_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--actor",
        default=default_actor(),
        help="with --repo: the Reconciler-Actor of the commits this command makes "
        "(default: $RECONCILER_ACTOR, else reconciler@<host>)",
    )


def build_source(args: argparse.Namespace, *, actor: str | None = None) -> DesiredSource:
    """The folder, or the state repository's branch with ``--repo``."""
    if getattr(args, "repo", None):
        # imported here: only commands with --repo need the git adapter
        from reconciler.adapters.git.repo import GitStateRepo
        from reconciler.engine.sources import RepoSource

        repo = GitStateRepo(args.repo, cache_dir=getattr(args, "cache_dir", None))
        folder = str(args.path) if args.path is not None else DEFAULT_REPO_FOLDER
        return RepoSource(
            repo,
            branch=getattr(args, "branch", "main"),
            folder=folder,
            read=config.load_desired,
            actor=actor or getattr(args, "actor", None) or default_actor(),
            audit_branch=getattr(args, "audit_branch", None),
            display=repo.display_url,
        )
    from reconciler.adapters.files.text import TextFile
    from reconciler.engine.sources import FolderSource

    path = cluster_folder(args.path)
    return FolderSource(path, read=config.load_desired, placement=TextFile(path / "placement.yaml"))


def build_hold(
    args: argparse.Namespace,
    desired: DesiredState,
    *,
    command: str,
    state_dir: Path | None = None,
    wakeup: Wakeup | None = None,
    round_stop: Any = None,
    on_change: Any = None,
) -> LeaseKeeper:
    """The hold on ``desired``'s cluster for ``command``, not yet taken."""
    import threading

    from reconciler.adapters.files.lock import FileLease, cluster_lock_path
    from reconciler.adapters.files.status import default_state_dir
    from reconciler.engine.leadership import LeaseKeeper
    from reconciler.engine.triggers import Wakeup

    cluster = desired.cluster.metadata.name
    identity = getattr(args, "identity", None)
    lease: Any
    coordination = getattr(args, "coordination", None)
    if coordination:
        lease = _tooz_lease(coordination, cluster, identity, command)
    elif getattr(args, "repo", None):
        from reconciler.adapters.git.lease import GitLease

        base = state_dir or getattr(args, "state_dir", None) or default_state_dir()
        lease = GitLease(
            args.repo,
            cluster,
            base / cluster / "lease.git",
            identity=identity or _identity(command),
        )
    else:
        hosts = [(h.name, h.uri) for h in desired.cluster.spec.hosts]
        lease = FileLease(cluster_lock_path(cluster, hosts), command=command)
    return LeaseKeeper(
        lease,
        wakeup or Wakeup(),
        round_stop if round_stop is not None else threading.Event(),
        retry_period=RETRY_PERIOD,
        renew_deadline=RENEW_DEADLINE,
        on_change=on_change,
    )


def _identity(command: str) -> str:
    return f"{command}@{socket.gethostname()}:{os.getpid()}:{int(time.time())}"


def _tooz_lease(url: str, cluster: str, identity: str | None, command: str) -> Any:
    from reconciler.adapters.etcd.lease import ToozLease

    return ToozLease(url, cluster, identity=identity or _identity(command))


def take_hold(keeper: LeaseKeeper, cluster: str, timeout: float) -> None:
    """Take the hold, waiting up to ``timeout``; TerminalError naming the holder (exit 1)."""
    if keeper.acquire(timeout):
        return
    who = keeper.holder() or "an unknown holder"
    waited = f" (waited {timeout:g} s)" if timeout else ""
    raise TerminalError(
        f"cluster {cluster!r} is held by {who}{waited}",
        hint="wait for it to finish, or pass --lock-timeout DURATION to wait for it; "
        "a holder that died gives the cluster up by itself",
    )


@contextlib.contextmanager
def round_ports(
    args: argparse.Namespace,
    desired: DesiredState,
    *,
    source: DesiredSource | None,
    hold: Hold | None,
    state_dir: Path | None = None,
) -> Iterator[RoundPorts]:
    """The real adapters behind the round's ports; libvirt is imported only here.

    The observer, the migrator and the recorder share one connection per host, opened on
    first use and closed when the ``with`` block ends (the command, or one round of ``run``).
    """
    from reconciler.adapters.files.status import default_state_dir
    from reconciler.adapters.libvirt.cluster_observer import LibvirtClusterObserver
    from reconciler.adapters.libvirt.connection import ConnectionSettings
    from reconciler.adapters.libvirt.leftovers import Leftovers
    from reconciler.adapters.libvirt.migrator import LibvirtMigrator
    from reconciler.adapters.libvirt.observe_host import KEEPALIVE_COUNT
    from reconciler.adapters.libvirt.observer import observe_settings
    from reconciler.adapters.libvirt.pool import ConnectionPool
    from reconciler.adapters.libvirt.recorder import LibvirtRecorder
    from reconciler.cli.common import observe_overrides
    from reconciler.engine.round import RoundPorts

    if state_dir is not None:
        args = argparse.Namespace(**{**vars(args), "state_dir": state_dir})
    overrides = observe_overrides(args)
    if desired.policy.spec.basis is Basis.ALLOCATED and "sample_interval" not in overrides:
        # on basis allocated no decision reads a CPU reading: no pause for a second sample
        overrides["sample_interval"] = 0
    observe = observe_settings(
        desired.cluster,
        **{k: v for k, v in overrides.items() if k in ("connect_timeout", "call_timeout")},
    )
    # the observer's timeouts for every connection: keepalive fails a call on a host that
    # stopped answering within about the call timeout, as the observer's own connections do
    settings = ConnectionSettings(
        connect_timeout=observe.connect_timeout,
        keepalive_interval=max(1, round(observe.call_timeout / (KEEPALIVE_COUNT + 1))),
        keepalive_count=KEEPALIVE_COUNT,
    )
    pool = ConnectionPool({h.name: h.uri for h in desired.cluster.spec.hosts}, settings)
    base = getattr(args, "state_dir", None) or default_state_dir()
    # kept across restarts: volumes a failed disk move left on a host that did not answer
    leftovers = Leftovers(base / desired.cluster.metadata.name / "leftover-volumes.json")
    try:
        yield RoundPorts(
            observer=LibvirtClusterObserver(desired.cluster, pool=pool, **overrides),
            migrator=LibvirtMigrator(
                desired,
                connection=settings,
                pool=pool,
                leftovers=leftovers,
                shared_paths=overrides.get("shared_paths", ()),
            ),
            recorder=LibvirtRecorder(desired.cluster, connection=settings, pool=pool),
            status=status_store(args, desired.cluster.metadata.name),
            clock=SystemClock(),
            source=source,
            hold=hold,
        )
    finally:
        pool.close()


def build_recovery(
    desired: DesiredState,
    *,
    state_dir: Path | None,
    source: DesiredSource | None,
    on_fence: Callable[[str, str], None],
) -> Recovery:
    """Dead-host recovery over libvirt, the fence commands and the state directory (and, for
    a repository, the definitions recorded on its observed branch)."""
    from reconciler.adapters.files.recovery import FileRecoveryStore
    from reconciler.adapters.git.observations import ObservedBranch
    from reconciler.adapters.git.repo import GitStateRepo
    from reconciler.adapters.libvirt.restarter import LibvirtRestarter
    from reconciler.adapters.processes.fence import CommandFencer
    from reconciler.engine.recovery import Recovery, RecoveryPorts

    cluster = desired.cluster.metadata.name
    repo = getattr(source, "repo", None)  # a repository source: its observed branch too
    ports = RecoveryPorts(
        fencer=CommandFencer(),
        restarter=LibvirtRestarter(desired.cluster),
        store=FileRecoveryStore(cluster, state_dir),
        clock=SystemClock(),
        source=source,
        observed=ObservedBranch(repo, cluster) if isinstance(repo, GitStateRepo) else None,
        on_fence=lambda host, outcome: on_fence(host, outcome.value),
    )
    return Recovery(cluster, ports)


def recover(
    recovery: Recovery,
    desired: DesiredState,
    snapshot: Any,
    status: Any,
    *,
    act: bool,
    wakeup: Wakeup,
) -> Any:
    """One recovery step after a round; wakes the loop when a host's grace or backoff ends."""
    import logging

    from reconciler.engine.recovery import with_recovered
    from reconciler.errors import ReconcilerError

    try:
        report = recovery.step(desired, snapshot, act=act, status=status)
    except ReconcilerError as err:
        logging.getLogger(__name__).error("recovery step failed: %s", err)
        return status
    now = SystemClock().now()
    if report.waiting:
        delay = max(0.5, (min(report.waiting.values()) - now).total_seconds() + 0.1)
        wake_later(wakeup, delay, "recovery")
    return with_recovered(status, report, now)


def confirming(
    keeper: LeaseKeeper, wakeup: Wakeup, cluster: str, retry: float
) -> Callable[[Plan], bool]:
    """The confirmation of a ``run`` round's plan: the hold re-checked just before acting.

    A hold that cannot be re-checked now (a slow renewal, the remote not answering) starts
    nothing; that is said, and the round is tried again in ``retry`` seconds rather than at the
    next interval.
    """
    import logging

    def confirm(plan: Plan) -> bool:
        if keeper.confirm():
            return True
        who = keeper.holder()
        logging.getLogger(__name__).warning(
            "not acting on %s: the hold on cluster %s could not be confirmed%s; "
            "trying again in %.0f s",
            plan.plan_id[:19],
            cluster,
            f" (held by {who})" if who else "",
            retry,
        )
        wake_later(wakeup, retry, "hold")
        return False

    return confirm


def wake_later(wakeup: Wakeup, delay: float, reason: str) -> None:
    """A round for ``reason`` in ``delay`` seconds, whatever the interval says."""
    import threading

    timer = threading.Timer(delay, wakeup.trigger, args=(reason,))
    timer.daemon = True
    timer.start()


def audit_trigger(round_trigger: str, *, merge: bool) -> Callable[[Plan], str]:
    """The Reconciler-Trigger of a round's audit commit, from its plan and what started it."""

    def pick(plan: Plan) -> str:
        reasons = {m.reason for m in plan.moves}
        if Reason.MAINTENANCE in reasons:
            return "maintenance"
        if merge:  # a change of the desired state (a merged proposal) asked for these moves
            return "merge"
        if reasons and reasons <= {Reason.DRIFT}:
            return "drift"
        if round_trigger in ("manual", "merge", "schedule", "drift", "maintenance"):
            return round_trigger
        return "schedule"

    return pick


def source_folder(source: DesiredSource) -> Path:
    """The folder a folder source reads (for watching it)."""
    from reconciler.engine.sources import FolderSource

    if not isinstance(source, FolderSource):
        raise TypeError("not a folder source")
    return source.folder
