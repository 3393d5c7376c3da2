"""One ``run`` instance on one cluster, and the request of ``run`` it is built from.

``reconciler run`` on a cluster folder serves one (``cli/run.py``); over a folder of clusters,
each cluster is served by one, without its own HTTP server, watcher or signals
(``cli/fleet.py``).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from reconciler.adapters.clock import SystemClock
from reconciler.cli import acting, load, requests
from reconciler.cli.common import EXIT_OK
from reconciler.cli.signals import Signals

if TYPE_CHECKING:  # the loop's machinery is imported when `run` runs, not for every command
    from reconciler.engine.execute import Gate
    from reconciler.engine.round import RoundReport
    from reconciler.model.desired import DesiredState
    from reconciler.model.policy import BalancePolicy
    from reconciler.model.snapshot import Snapshot
    from reconciler.model.status import ReconcileStatus

log = logging.getLogger(__name__)

HOLD_RETRY_SECONDS = 5.0
"""How soon a round that could not confirm its hold before acting is tried again."""

SECRET_ENV = "RECONCILER_WEBHOOK_SECRET"

DESIRED_CHANGES = ("desired-state-changed", "webhook")


@dataclass(frozen=True)
class RunRequest:
    acting: requests.ActRequest
    forge: requests.ForgeRequest
    poll: float
    """Seconds between looks for new commits (with a repository)."""
    listen: str
    """HOST:PORT of /metrics, /healthz and /webhook; "off": none."""
    log_format: Literal["text", "json"]
    concurrency: int
    """--concurrency: at most this many rounds at once over a folder of clusters."""
    clusters: str | None = None
    """--clusters: the glob of the cluster folders to serve; None: every one below PATH (when
    PATH is not itself a cluster folder)."""


class Instance:
    """One ``run`` instance on one cluster: the acting path with its hold kept by a keeper,
    dead-host recovery, the recorded observations and the loop that calls ``run_round``.

    The desired state is read again before every round (``load_policy``); a round holds the
    cluster and acts only in the policy's apply mode and window; with a repository, the
    round's plan is kept as the rolling proposal (``propose``).
    """

    def __init__(self, request: RunRequest) -> None:
        from reconciler.cli import observations
        from reconciler.engine import triggers
        from reconciler.engine.loop import Loop
        from reconciler.engine.metrics import Metrics
        from reconciler.engine.sources import RepoSource

        self.request = request
        self.path = acting.ActingPath(request.acting)
        self.source = self.path.source
        self.loaded = self.source.load()
        first = self.loaded.desired
        self.cluster = first.cluster.metadata.name
        self.repo = self.source if isinstance(self.source, RepoSource) else None
        at = request.acting.source
        self.repo_url = at.url if isinstance(at, requests.RepoRequest) else None
        self.metrics = Metrics(self.cluster)
        self.stop, self.abort = threading.Event(), threading.Event()
        self.wakeup = triggers.Wakeup()
        self.keeper = self.path.hold(
            first, wakeup=self.wakeup, round_stop=self.stop, on_change=self.metrics.set_leader
        )
        self.clock = SystemClock()
        self.last: RoundReport | None = None
        """The last round's report, while its proposal is made."""
        self.recorder = observations.Recorder.of(self.source, self.path.state_dir, self.cluster)
        self.recovery = self.path.recovery(first, on_fence=self.metrics.record_fence)
        self.sampling = load.Sampling(
            self.cluster,
            self.path.state_dir,
            lambda: self.loaded.desired,
            request.acting.observe.overrides,
        )
        self.loop = Loop(
            cluster=self.cluster,
            run_round=self.run_round,
            load_policy=self.load_policy,
            clock=self.clock,
            metrics=self.metrics,
            wakeup=self.wakeup,
            round_stop=self.stop,
            propose=self.propose if self.repo is not None else None,
            leadership=self.keeper,
            release=self.keeper.stop,
        )

    def load_policy(self) -> BalancePolicy:
        """The desired state read again (a repository fetched): its policy for the loop."""
        self.loaded = self.source.load()
        return self.loaded.desired.policy

    def run_round(self, trigger: str, act: bool) -> ReconcileStatus:
        """One round on the desired state last read; ``act``: in the policy's apply mode."""
        loaded = self.loaded
        desired = loaded.desired
        changed = any(t in trigger.split("+") for t in DESIRED_CHANGES)
        self.last = None
        with self.path.ports(desired, hold=self.keeper) as ports:
            ports.recovery = self.recover
            if ports.power is not None:  # a failed boot or power-off counts for the alert
                ports.power.ports.on_failure = self.metrics.record_power_failure
            if ports.rollouts is not None:  # a rollout reads it again before each step
                ports.rollouts.desired = self.desired_now
            report = self.path.round(
                loaded,
                ports,
                act=act,
                holds=True,
                trigger=trigger,
                merge=changed,
                confirm=acting.confirming(
                    self.keeper, self.wakeup, self.cluster, HOLD_RETRY_SECONDS
                ),
                gate=self.window(desired),
                stop=self.stop,
                abort=self.abort,
                on_plan=self.metrics.record_observation,
                on_event=self.metrics.record_event,
            )
        self.last = report
        self.recorder.after_round(report.snapshot, desired.policy, self.clock.now())
        return report.status

    def desired_now(self) -> DesiredState:
        """The desired state as its source holds it now (a repository fetched, its branch
        head read), leaving what the round read as it is: its record, its proposal and the
        loop go on with that. A rollout reads it before each step begins."""
        from reconciler.engine.sources import FolderSource
        from reconciler.errors import ConfigError

        if isinstance(self.source, FolderSource):
            return self.source.read(self.source.folder)
        repo = self.source
        repo.repo.fetch()
        commit = repo.repo.head(repo.branch)
        if commit is None:
            raise ConfigError(f"{repo.describe()}: the branch is gone", hint="push the branch back")
        return repo.read(repo.repo.checkout(commit) / repo.folder)

    def window(self, desired: DesiredState) -> Gate:
        """Asked before each migration starts: the policy's apply window still open."""
        from reconciler.core.windows import mode_now
        from reconciler.model.policy import Mode

        def check() -> str | None:
            if mode_now(desired.policy, self.clock.now()) is Mode.APPLY:
                return None
            return "the policy's apply window closed"

        return check

    def recover(
        self, desired: DesiredState, snapshot: Snapshot, status: ReconcileStatus
    ) -> ReconcileStatus:
        """Dead-host recovery after a round, acting only in apply mode on a confirmed hold."""
        from reconciler.model.policy import Mode

        act = desired.policy.spec.mode is Mode.APPLY and self.keeper.confirm()
        new: ReconcileStatus = acting.recover(
            self.recovery, desired, snapshot, status, act=act, wakeup=self.wakeup
        )
        return new

    def propose(self) -> None:
        """Keep the proposal of the round's own plan current: one observation and one plan
        per round."""
        from reconciler.cli.propose import power_proposed, propose_plan

        report, source, url = self.last, self.repo, self.repo_url
        if report is None or report.plan is None or source is None or url is None:
            return
        checkout = source.checkout
        if checkout is None:
            return
        _, line = propose_plan(
            self.request.forge,
            url=url,
            repo=source.repo,
            base=source.branch,
            source=checkout.commit,
            root=checkout.root,
            folder=checkout.folder,
            desired=self.loaded.desired,
            plan=report.plan,
            power=power_proposed(
                self.loaded.desired, report.snapshot, self.path.state_dir, self.clock.now()
            )
            if report.snapshot is not None
            else None,
        )
        log.info("proposal: %s", line)

    def health(self) -> tuple[bool, dict[str, object]]:
        """/healthz: failed when the hold is no longer kept or fencing a dead host failed."""
        if self.keeper.failure is not None:
            return False, {
                "state": "failed",
                "reason": "HoldKeeperFailed",
                "message": f"the hold on the cluster is no longer kept: {self.keeper.failure}",
            }
        failing = self.recovery.last.fence_failing
        if failing:
            return False, {
                "state": "failed",
                "reason": "FenceFailed",
                "message": "; ".join(f"fencing {h} failed: {d}" for h, d in failing.items())
                + ": its VMs are not restarted",
                "hosts": sorted(failing),
            }
        return self.loop.health.healthy, self.loop.health.report()

    def serve(self) -> int:
        """Serve HTTP, watch the desired state, keep the hold and run the loop until a
        signal stops it."""
        from reconciler.adapters.http.server import HttpServer, parse_listen
        from reconciler.engine import triggers
        from reconciler.engine.sources import RepoSource

        server = None
        if self.request.listen != "off":
            server = HttpServer(
                parse_listen(self.request.listen),
                registry=self.metrics.registry,
                health=self.health,
                on_push=self.wakeup.trigger,
                secret=os.environ.get(SECRET_ENV) or None,
                branch=self.repo.branch if self.repo is not None else None,
            )
        watcher: triggers.RevisionPoller | triggers.FolderWatcher
        if isinstance(self.source, RepoSource):
            repo, branch = self.source.repo, self.source.branch
            watcher = triggers.RevisionPoller(
                lambda: repo.remote_head(branch), self.wakeup, every=self.request.poll
            )
        else:
            watcher = triggers.FolderWatcher(self.source.folder, self.wakeup)
        # the loop's own stop event, not the round's: a standby taking the lease clears that one
        signals = Signals(abort=self.abort, on_stop=self.loop.stop)
        try:
            with signals.installed():
                if server is not None:
                    server.start()
                watcher.start()
                self.sampling.start()
                self.keeper.start()
                self.loop.run()
        finally:
            self.sampling.close()
            watcher.stop()
            if server is not None:
                server.stop()
        return EXIT_OK
