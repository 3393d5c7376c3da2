"""The one acting path, built in the composition root from a command's request alone.

Every command that moves VMs (``apply``, ``drain --apply``, ``run`` in every mode) parses its
flags into an ``ActRequest`` (``cli/requests.py``) and hands it to ``ActingPath``, which builds
from it, and nothing else: the desired-state source (the folder, or the state repository's
branch; it also takes what a round did: a placement edit or an audit commit), the hold on the
cluster (the git lease with ``--repo``, etcd with ``--coordination``, else a lock keyed by the
cluster itself, its name and hosts, so two state directories on one machine cannot both act),
the round's ports over libvirt, and the round.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from reconciler.adapters.clock import SystemClock
from reconciler.cli import load
from reconciler.cli.common import status_store
from reconciler.cli.desired import open_source, rollout_records
from reconciler.cli.requests import ActRequest, HoldKind, default_actor
from reconciler.errors import TerminalError
from reconciler.model.desired import DesiredState
from reconciler.model.plan import Plan, Reason
from reconciler.model.policy import Basis

if TYPE_CHECKING:
    import threading

    from reconciler.adapters.libvirt.connection import ConnectionSettings
    from reconciler.engine.execute import Event, Gate
    from reconciler.engine.holds import JointLease
    from reconciler.engine.leadership import LeaseKeeper
    from reconciler.engine.ports import Hold, Loaded, Observer
    from reconciler.engine.power import PowerSaving
    from reconciler.engine.recovery import Recovery
    from reconciler.engine.rollouts import RolloutPorts
    from reconciler.engine.round import RoundPorts, RoundReport
    from reconciler.engine.sources import FolderSource, RepoSource
    from reconciler.engine.triggers import Wakeup
    from reconciler.model.snapshot import Snapshot

COORDINATION_ENV = "RECONCILER_COORDINATION"
YES_HELP = "act without asking for confirmation (drain: with --apply)"
RETRY_PERIOD = 2.0
RENEW_DEADLINE = 10.0


def lease_timing(duration: float | None) -> tuple[float, float]:
    """(retry period, renew deadline) of a lease of ``duration`` seconds (None: the default
    15 s: renewed every 2 s, given up 10 s after the last renewal), scaled alike."""
    if duration is None:
        return RETRY_PERIOD, RENEW_DEADLINE
    return max(0.2, duration * RETRY_PERIOD / 15), duration * RENEW_DEADLINE / 15


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


def add_coordination_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--coordination",
        default=os.environ.get(COORDINATION_ENV) or None,
        metavar="URL",
        help="hold the cluster through a coordination service instead of the git lease or "
        f"the machine's lock, e.g. etcd3+http://host:2379 (default: ${COORDINATION_ENV})",
    )


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
        "--local-lock-only",
        action="store_true",
        help="EMERGENCIES ONLY: hold the cluster by this machine's lock alone, bypassing the "
        "hold cluster.yaml declares (spec.hold) and the git lease of --repo, e.g. while their "
        "repository or etcd is down; an actor on another machine may then act at the same "
        "time. See docs/apply.md",
    )
    add_coordination_argument(p)


def add_actor_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--actor",
        default=default_actor(),
        help="with --repo: the Reconciler-Actor of the commits this command makes "
        "(default: $RECONCILER_ACTOR, else reconciler@<host>)",
    )


class ActingPath:
    """The acting path of one request: its source, its hold, the round's ports and the round.

    ``source`` is opened here and loaded by the command (once, or before every round of
    ``run``); the hold is built per cluster once the desired state names it.
    """

    def __init__(self, request: ActRequest) -> None:
        from reconciler.adapters.files.status import default_state_dir

        self.request = request
        self.source: FolderSource | RepoSource = open_source(request.source)
        self.state_dir: Path = request.state_dir or default_state_dir()
        self.identity = request.hold.identity or holder_identity(request.command)
        """This holder's name: in the lease, and in the records of the rollouts it carries."""
        self.actor = request.hold.identity or f"{request.command}@{socket.gethostname()}"
        """Who acts, as intents and move records name it: one name per command and machine
        (the machine's lock lets one of them act at a time), or the holder's --identity."""
        self.joint: JointLease | None = None
        """The two leases of the hold, once built: this machine's lock and the declared."""
        if request.command == "run":
            self.reading = load.Reading.RUN
        elif request.balance_on_sample:
            self.reading = load.Reading.LOOK  # a short sample is shown, and acted on
        else:
            self.reading = load.Reading.ACT

    def hold(
        self,
        desired: DesiredState,
        *,
        wakeup: Wakeup | None = None,
        round_stop: threading.Event | None = None,
        on_change: Callable[[bool], None] | None = None,
    ) -> LeaseKeeper:
        """The hold on ``desired``'s cluster, not yet taken."""
        import threading

        from reconciler.adapters.files.lock import FileLease, cluster_lock_path
        from reconciler.engine.holds import JointLease
        from reconciler.engine.leadership import LeaseKeeper
        from reconciler.engine.triggers import Wakeup

        cluster = desired.cluster.metadata.name
        hosts = [(h.name, h.uri) for h in desired.cluster.spec.hosts]
        local = FileLease(cluster_lock_path(cluster, hosts), command=self.request.command)
        lease: Any = local
        declared = self._declared(desired)
        if declared is not None:
            self.joint = JointLease(local, self._lease(cluster, *declared), declared[2])
            lease = self.joint
        retry, renew = lease_timing(self.request.hold.lease_duration)
        return LeaseKeeper(
            lease,
            wakeup or Wakeup(),
            round_stop if round_stop is not None else threading.Event(),
            retry_period=retry,
            renew_deadline=renew,
            on_change=on_change,
        )

    def _declared(self, desired: DesiredState) -> tuple[HoldKind, str, str] | None:
        """The lease taken besides this machine's lock: (kind, URL, how messages name it);
        None for the lock alone. The cluster's declaration wins over what the command was
        given; ``--local-lock-only`` bypasses both, and says so loudly."""
        hold, declared = self.request.hold, desired.cluster.spec.hold
        given: tuple[HoldKind, str, str] | None = None
        if hold.kind is HoldKind.ETCD and hold.url is not None:
            given = (HoldKind.ETCD, hold.url, f"the etcd lease at {_shown(hold.url)}")
        elif hold.kind is HoldKind.GIT_LEASE and hold.url is not None:
            given = (HoldKind.GIT_LEASE, hold.url, f"the git lease of {_shown(hold.url)}")
        chosen = given
        if declared is not None:
            where = " (cluster.yaml spec.hold)"
            kind, url = HoldKind.ETCD, declared.etcd or ""
            if declared.repository is not None:
                kind, url = HoldKind.GIT_LEASE, declared.repository
                if given is not None and same_repository(given[1], url):
                    url = given[1]  # --repo's URL: its credentials, if it has any
            chosen = (kind, url, declared.describe() + where)
            if hold.kind is HoldKind.ETCD and given is not None and given[1] != url:
                logging.getLogger(__name__).warning(
                    "--coordination is not used: cluster %s declares its hold, %s",
                    desired.cluster.metadata.name,
                    declared.describe(),
                )
        if hold.local_only:
            bypassed = chosen[2] if chosen is not None else "nothing (none is declared)"
            line = (
                f"WARNING: --local-lock-only: holding cluster {desired.cluster.metadata.name!r} "
                f"by this machine's lock alone, bypassing {bypassed}: an actor on another "
                "machine may move the same VMs at the same time"
            )
            print(line, file=sys.stderr)
            logging.getLogger(__name__).warning("%s", line)
            return None
        return chosen

    def _lease(self, cluster: str, kind: HoldKind, url: str, label: str) -> Any:
        identity = self.identity
        from reconciler.adapters.git.lease import LEASE_DURATION

        duration = self.request.hold.lease_duration or LEASE_DURATION
        renew = lease_timing(duration)[1]
        if kind is HoldKind.ETCD:
            from reconciler.adapters.etcd.lease import ToozLease

            return ToozLease(
                url, cluster, identity=identity, lease_duration=duration, renew_deadline=renew
            )
        from reconciler.adapters.git.lease import GitLease

        return GitLease(
            url,
            cluster,
            self.state_dir / cluster / "lease.git",
            identity=identity,
            lease_duration=duration,
            renew_deadline=renew,
        )

    def take(self, keeper: LeaseKeeper, cluster: str) -> None:
        """Take the hold, waiting up to the request's timeout; TerminalError naming the
        holder, or the hold that could not be taken and why (exit 1)."""
        timeout = self.request.hold.timeout
        if keeper.acquire(timeout):
            return
        waited = f" (waited {timeout:g} s)" if timeout else ""
        joint = self.joint
        if joint is not None and joint.why is not None:
            raise TerminalError(
                f"cluster {cluster!r} could not be held: {joint.label} could not be taken"
                f"{waited}: {joint.why}",
                hint="make it reachable (and writable) from here and try again; in an "
                "emergency --local-lock-only acts under this machine's lock alone (see "
                "docs/apply.md)",
            )
        who = keeper.holder() or "an unknown holder"
        raise TerminalError(
            f"cluster {cluster!r} is held by {who}{waited}",
            hint="wait for it to finish, or pass --lock-timeout DURATION to wait for it; "
            "a holder that died gives the cluster up by itself",
        )

    @contextlib.contextmanager
    def ports(self, desired: DesiredState, *, hold: Hold | None) -> Iterator[RoundPorts]:
        """The real adapters behind the round's ports; libvirt is imported only here.

        The observer, the migrator and the recorder share one connection per host, opened on
        first use and closed when the ``with`` block ends (the command, or one round of
        ``run``).
        """
        from reconciler.adapters.libvirt.cluster_observer import LibvirtClusterObserver
        from reconciler.adapters.libvirt.connection import ConnectionSettings
        from reconciler.adapters.libvirt.leftovers import Leftovers
        from reconciler.adapters.libvirt.migrator import LibvirtMigrator
        from reconciler.adapters.libvirt.observe_host import KEEPALIVE_COUNT
        from reconciler.adapters.libvirt.observer import observe_settings
        from reconciler.adapters.libvirt.pool import ConnectionPool
        from reconciler.adapters.libvirt.recorder import LibvirtRecorder
        from reconciler.engine.round import RoundPorts

        overrides = self.request.observe.overrides()
        if desired.policy.spec.basis is Basis.ALLOCATED and "sample_interval" not in overrides:
            # on basis allocated no decision reads a CPU reading: none is taken, neither by
            # the round's look nor by the fresh looks of admission (a third of their time)
            overrides["sample_interval"] = 0
            overrides["cpu_samples"] = False
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
        cluster = desired.cluster.metadata.name
        from reconciler.engine.sources import RepoSource

        if isinstance(self.source, RepoSource) and self.source.queue is None:
            from reconciler.adapters.files.record_queue import FileRecordQueue

            # kept across restarts: audit records not written yet, written by a later round
            self.source.queue = FileRecordQueue(cluster, self.state_dir)
        # kept across restarts: volumes a failed disk move left on a host that did not answer
        leftovers = Leftovers(self.state_dir / cluster / "leftover-volumes.json")
        observer = load.observer(
            LibvirtClusterObserver(desired.cluster, pool=pool, **overrides),
            desired,
            self.state_dir,
            self.reading,
        )
        try:
            yield RoundPorts(
                observer=observer,
                migrator=LibvirtMigrator(
                    desired,
                    connection=settings,
                    pool=pool,
                    leftovers=leftovers,
                    shared_paths=self.request.observe.shared_paths,
                ),
                recorder=LibvirtRecorder(desired.cluster, connection=settings, pool=pool),
                status=status_store(self.state_dir, cluster),
                clock=SystemClock(),
                source=self.source,
                hold=hold,
                rollouts=self.rollout_ports(desired, observer, settings)
                if self.request.command == "run" and desired.rollouts
                else None,
                power=self.power_saving(desired, observer, settings),
            )
        finally:
            pool.close()

    def power_saving(
        self, desired: DesiredState, observer: Observer, settings: ConnectionSettings
    ) -> PowerSaving | None:
        """Power saving (docs/power.md), where a host has a power driver: its book in the
        state directory, the BMCs through their drivers, libvirt asked whether a booted host
        answers."""
        if not any(h.power is not None for h in desired.cluster.spec.hosts):
            return None
        from reconciler.adapters.files.power import FilePowerStore
        from reconciler.adapters.files.recovery import FileRecoveryStore
        from reconciler.adapters.libvirt.restarter import LibvirtRestarter
        from reconciler.adapters.power.switches import PowerSwitches
        from reconciler.engine.power import PowerPorts, PowerSaving

        cluster = desired.cluster.metadata.name
        return PowerSaving(
            cluster,
            PowerPorts(
                switch=PowerSwitches(),
                store=FilePowerStore(cluster, self.state_dir),
                clock=SystemClock(),
                observer=observer,
                answers=LibvirtRestarter(desired.cluster, connection=settings),
                source=self.source,
                recovery=FileRecoveryStore(cluster, self.state_dir),
            ),
        )

    def rollout_ports(
        self, desired: DesiredState, observer: Observer, settings: ConnectionSettings
    ) -> RolloutPorts:
        """What ``run`` carries rollouts out with: their records (on the state repository's
        recording branch, else in the state directory), their commands (logs kept in the state
        directory) and the hosts' libvirt."""
        from reconciler.adapters.libvirt.host_control import LibvirtHostControl
        from reconciler.adapters.processes.rollout_commands import ProcessRolloutCommands
        from reconciler.engine.rollouts import RolloutPorts

        cluster = desired.cluster.metadata.name
        return RolloutPorts(
            records=rollout_records(self.source, cluster, self.state_dir),
            commands=ProcessRolloutCommands(self.state_dir / cluster / "rollouts"),
            hosts=LibvirtHostControl(desired.cluster, connection=settings),
            observer=observer,
            clock=SystemClock(),
        )

    def round(
        self,
        loaded: Loaded,
        ports: RoundPorts,
        *,
        act: bool,
        holds: bool,
        trigger: str,
        merge: bool,
        confirm: Callable[[Plan], bool],
        stop: threading.Event,
        abort: threading.Event,
        gate: Gate | None = None,
        on_event: Callable[[Event], None] = lambda e: None,
        on_plan: Callable[[Plan, Snapshot], None] = lambda p, s: None,
    ) -> RoundReport:
        """One round on what ``loaded`` read; ``trigger`` is what started it, ``merge`` that a
        change of the desired state asked for its moves (for the audit commit's trigger)."""
        from reconciler.engine.round import RoundOptions, run_round

        options = RoundOptions(
            act=act,
            holds=holds,
            trigger=trigger,
            revision=loaded.revision,
            placement_changed_at=loaded.placement_changed_at,
            audit_trigger=self.audit_trigger(trigger, merge=merge),
            confirm=confirm,
            gate=gate,
            stop=stop,
            abort=abort,
            on_event=on_event,
            on_plan=on_plan,
            instance=self.identity,
            actor=self.actor,
        )
        return run_round(loaded.desired, ports, options)

    def audit_trigger(self, round_trigger: str, *, merge: bool) -> Callable[[Plan], str]:
        """The Reconciler-Trigger of a round's audit commit: the request's, else told by the
        plan; a manual round says manual unless it drains or follows a merge."""
        chosen = self.request.trigger
        pick = audit_trigger(round_trigger, merge=merge)

        def trigger(plan: Plan) -> str:
            if chosen is not None:
                return chosen
            found = pick(plan)
            if round_trigger == "manual" and found not in ("maintenance", "merge"):
                return "manual"
            return found

        return trigger

    def recovery(self, desired: DesiredState, on_fence: Callable[[str, str], None]) -> Recovery:
        """Dead-host recovery over libvirt, the fence commands and the state directory (and,
        for a repository, the definitions recorded on its observed branch)."""
        from reconciler.adapters.files.recovery import FileRecoveryStore
        from reconciler.adapters.git.observations import ObservedBranch
        from reconciler.adapters.git.repo import GitStateRepo
        from reconciler.adapters.libvirt.restarter import LibvirtRestarter
        from reconciler.adapters.processes.fence import CommandFencer
        from reconciler.engine.recovery import Recovery, RecoveryPorts

        cluster = desired.cluster.metadata.name
        repo = getattr(self.source, "repo", None)  # a repository source: its observed branch
        ports = RecoveryPorts(
            fencer=CommandFencer(),
            restarter=LibvirtRestarter(desired.cluster),
            store=FileRecoveryStore(cluster, self.state_dir),
            clock=SystemClock(),
            source=self.source,
            observed=ObservedBranch(repo, cluster) if isinstance(repo, GitStateRepo) else None,
            on_fence=lambda host, outcome: on_fence(host, outcome.value),
        )
        return Recovery(cluster, ports)


def holder_identity(command: str) -> str:
    """A holder's name when --identity names none: command@host:pid:start."""
    return f"{command}@{socket.gethostname()}:{os.getpid()}:{int(time.time())}"


def _shown(url: str) -> str:
    """``url`` without a user or password, for messages."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


def same_repository(a: str, b: str) -> bool:
    """Whether two URLs name one repository: user info, a trailing ``/`` and ``.git`` aside."""

    def key(url: str) -> tuple[str, str, str]:
        parts = urlsplit(url)
        path = parts.path.rstrip("/").removesuffix(".git")
        where = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
        return parts.scheme, where, path

    return key(a) == key(b)


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

    from reconciler.core.recovery_round import recovered_status
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
    return recovered_status(status, report, now)


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
